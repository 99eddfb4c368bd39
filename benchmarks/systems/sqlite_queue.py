"""A SQLite-backed transactional queue: WAL journal, ``synchronous=FULL`` (durable commits).

Schema: ``items(stream, partition, txn_id, seq, data)`` clustered on its key (WITHOUT
ROWID) and ``offsets(consumer, stream, partition, txn_id, seq)``. A producer transaction is
one SQLite transaction; a consumer's offset update is its own transaction, or, for
exactly-once, part of the same transaction that writes the outputs. Writer threads in one
process take a lock before ``BEGIN IMMEDIATE`` instead of spinning in SQLite's busy handler.
"""

from __future__ import annotations

import sqlite3
import threading
import time

from benchmarks.systems.base import Outcome, System, items_range, make_item, run_threads, transform

SCHEMA = """
CREATE TABLE IF NOT EXISTS streams(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,
                                   partitions INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS items(stream INTEGER NOT NULL, partition INTEGER NOT NULL,
                                 txn_id INTEGER NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL,
                                 PRIMARY KEY(stream, partition, txn_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS offsets(consumer TEXT NOT NULL, stream INTEGER NOT NULL,
                                   partition INTEGER NOT NULL, txn_id INTEGER NOT NULL,
                                   seq INTEGER NOT NULL,
                                   PRIMARY KEY(consumer, stream, partition)) WITHOUT ROWID;
"""
INSERT = "INSERT INTO items(stream, partition, txn_id, seq, data) VALUES (?, ?, ?, ?, ?)"
SELECT_AFTER = (
    "SELECT txn_id, seq, data FROM items WHERE stream = ? AND partition = 0 AND (txn_id, seq) > (?, ?) "
    "ORDER BY txn_id, seq LIMIT ?"
)
SET_OFFSET = (
    "INSERT INTO offsets(consumer, stream, partition, txn_id, seq) VALUES ('c', ?, 0, ?, ?) "
    "ON CONFLICT(consumer, stream, partition) DO UPDATE SET txn_id = excluded.txn_id, seq = excluded.seq"
)
IN, OUT = 1, 2


class SqliteWalFull(System):
    name = "sqlite-wal-full"
    label = "SQLite WAL, synchronous=FULL"
    description = "stdlib sqlite3, journal_mode=WAL, synchronous=FULL, one SQLite transaction per queue txn"

    def open(self) -> None:
        self.path = self.workdir / "queue.db"
        self.conn = self.connect()
        self.conn.executescript(SCHEMA)
        self.conn.executemany(
            "INSERT OR IGNORE INTO streams(id, name, partitions) VALUES (?, ?, 1)", [(IN, "in"), (OUT, "out")]
        )
        self.write_lock = threading.Lock()
        self._conns = [self.conn]

    def connect(self) -> sqlite3.Connection:
        c = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=60)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=FULL")
        return c

    def close(self) -> None:
        for c in getattr(self, "_conns", []):
            c.close()
        self._conns = []

    def _count(self, stream: int) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM items WHERE stream = ?", (stream,)).fetchone()[0]

    def _preload(self, n_items: int, batch: int) -> None:
        c = self.conn
        for start in range(0, n_items, 100 * batch):
            rows = [
                (IN, 0, i // batch, i % batch, make_item(i)) for i in range(start, min(n_items, start + 100 * batch))
            ]
            c.execute("BEGIN")
            c.executemany(INSERT, rows)
            c.execute("COMMIT")

    # 1 ---------------------------------------------------------------------------------
    def run_produce(self, n_items: int, batch: int) -> Outcome:
        items = items_range(0, batch)
        c = self.conn
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        for txn_id in range(n_items // batch):
            s = clock()
            c.execute("BEGIN")
            c.executemany(INSERT, [(IN, 0, txn_id, seq, item) for seq, item in enumerate(items)])
            c.execute("COMMIT")
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        return Outcome(n_items, seconds, lat, stored=self._count(IN), expected=n_items)

    # 2 ---------------------------------------------------------------------------------
    def run_concurrent(self, threads: int, per_thread: int) -> Outcome:
        item = make_item(0)
        lock = self.write_lock
        sql = (
            "INSERT INTO items(stream, partition, txn_id, seq, data) "
            "SELECT 1, 0, COALESCE(MAX(txn_id), 0) + 1, 0, ? FROM items WHERE stream = 1 AND partition = 0"
        )

        def factory(t: int):
            c = self.connect()
            self._conns.append(c)

            def op(i: int) -> None:
                with lock:
                    c.execute("BEGIN IMMEDIATE")
                    c.execute(sql, (item,))
                    c.execute("COMMIT")

            return op

        seconds, lat = run_threads(threads, per_thread, factory)
        n = threads * per_thread
        return Outcome(n, seconds, lat, stored=self._count(IN), expected=n)

    # 3 ---------------------------------------------------------------------------------
    def setup_consume(self, n_items: int, batch: int) -> None:
        self._preload(n_items, batch)

    def run_consume(self, n_items: int, batch: int) -> Outcome:
        c = self.conn
        last = (-1, -1)
        n = 0
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        while True:
            s = clock()
            rows = c.execute(SELECT_AFTER, (IN, *last, batch)).fetchall()
            if not rows:
                break
            for _t, _s, data in rows:
                data  # noqa: B018 - "process" the item
            n += len(rows)
            last = rows[-1][:2]
            c.execute(SET_OFFSET, (IN, *last))  # autocommit: one durable transaction
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        stored = c.execute("SELECT txn_id, seq FROM offsets WHERE consumer = 'c' AND stream = ?", (IN,)).fetchone()
        return Outcome(n, seconds, lat, stored=n if stored == last else -1, expected=n_items)

    # 4 ---------------------------------------------------------------------------------
    def setup_exactly_once(self, n_items: int, batch: int) -> None:
        self._preload(n_items, batch)

    def run_exactly_once(self, n_items: int, batch: int) -> Outcome:
        c = self.conn
        last = (-1, -1)
        n = 0
        out_txn = 0
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        while True:
            s = clock()
            c.execute("BEGIN IMMEDIATE")
            rows = c.execute(SELECT_AFTER, (IN, *last, batch)).fetchall()
            if not rows:
                c.execute("ROLLBACK")
                break
            c.executemany(INSERT, [(OUT, 0, out_txn, seq, transform(r[2])) for seq, r in enumerate(rows)])
            last = rows[-1][:2]
            c.execute(SET_OFFSET, (IN, *last))
            c.execute("COMMIT")
            out_txn += 1
            n += len(rows)
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        stored = self._count(OUT)
        off = c.execute("SELECT txn_id, seq FROM offsets WHERE consumer = 'c' AND stream = ?", (IN,)).fetchone()
        return Outcome(n, seconds, lat, stored=stored if off == last else -1, expected=n_items)

    # 5 ---------------------------------------------------------------------------------
    def run_many_streams(self, n_streams: int, batch: int) -> Outcome:
        c = self.conn
        item = make_item(0)
        base = 10  # ids 1 and 2 are taken by in/out
        t0 = time.perf_counter()
        for start in range(0, n_streams, batch):
            ids = range(base + start, base + min(n_streams, start + batch))
            c.execute("BEGIN")
            c.executemany("INSERT INTO streams(id, name, partitions) VALUES (?, ?, 1)", [(i, f"s{i}") for i in ids])
            c.executemany(INSERT, [(i, 0, 1, 0, item) for i in ids])
            c.execute("COMMIT")
        seconds = time.perf_counter() - t0
        stored = c.execute("SELECT COUNT(*) FROM streams WHERE id >= ?", (base,)).fetchone()[0]
        if self._count_range(base) != stored:
            stored = -1
        return Outcome(n_streams, seconds, [], stored=stored, expected=n_streams)

    def _count_range(self, base: int) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM items WHERE stream >= ?", (base,)).fetchone()[0]
