"""Subprocess workers of the engine tests (run as ``python workers.py ROLE ARGS...``).

Each worker prints one line per *acknowledged* unit of work, flushed, only after the call
that acknowledges it returned; the tests SIGKILL workers and compare those lines with what
a reopened engine holds.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time

import tstreams_embedded as ts


def expected_items(k: int) -> list[bytes]:
    """The items of the writer's k-th transaction (1 to 9 items, some large enough to span chunks)."""
    n = 1 + k % 9
    return [(b"%d:%d:" % (k, j)) + b"x" * (40_000 if (k + j) % 11 == 0 else 20) for j in range(n)]


def transform(item: bytes) -> bytes:
    """What the read-transform-write loop writes for an input item."""
    return b"T(" + item + b")"


def writer(path: str, start: str) -> None:
    """Durable writer: transactions k = start, start+1, ...; prints ``k partition id`` after
    each checkpoint returned."""
    k = int(start)
    with ts.open(path, durability="sync") as engine:
        producer = engine.producer("crash", batch_size=3)
        print("ready", flush=True)
        while True:
            txn = producer.new_transaction()
            for item in expected_items(k):
                txn.send(item)
            txn.checkpoint()
            print(k, txn.partition, txn.id, flush=True)
            k += 1
            if k % 5 == 0:  # and some instant transactions
                tid = producer.instant(expected_items(k))
                print(k, "?", tid, flush=True)
                k += 1


def xform(path: str, per_group: str) -> None:
    """Read-transform-write: consumer on stream "in", producer on "out", one CheckpointGroup
    checkpoint per ``per_group`` input transactions. Exits 0 (printing ``done``) at the end."""
    n = int(per_group)
    with ts.open(path, durability="sync") as engine:
        consumer = engine.consumer("in", "xform", start="oldest")
        producer = engine.producer("out")
        group = ts.CheckpointGroup(producer, consumer)
        print("ready", flush=True)
        while True:
            got = 0
            txn = producer.new_transaction()
            for _ in range(n):
                t = consumer.get_transaction()
                if t is None:
                    break
                txn.send_many([transform(i) for i in t.items])
                got += 1
            group.checkpoint()
            if got == 0:
                print("done", flush=True)
                return
            print("group", got, flush=True)


def produce(path: str, tag: str, count: str, durability: str) -> None:
    """Concurrent producer: ``count`` transactions to stream "shared"; prints ``partition id``."""
    with ts.open(path, durability=durability) as engine:
        producer = engine.producer("shared")
        print("ready", flush=True)
        sys.stdin.readline()  # start together with the other producer
        for i in range(int(count)):
            item = f"{tag}:{i}".encode()
            if i % 2:
                tid = producer.instant([item])
                p = "?"
            else:
                with producer.transaction() as txn:
                    txn.send(item)
                tid, p = txn.id, txn.partition
            print(p, tid, item.decode(), flush=True)


def instants(path: str, stream: str, count: str, pause: str) -> None:
    """Write ``count`` instant transactions (item ``b"remote-i"``), ``pause`` seconds apart."""
    with ts.open(path, durability="sync") as engine:
        producer = engine.producer(stream)
        for i in range(int(count)):
            producer.instant([b"remote-%d" % i])
            time.sleep(float(pause))
    print("done", flush=True)


def sqlite_sink(path: str, db_path: str, stream: str) -> None:
    """The exactly-once-into-sqlite recipe of docs/RECIPES.md, processing until the stream is
    drained (prints ``done``)."""
    with ts.open(path, durability="sync") as engine:
        db = sqlite3.connect(db_path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE IF NOT EXISTS events (item BLOB NOT NULL)")
        db.execute("CREATE TABLE IF NOT EXISTS tstreams_offsets (stream TEXT, consumer TEXT, partition INTEGER, "
                   "txn_id INTEGER, PRIMARY KEY (stream, consumer, partition))")
        consumer = engine.consumer(stream, "sqlite-sink", start="oldest", use_last_offset=False)
        rows = db.execute("SELECT partition, txn_id FROM tstreams_offsets WHERE stream = ? AND consumer = ?",
                          (stream, "sqlite-sink"))
        for partition, txn_id in rows:
            consumer.set_offset(partition, txn_id)
        print("ready", flush=True)
        while True:
            txn = consumer.get_transaction()
            if txn is None:
                print("done", flush=True)
                return
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO events (item) VALUES (?)", [(i,) for i in txn.items])
            db.execute("INSERT OR REPLACE INTO tstreams_offsets VALUES (?, ?, ?, ?)",
                       (stream, "sqlite-sink", txn.partition, txn.id))
            db.execute("COMMIT")


ROLES = {"writer": writer, "xform": xform, "produce": produce, "instants": instants, "sqlite_sink": sqlite_sink}

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    ROLES[sys.argv[1]](*sys.argv[2:])
