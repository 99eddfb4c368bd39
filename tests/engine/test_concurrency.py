"""Concurrency: group commit isolates failing requests, readers run while the map grows,
another process growing the map is adopted, and an ``async`` writer killed by SIGKILL loses
nothing it acknowledged."""

from __future__ import annotations

import random
import threading
import time

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.testing import eventually
from tstreams_embedded.testing import kill_process as kill

from .procs import run_worker, start_worker

KIB = 1024


def test_group_commit_applies_good_requests_and_isolates_bad_ones(make_engine) -> None:
    engine = make_engine(durability="sync")
    engine.create_stream("s", partitions=4)
    core = engine.backend
    results: dict[tuple[int, int], object] = {}
    barrier = threading.Barrier(8)

    def worker(w: int) -> None:
        barrier.wait()
        for i in range(60):
            good = [O.Instant("s", w % 4, O.pack_items([b"w%d-%d" % (w, i)]))]
            batch = good + ([O.Instant("s", 9, O.pack_items([b"bad"]))] if i % 5 == 0 else [])
            try:
                results[(w, i)] = core.submit(batch, durable=i % 2 == 0)[0]
            except errors.PartitionOutOfRange as exc:
                results[(w, i)] = exc

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 480
    c = engine.consumer("s", "c")
    visible = {}
    while (t := c.get_transaction()) is not None:
        visible[t.items[0]] = (t.partition, t.id)
    for (w, i), r in results.items():
        item = b"w%d-%d" % (w, i)
        if i % 5 == 0:
            assert isinstance(r, errors.PartitionOutOfRange) and item not in visible
        else:
            assert visible[item] == (w % 4, r)
    assert len(visible) == 8 * 48
    assert engine.stats()["log_seq"] == 1 + 8 * 48


def test_one_transaction_shared_by_threads_loses_and_duplicates_nothing(engine: ts.Engine) -> None:
    engine.create_stream("s")
    producer = engine.producer("s", batch_size=3)
    for trial in range(4):
        txn = producer.new_transaction()
        barrier = threading.Barrier(3)

        def sender(w: int, txn=txn, barrier=barrier, trial=trial) -> None:
            barrier.wait()
            for i in range(150):
                if i % 3 == 0:
                    txn.send_many([b"%d:%d:%d:m" % (trial, w, i)])
                else:
                    txn.send(b"%d:%d:%d" % (trial, w, i))
                if i % 50 == 0:
                    txn.flush()

        threads = [threading.Thread(target=sender, args=(w,)) for w in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        txn.checkpoint()
        assert txn.count == 450
    c = engine.consumer("s", "c")
    got = [t.items for t in iter(c.get_transaction, None)]
    assert len(got) == 4
    for trial, items in enumerate(got):
        expected = {b"%d:%d:%d" % (trial, w, i) + (b":m" if i % 3 == 0 else b"") for w in range(3) for i in range(150)}
        assert len(items) == 450 and set(items) == expected  # no loss, no duplicate
        for w in range(3):  # each thread's items in its own order
            mine = [x for x in items if x.split(b":")[1] == b"%d" % w]
            assert [int(x.split(b":")[2]) for x in mine] == list(range(150))


def test_reads_while_the_map_grows(make_engine) -> None:
    engine = make_engine(map_size=128 * KIB, durability="async")
    engine.create_stream("s")
    stop = threading.Event()
    failures: list[BaseException] = []
    seen = [0]

    def reader() -> None:
        c = engine.consumer("s", "r")
        try:
            while not stop.is_set():
                t = c.get_transaction(0)
                if t is None:
                    time.sleep(0.001)
                    continue
                assert t.items[0].startswith(b"%d:" % seen[0])
                seen[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(1)]
    for t in readers:
        t.start()
    producer = engine.producer("s")
    for i in range(150):
        producer.instant([(b"%d:" % i).ljust(20 * KIB, b"x")])
    eventually(lambda: failures or seen[0] >= 150, 60, 0.01)
    stop.set()
    for t in readers:
        t.join(30)
    assert not failures, failures
    assert seen[0] == 150
    assert engine.stats()["map_size"] > 128 * KIB


@pytest.mark.slow
def test_a_map_grown_by_another_process_is_adopted(make_engine, tmp_path) -> None:
    path = str(tmp_path / "data")
    engine = make_engine(path, map_size=256 * KIB)
    engine.create_stream("s")
    before = engine.stats()["map_size"]
    ids = [int(line) for line in run_worker("bulk", path, "s", 120, 32 * KIB, 256 * KIB)[1:]]
    assert len(ids) == 120
    c = engine.consumer("s", "c")
    got = [c.get_transaction(0) for _ in ids]  # reads adopt the bigger map
    assert [t.id for t in got] == ids
    assert all(t.items[0].startswith(b"%d:" % i) and len(t.items[0]) == 32 * KIB for i, t in enumerate(got))
    more = [engine.producer("s").instant([b"x" * (32 * KIB)]) for _ in range(40)]  # and so do writes
    assert [t.id for t in c.get_transactions_from_to(0, more[0] - 1, more[-1])] == more
    assert engine.stats()["map_size"] > before


@pytest.mark.slow
def test_sigkilled_async_writer_loses_nothing_it_acknowledged(tmp_path) -> None:
    """``async`` promises durability against a process kill (not an OS crash)."""
    path = str(tmp_path / "data")
    with ts.open(path) as e:
        e.create_stream("s")
    rng = random.Random(5)
    acked: list[int] = []
    for _ in range(5):
        proc = start_worker("bulk", path, "s", 100_000, 100, 1 << 30, "async")
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(rng.uniform(0.05, 0.3))
        kill(proc)
        acked += [int(line) for line in proc.stdout.read().split()]
        proc.stdout.close()
        proc.stderr.close()
    with ts.open(path) as e:
        c = e.consumer("s", "c")
        ids = []
        while (t := c.get_transaction(0)) is not None:
            ids.append(t.id)
    assert len(acked) > 50
    assert set(acked) <= set(ids)


@pytest.mark.parametrize("bad_every", [1, 2, 3, 7, 100])
def test_one_group_with_failing_requests_commits_every_good_one_exactly_once(make_engine, bad_every) -> None:
    """One commit group (submit_many) where some requests fail: the group is applied again
    without each failed one, and past two failures with a nested transaction per request.
    Either way every good request is applied once, in order, with a contiguous log."""
    engine = make_engine(durability="sync")
    engine.create_stream("s", partitions=2)
    core = engine.backend
    before = core.stats()
    calls = []
    for i in range(20):
        bad = i % bad_every == bad_every - 1
        calls.append(([O.Instant("s", 0, O.pack_items([b"%d" % i])),
                       *([O.Instant("s", 5, O.pack_items([b"bad"]))] if bad else [])], True))
    outcomes = core.submit_many(calls)
    good = [i for i in range(20) if i % bad_every != bad_every - 1]
    for i, (ok, value) in enumerate(outcomes):
        if i in good:
            assert ok, value
        else:
            assert not ok and isinstance(value, errors.PartitionOutOfRange)
    ids = [outcomes[i][1][0] for i in good]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    c = engine.consumer("s", "c")
    seen = []
    while (t := c.get_transaction(0)) is not None:
        seen.append((t.id, t.items))
    assert seen == [(ids[k], [b"%d" % i]) for k, i in enumerate(good)]
    after = core.stats()
    assert after["log_seq"] == before["log_seq"] + len(good)
    assert [e[0] for e in core.read_log(before["log_seq"] + 1)] == list(
        range(before["log_seq"] + 1, after["log_seq"] + 1))
    if good:
        assert after["commits"] == before["commits"] + 1  # one LMDB transaction for the whole group


def test_concurrent_durable_writers_share_transactions_and_fsyncs(make_engine) -> None:
    """8 threads of durable 1-item instants: requests share LMDB transactions and fsyncs
    (group commit), and every write is stored exactly once."""
    engine = make_engine(durability="sync")
    engine.create_stream("s")
    before = engine.backend.stats()
    barrier = threading.Barrier(8)
    ids: list[int] = []

    def worker(w: int) -> None:
        p = engine.producer("s", partition=0)
        barrier.wait()
        got = [p.instant([b"%d-%d" % (w, i)]) for i in range(40)]
        ids.extend(got)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    after = engine.backend.stats()
    writes = after["batches"] - before["batches"]
    assert writes == 320 and len(set(ids)) == 320
    assert after["commits"] - before["commits"] < writes  # some requests shared a transaction
    assert after["fsyncs"] - before["fsyncs"] < writes  # and an fsync
    assert sum(after["group_sizes"].values()) >= after["commits"] - before["commits"]
    assert any(k != "1" for k in after["group_sizes"])
    c = engine.consumer("s", "c")
    n = 0
    while (t := c.get_transaction(0)) is not None:
        n += len(t.items)
    assert n == 320
