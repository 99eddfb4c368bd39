"""Subprocess workers of the engine tests (run as ``python workers.py ROLE ARGS...``).

Each worker prints one line per *acknowledged* unit of work, flushed, only after the call
that acknowledges it returned; the tests SIGKILL workers and compare those lines with what
a reopened engine holds.
"""

from __future__ import annotations

import os
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


def bulk(path: str, stream: str, count: str, size: str, map_size: str, durability: str = "sync") -> None:
    """Write ``count`` instant transactions of one ``size``-byte item (item i starts with
    ``b"i:"``); prints ``partition id`` for each."""
    with ts.open(path, durability=durability, map_size=int(map_size)) as engine:
        producer = engine.producer(stream)
        print("ready", flush=True)
        for i in range(int(count)):
            item = (b"%d:" % i).ljust(int(size), b"b")
            print(producer.instant([item], partition=0), flush=True)


def hold(path: str, txn_ttl: str) -> None:
    """Register an open transaction on stream "held" (prints ``ready``), then close cleanly
    at the first line on stdin (prints ``closed``); or wait there to be killed."""
    with ts.open(path, durability="sync", txn_ttl=float(txn_ttl), compaction_interval=None) as engine:
        txn = engine.producer("held").new_transaction()
        txn.send(b"never visible")
        txn.flush()
        print("ready", txn.id, flush=True)
        sys.stdin.readline()
    print("closed", flush=True)


def fire(path: str) -> None:
    """Open the engine (its firer thread fires the due schedules), print ``ready`` and run
    until killed or until stdin ends."""
    with ts.open(path, durability="sync", compaction_interval=None):
        print("ready", flush=True)
        sys.stdin.readline()


def load_recipe() -> dict:
    """The exactly-once-into-SQLite recipe: the first python block of docs/RECIPES.md."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(repo, "docs", "RECIPES.md")
    with open(path, encoding="utf-8") as f:
        code = f.read().split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {"__name__": "recipe"}
    exec(compile(code, path, "exec"), namespace)  # noqa: S102 - our own documentation
    return namespace


def sqlite_sink(path: str, db_path: str, stream: str) -> None:
    """Run the recipe of docs/RECIPES.md until the stream is drained (prints ``done``)."""
    recipe = load_recipe()
    with ts.open(path, durability="sync") as engine:
        print("ready", flush=True)
        recipe["run"](engine, stream, db_path, stop_when_idle=True)
    print("done", flush=True)


def queue_worker(path: str, mode: str) -> None:
    """A competing consumer of work queue "jobs"/"workers": for each delivery it writes
    ``transform(item)`` to stream "out" and acks, either in one CheckpointGroup write per
    receive (``mode`` "group": exactly once), as two writes (``mode`` "plain": at least
    once), or with the acks staged to ride on the next receive (``mode`` "riding": at least
    once; ``receive(commit_staged=True)``). Runs until killed."""
    with ts.open(path, durability="sync") as engine:
        q = engine.work_queue("jobs", "workers", ack_timeout=1.0, max_deliveries=1000)
        producer = engine.producer("out")
        group = ts.CheckpointGroup(producer, q)
        print("ready", flush=True)
        while True:
            try:
                got = q.receive(max_items=5, timeout=1.0, commit_staged=mode == "riding")
            except ts.errors.DeliveryExpired:
                continue  # another worker has some of those items now; nothing was written
            if not got:
                continue
            time.sleep(0.01 * len(got))  # the work itself (kills land mid-way)
            if mode == "group":
                txn = producer.new_transaction()
                for d in got:
                    txn.send(transform(d.item))
                    d.ack(commit=False)
                try:
                    group.checkpoint()
                except ts.errors.DeliveryExpired:
                    continue  # another worker has these now; nothing was written
            elif mode == "riding":
                producer.instant([transform(d.item) for d in got])
                for d in got:
                    d.ack(commit=False)  # written with the next receive
            else:
                producer.instant([transform(d.item) for d in got])
                for d in got:
                    try:
                        d.ack()
                    except ts.errors.DeliveryExpired:
                        pass
            print("processed", len(got), flush=True)


ROLES = {"queue_worker": queue_worker, "writer": writer, "bulk": bulk, "xform": xform, "produce": produce,
         "instants": instants,
         "sqlite_sink": sqlite_sink, "hold": hold, "fire": fire}

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    ROLES[sys.argv[1]](*sys.argv[2:])
