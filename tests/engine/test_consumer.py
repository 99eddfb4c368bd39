"""Consumers: start positions, stored offsets, reads by ID / range / last, set_offset,
serializers. Runs on every backend of the ``engine`` fixture."""

from __future__ import annotations

import datetime as dt
import time

import pytest

import tstreams_embedded as ts


def _fill(engine: ts.Engine, stream: str, n: int, partition: int = 0) -> list[int]:
    producer = engine.producer(stream)
    return [producer.instant([b"t%d" % i], partition=partition) for i in range(n)]


def _drain(consumer: ts.Consumer, partition: int) -> list[int]:
    out = []
    while (t := consumer.get_transaction(partition)) is not None:
        out.append(t.id)
    return out


def test_start_oldest_newest_id_and_datetime(engine: ts.Engine) -> None:
    engine.create_stream("s")
    ids = _fill(engine, "s", 6)
    assert _drain(engine.consumer("s", "a", start="oldest"), 0) == ids
    assert _drain(engine.consumer("s", "b", start=ids[3]), 0) == ids[3:]  # an ID includes that transaction
    assert _drain(engine.consumer("s", "c", start=ids[3] + 1), 0) == ids[4:]
    at = ts.txn_time(ids[2])
    assert _drain(engine.consumer("s", "d", start=at), 0) == [i for i in ids if i >= ts.txn_id_at(at)]
    future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
    assert _drain(engine.consumer("s", "e", start=future), 0) == []
    newest = engine.consumer("s", "f", start="newest")
    assert _drain(newest, 0) == []
    later = _fill(engine, "s", 2)
    assert _drain(newest, 0) == later  # newest = what is opened after the consumer starts


def test_stored_offset_wins_unless_use_last_offset_is_false(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    ids0 = _fill(engine, "s", 4, partition=0)
    ids1 = _fill(engine, "s", 3, partition=1)
    c = engine.consumer("s", "billing")
    assert c.get_transaction(0).id == ids0[0]
    assert c.get_transaction(0).id == ids0[1]
    assert c.get_transaction(1).id == ids1[0]
    c.checkpoint()
    assert engine.backend.get_offsets("s", "billing") == {0: ids0[1], 1: ids1[0]}
    c.get_transaction(0)  # read, not checkpointed: read again after a restart
    resumed = engine.consumer("s", "billing", start="newest")  # the stored offsets win over start
    assert _drain(resumed, 0) == ids0[2:] and _drain(resumed, 1) == ids1[1:]
    fresh = engine.consumer("s", "billing", start="oldest", use_last_offset=False)
    assert _drain(fresh, 0) == ids0 and _drain(fresh, 1) == ids1
    other = engine.consumer("s", "other")  # offsets are per consumer name
    assert _drain(other, 0) == ids0


def test_offsets_of_only_some_partitions(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=3)
    ids = {p: _fill(engine, "s", 2, partition=p) for p in range(3)}
    c = engine.consumer("s", "c", partitions=[1])
    assert c.partitions == [1]
    assert c.get_transaction().id == ids[1][0]
    c.checkpoint()
    assert engine.backend.get_offsets("s", "c") == {1: ids[1][0]}
    full = engine.consumer("s", "c", start="newest")  # partition 1 resumes, the others start at "newest"
    assert full.offsets == {0: ids[0][-1], 1: ids[1][0], 2: ids[2][-1]}
    assert full.get_transaction().id == ids[1][1]


def test_get_transaction_any_partition_is_fair(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=3)
    for p in range(3):
        _fill(engine, "s", 3, partition=p)
    c = engine.consumer("s", "c")
    got = [c.get_transaction().partition for _ in range(9)]
    assert got == [0, 1, 2] * 3
    assert c.get_transaction() is None


def test_reads_by_id_range_and_last(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    producer = engine.producer("s")
    ids = _fill(engine, "s", 5)
    cancelled = producer.new_transaction(0)
    cancelled.send(b"never")
    cancelled.flush()
    cancelled.cancel()
    more = _fill(engine, "s", 2)
    c = engine.consumer("s", "c")
    t = c.get_transaction_by_id(0, ids[2])
    assert (t.id, t.partition, t.items, t.stream) == (ids[2], 0, [b"t2"], "s")
    assert t.timestamp == ts.txn_time(ids[2]) and t.timestamp.tzinfo is not None
    assert len(t) == 1
    assert c.get_transaction_by_id(0, cancelled.id) is None
    assert c.get_transaction_by_id(0, ids[2] + 12345) is None
    assert c.get_transaction_by_id(1, ids[2]) is None
    assert [x.id for x in c.get_transactions_from_to(0, ids[1], ids[3])] == ids[2:4]  # (from, to] as T-streams
    assert [x.id for x in c.get_transactions_from_to(0, ids[1] - 1, ids[3])] == ids[1:4]
    assert c.get_transactions_from_to(0, ids[3], ids[3]) == []
    assert [x.id for x in c.get_transactions_from_to(0, 0, 2**62)] == ids + more
    assert c.get_transactions_from_to(0, ids[3], ids[1]) == []
    assert c.get_last_transaction(0).id == more[-1]
    assert c.get_last_transaction(1) is None
    assert c.offsets == {0: 0, 1: 0}  # none of these moves the position
    open_txn = producer.new_transaction(0)
    assert open_txn.id > more[-1]
    after_open = _fill(engine, "s", 1)
    assert c.get_last_transaction(0).id == after_open[0]  # last checkpointed, even behind an open one
    assert [x.id for x in c.get_transactions_from_to(0, 0, 2**62)] == ids + more  # stops at the open one
    assert _drain(c, 0) == ids + more
    open_txn.send(b"now")
    open_txn.checkpoint()
    assert _drain(c, 0) == [open_txn.id, after_open[0]]


def test_set_offset(engine: ts.Engine) -> None:
    engine.create_stream("s")
    ids = _fill(engine, "s", 5)
    c = engine.consumer("s", "c")
    assert c.get_transaction(0).id == ids[0]
    c.set_offset(0, ids[2])
    assert c.offsets == {0: ids[2]}
    assert _drain(c, 0) == ids[3:]
    c.set_offset(0, 0)
    assert _drain(c, 0) == ids
    c.set_offset(0, ids[1])
    c.checkpoint()
    assert engine.backend.get_offsets("s", "c") == {0: ids[1]}


def test_a_registered_open_transaction_blocks_until_resolved(engine: ts.Engine) -> None:
    engine.create_stream("s")
    producer = engine.producer("s")
    first = _fill(engine, "s", 1)
    blocker = producer.new_transaction(0)
    assert blocker.id > first[0]  # reading the ID registers it
    silent = producer.new_transaction(0)  # never flushed: not in storage, blocks nobody
    silent.send(b"silent")
    behind = _fill(engine, "s", 1)
    c = engine.consumer("s", "c")
    assert _drain(c, 0) == first
    assert c.offsets == {0: first[0]}
    blocker.send(b"x")
    blocker.checkpoint()
    assert _drain(c, 0) == [blocker.id, behind[0]]
    silent.checkpoint()
    assert _drain(c, 0) == [silent.id] and silent.id > behind[0]


def test_a_closed_producer_blocks_no_reader(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    producer = engine.producer("s")
    blockers = [producer.new_transaction(p) for p in (0, 1, 0)]
    for t in blockers:
        t.send(b"never")
        t.flush()  # registered: blocks readers of its partition
    unregistered = producer.new_transaction(1)
    unregistered.send(b"never either")
    behind = _fill(engine, "s", 1, 0) + _fill(engine, "s", 1, 1)
    c = engine.consumer("s", "c")
    assert c.get_transaction() is None
    seq = engine.stats()["log_seq"]
    producer.close()
    producer.close()  # idempotent
    assert engine.stats()["log_seq"] == seq + 1  # every open transaction cancelled in ONE write
    assert not any(t.is_open for t in [*blockers, unregistered])
    assert _drain(c, 0) + _drain(c, 1) == behind  # nothing blocks; nothing of theirs is visible
    with pytest.raises(ts.errors.EngineClosed):
        producer.new_transaction()
    with pytest.raises(ts.errors.EngineClosed):
        producer.instant([b"x"])
    with engine.producer("s") as scoped:  # a context manager closes it too
        assert scoped.new_transaction(0).id > 0  # registered: would block partition 0
    assert _drain(c, 0) == [] and engine.producer("s").instant([b"next"], partition=0) > 0
    assert [t.items for t in iter(lambda: c.get_transaction(0), None)] == [[b"next"]]


def test_a_cleanly_closed_engine_handle_blocks_no_reader(make_engine, tmp_path) -> None:
    writer = make_engine(tmp_path / "d", txn_ttl=600)
    reader = make_engine(tmp_path / "d", txn_ttl=600)
    writer.create_stream("s", partitions=2)
    producers = [writer.producer("s", partition=p) for p in (0, 1)]
    open_txns = [p.new_transaction() for p in producers]
    for t in open_txns:
        assert t.id > 0
    behind = [reader.producer("s").instant([b"after"], partition=p) for p in (0, 1)]
    c = reader.consumer("s", "c")
    assert c.get_transaction() is None  # blocked by the writer's open transactions
    seq = reader.stats()["log_seq"]
    writer.close()
    assert reader.stats()["log_seq"] == seq + 1  # one atomic write cancelled both
    assert _drain(c, 0) + _drain(c, 1) == behind


def test_cancelled_transactions_are_skipped(engine: ts.Engine) -> None:
    engine.create_stream("s")
    producer = engine.producer("s", batch_size=2)
    with pytest.raises(RuntimeError):
        with producer.transaction(0) as txn:
            txn.send_many([b"a", b"b", b"c"])  # flushed: registered
            raise RuntimeError("boom")  # cancels
    with producer.transaction(0) as ok:
        ok.send(b"ok")
    c = engine.consumer("s", "c")
    t = c.get_transaction(0)
    assert t.items == [b"ok"] and c.get_transaction(0) is None


@pytest.mark.parametrize("serializer,values", [
    ("msgpack", [{"a": 1, "b": [1, 2.5, None]}, "text", 7, b"raw"]),
    ("json", [{"a": 1, "b": [1, 2.5, None]}, "text", 7, ["x"]]),
    ("str", ["plain", "ünïcödé", ""]),
    (None, [b"\x00\x01", b""]),
    ((lambda v: v.to_bytes(8, "big"), lambda b: int.from_bytes(b, "big")), [1, 2**40]),
])
def test_serializers_round_trip(engine: ts.Engine, serializer, values) -> None:
    engine.create_stream("s")
    producer = engine.producer("s", serializer=serializer)
    with producer.transaction() as txn:
        txn.send(values[0])
        txn.send_many(values[1:])
    producer.instant(values)
    c = engine.consumer("s", "c", serializer=serializer)
    assert c.get_transaction().items == values
    assert c.get_transaction().items == values
    raw = engine.consumer("s", "raw").get_transaction()
    assert all(isinstance(i, bytes) for i in raw.items)


def test_consumer_checkpoint_is_one_atomic_write(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=4)
    for p in range(4):
        _fill(engine, "s", 2, partition=p)
    c = engine.consumer("s", "c")
    for _ in range(6):
        c.get_transaction()
    seq = engine.stats()["log_seq"]
    c.checkpoint()
    assert engine.stats()["log_seq"] == seq + 1
    assert engine.backend.get_offsets("s", "c") == c.offsets


def test_timestamps_follow_the_clock(engine: ts.Engine) -> None:
    engine.create_stream("s")
    before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5)
    tid = engine.producer("s").instant([b"x"])
    t = engine.consumer("s", "c").get_transaction()
    assert t.id == tid and before <= t.timestamp <= dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=5)
    time.sleep(0.002)
    assert ts.txn_id_at(dt.datetime.now(dt.timezone.utc)) > tid
