"""Work queues (issue 22 §2): receive + acknowledge 100-byte items, durable, with each
system's usual competing-consumer API.

* ours: ``engine.work_queue`` (embedded, ``durability="sync"``): ``q.receive(batch)``, then the
  batch's acks staged and written by ``q.commit()``: two durable writes per batch; or
  (``acks="riding"``) the staged acks ride on the next ``q.receive(batch, commit_staged=True)``:
  one durable write per batch (the last batch's acks: a final ``q.commit()``, timed).
* Redis Streams consumer groups: ``XREADGROUP GROUP g c COUNT batch STREAMS in >`` then one
  ``XACK in g id...`` per batch, AOF ``appendfsync always`` (durable) or ``everysec``.
* SQLite, the usual table queue: WAL, ``synchronous=FULL``; a receive is one transaction
  that claims the oldest available rows (``UPDATE … WHERE id IN (SELECT … LIMIT batch)
  RETURNING``, with a lock deadline and a delivery count), an ack one transaction that
  deletes them.
"""

from __future__ import annotations

import sqlite3
import time

from benchmarks.systems.base import Outcome, System, items_range
from benchmarks.systems.ours import OursEmbedded
from benchmarks.systems.redis_streams import FIELD, RedisAlways, RedisEverysec

_TXN = 100  # items per preloaded transaction


class OursQueue(OursEmbedded):
    name = "ours-queue"
    label = "tstreams-embedded work queue (in-process)"
    description = "engine.work_queue; receive(batch) + staged acks committed in one write (durability sync)"

    def setup_queue(self, n_items: int, batch: int, acks: str = "separate") -> None:
        self.engine.create_stream("in")
        p = self.engine.producer("in")
        for start in range(0, n_items, _TXN):
            p.instant(items_range(start, min(_TXN, n_items - start)))
        self.queue = self.engine.work_queue("in", "g", ack_timeout=60, consumer="c")

    def run_queue(self, n_items: int, batch: int, acks: str = "separate") -> Outcome:
        q = self.queue
        riding = acks == "riding"
        done = 0
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        while done < n_items:
            s = clock()
            got = q.receive(max_items=batch, timeout=0, commit_staged=riding)
            if not got:
                break
            for d in got:
                d.item  # noqa: B018 - "process" the item
                d.ack(commit=False)
            if not riding:
                q.commit()
            done += len(got)
            lat.append(clock() - s)
        q.commit()  # riding: the last batch's acks (nothing left to ride on); else nothing staged
        seconds = time.perf_counter() - t0
        acked = q.status().counters["acked"]
        return Outcome(done, seconds, lat, stored=acked, expected=n_items)


class _RedisGroup:
    """Consumer-group receive + ack on a Redis Streams system (mixed into its classes)."""

    def setup_queue(self, n_items: int, batch: int) -> None:
        self._preload("in", n_items)  # type: ignore[attr-defined]
        self.client.xgroup_create("in", "g", id="0")  # type: ignore[attr-defined]

    def run_queue(self, n_items: int, batch: int) -> Outcome:
        client = self.client  # type: ignore[attr-defined]
        done = 0
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        while done < n_items:
            s = clock()
            res = client.xreadgroup("g", "c", {"in": ">"}, count=batch)
            if not res:
                break
            msgs = res[0][1]
            for _id, fields in msgs:
                fields[FIELD]  # noqa: B018 - "process" the item
            client.xack("in", "g", *[m[0] for m in msgs])
            done += len(msgs)
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        pending = client.xpending("in", "g")["pending"]
        return Outcome(done, seconds, lat, stored=done - pending, expected=n_items)


class RedisQueueAlways(_RedisGroup, RedisAlways):
    name = "redis-queue-always"
    label = "Redis Streams consumer group (AOF always)"
    description = "XREADGROUP COUNT batch + one XACK per batch; appendonly yes, appendfsync always"


class RedisQueueEverysec(_RedisGroup, RedisEverysec):
    name = "redis-queue-everysec"
    label = "Redis Streams consumer group (AOF everysec)"
    description = "XREADGROUP COUNT batch + one XACK per batch; appendonly yes, appendfsync everysec"


class SqliteQueue(System):
    name = "sqlite-queue"
    label = "SQLite table queue (WAL, synchronous=FULL)"
    description = "claim rows with UPDATE ... RETURNING (lock deadline, delivery count), ack with DELETE"

    def open(self) -> None:
        self.conn = sqlite3.connect(self.workdir / "queue.db", isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, data BLOB NOT NULL, "
                          "locked_until INTEGER NOT NULL DEFAULT 0, consumer TEXT, "
                          "deliveries INTEGER NOT NULL DEFAULT 0)")
        self.conn.execute("CREATE INDEX IF NOT EXISTS jobs_available ON jobs(locked_until, id)")

    def close(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            self.conn = None
            conn.close()

    def setup_queue(self, n_items: int, batch: int) -> None:
        self.conn.execute("BEGIN")
        self.conn.executemany("INSERT INTO jobs(data) VALUES (?)", [(i,) for i in items_range(0, n_items)])
        self.conn.execute("COMMIT")

    def run_queue(self, n_items: int, batch: int) -> Outcome:
        conn = self.conn
        done = 0
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        while done < n_items:
            s = clock()
            now = int(time.time() * 1000)
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute(
                "UPDATE jobs SET locked_until = ?, consumer = 'c', deliveries = deliveries + 1 WHERE id IN "
                "(SELECT id FROM jobs WHERE locked_until < ? ORDER BY id LIMIT ?) RETURNING id, data",
                (now + 60_000, now, batch)).fetchall()
            conn.execute("COMMIT")
            if not rows:
                break
            for _id, data in rows:
                data  # noqa: B018 - "process" the item
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("DELETE FROM jobs WHERE id = ?", [(r[0],) for r in rows])
            conn.execute("COMMIT")
            done += len(rows)
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        left = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        return Outcome(done, seconds, lat, stored=n_items - left, expected=n_items)
