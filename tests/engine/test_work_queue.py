"""Work queues (``engine.work_queue``): competing consumers, acknowledgements, redelivery,
dead letters, bounds and bad input, embedded and remote alike (the ``engine`` fixture)."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.operator.check import check_directory
from tstreams_embedded.engine.protocol import ops as O


def produce(engine: ts.Engine, stream: str, n: int, per_txn: int = 3) -> set[bytes]:
    p = engine.producer(stream)
    sent: set[bytes] = set()
    for start in range(0, n, per_txn):
        items = [b"item-%05d" % i for i in range(start, min(n, start + per_txn))]
        p.instant(items)
        sent.update(items)
    return sent


def all_items(engine: ts.Engine, stream: str) -> list[bytes]:
    out: list[bytes] = []
    info = engine.get_stream(stream)
    for partition in range(info.partitions):
        c = engine.consumer(stream, f"reader-{partition}", partitions=[partition])
        while True:
            txn = c.get_transaction()
            if txn is None:
                break
            out.extend(txn.items)
    return out


def test_each_item_goes_to_one_consumer_at_a_time_and_acks_settle_it(engine: ts.Engine) -> None:
    engine.create_stream("jobs", partitions=3)
    sent = produce(engine, "jobs", 40)
    a = engine.work_queue("jobs", "workers", consumer="a")
    b = engine.work_queue("jobs", "workers", consumer="b")
    got: list[bytes] = []
    while True:
        da, db = a.receive(7, timeout=0), b.receive(5, timeout=0)
        if not da and not db:
            break
        for d in da + db:
            assert d.delivery_count == 1
            got.append(d.item)
            d.ack()
    assert sorted(got) == sorted(sent)  # every item once, none twice
    status = a.status(full=True)
    assert status.counters["delivered"] == 40 and status.counters["acked"] == 40
    assert status.in_flight == 0 and status.waiting == 0 and sum(status.pending.values()) == 0
    assert not status.ready


def test_an_item_not_acknowledged_in_time_is_delivered_again(engine: ts.Engine) -> None:
    engine.create_stream("jobs")
    produce(engine, "jobs", 1)
    a = engine.work_queue("jobs", "g", consumer="a", ack_timeout=0.3)
    b = engine.work_queue("jobs", "g", consumer="b", ack_timeout=0.3)
    [first] = a.receive(10, timeout=0)
    assert b.receive(10, timeout=0) == []  # locked to a
    [again] = b.receive(10, timeout=10)  # wakes when the lock runs out
    assert (again.item, again.delivery_count) == (first.item, 2)
    with pytest.raises(errors.DeliveryExpired, match="no longer current"):
        first.ack()  # a's delivery is not the current one any more
    again.ack()
    assert a.status().counters["redelivered"] == 1


def test_in_progress_extends_the_lock_and_nak_delays_the_redelivery(engine: ts.Engine) -> None:
    engine.create_stream("jobs")
    produce(engine, "jobs", 1)
    q = engine.work_queue("jobs", "g", consumer="a", ack_timeout=30)
    [d] = q.receive(timeout=0)
    d.in_progress()
    assert q.receive(timeout=0) == []
    d.nak(delay=0.2, error="try later")
    status = q.status()
    assert (status.in_flight, status.waiting) == (0, 1)
    [d2] = q.receive(timeout=10)
    assert d2.delivery_count == 2 and d2.item == d.item


def test_a_poison_item_lands_in_the_dead_letter_stream_after_exactly_max_deliveries(engine: ts.Engine) -> None:
    engine.create_stream("orders")
    engine.create_stream("orders-dlq")
    produce(engine, "orders", 1)
    q = engine.work_queue("orders", "g", consumer="a", max_deliveries=3, dead_letter="orders-dlq")
    counts = []
    for _ in range(5):
        got = q.receive(timeout=0)
        if not got:
            break
        [d] = got
        counts.append(d.delivery_count)
        assert all_items(engine, "orders-dlq") == []  # not before the last delivery failed
        d.nak(delay=0, error=f"boom {d.delivery_count}")
    assert counts == [1, 2, 3]
    [record] = all_items(engine, "orders-dlq")
    dead = msgpack.unpackb(record)
    assert dead["item"] == b"item-00000" and dead["deliveries"] == 3 and dead["error"] == "boom 3"
    assert dead["stream"] == "orders" and dead["group"] == "g" and dead["reason"] == "max_deliveries"
    assert q.status().counters["dead_lettered"] == 1


def test_term_sends_an_item_to_the_dead_letter_stream_at_once(engine: ts.Engine) -> None:
    engine.create_stream("s")
    engine.create_stream("dlq")
    produce(engine, "s", 2)
    q = engine.work_queue("s", "g", dead_letter="dlq")
    d1, d2 = q.receive(timeout=0)
    d1.term("unparseable")
    d2.ack()
    [record] = all_items(engine, "dlq")
    assert msgpack.unpackb(record)["reason"] == "terminated"
    assert q.receive(timeout=0) == []


def test_a_group_checkpoint_with_a_stale_ack_writes_nothing(engine: ts.Engine) -> None:
    """Process, write the output, ack, in one CheckpointGroup: if the delivery was taken
    over meanwhile, the output is not written (so it is never written twice)."""
    engine.create_stream("in")
    engine.create_stream("out")
    produce(engine, "in", 1)
    slow = engine.work_queue("in", "g", consumer="slow", ack_timeout=0.3)
    fast = engine.work_queue("in", "g", consumer="fast", ack_timeout=0.3)  # settings are the group's
    [d] = slow.receive(timeout=0)
    producer = engine.producer("out")
    txn = producer.new_transaction()
    txn.send(d.item.upper())
    d.ack(commit=False)
    [again] = fast.receive(timeout=10)  # slow's lock ran out
    with pytest.raises(errors.DeliveryExpired):
        engine.checkpoint_group(producer, slow).checkpoint()
    assert all_items(engine, "out") == []
    out = engine.producer("out")
    t2 = out.new_transaction()
    t2.send(again.item.upper())
    again.ack(commit=False)
    engine.checkpoint_group(out, fast).checkpoint()
    assert all_items(engine, "out") == [b"ITEM-00000"]
    assert fast.status().counters["acked"] == 1


def test_items_of_an_open_transaction_are_not_handed_out(engine: ts.Engine) -> None:
    engine.create_stream("s")
    p = engine.producer("s")
    txn = p.new_transaction()
    assert txn.id > 0  # reading the ID registers the open transaction
    txn.send(b"late")
    p2 = engine.producer("s")
    p2.instant([b"after"])  # behind the open transaction
    q = engine.work_queue("s", "g")
    assert q.receive(timeout=0) == []
    txn.checkpoint()
    assert [d.item for d in q.receive(timeout=5)] == [b"late", b"after"]


def test_max_in_flight_bounds_what_is_handed_out(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    produce(engine, "s", 300, per_txn=10)
    q = engine.work_queue("s", "g", max_in_flight=50)
    first = q.receive(max_items=1000, timeout=0)
    assert len(first) == 50
    assert q.receive(max_items=1000, timeout=0) == []  # back-pressure until some are settled
    for d in first[:20]:
        d.ack()
    assert len(q.receive(max_items=1000, timeout=0)) == 20
    assert q.status(full=True).in_flight == 50


def test_settled_items_leave_no_keys_behind(tmp_path: Any) -> None:
    path = tmp_path / "data"
    with ts.open(path) as e:
        e.create_stream("s", partitions=2)
        produce(e, "s", 2_000, per_txn=20)
        q = e.work_queue("s", "g", max_in_flight=100)
        done = 0
        while True:
            got = q.receive(max_items=100, timeout=0)
            if not got:
                break
            for d in got:
                d.ack(commit=False)
            q.commit()
            done += len(got)
        assert done == 2_000
    report = check_directory(str(path))
    assert report.ok, report.problems
    # the group's settings and one cursor per partition: no key per settled item
    assert report.counts["queue_entries"] == 1 + 2


BAD_CALLS: list[tuple[Any, type, str]] = [
    (lambda e: e.work_queue("nope", "g"), errors.StreamNotFound, "nope"),
    (lambda e: e.work_queue("s", ""), errors.InvalidArgument, "group name"),
    (lambda e: e.work_queue("s", "g", ack_timeout=float("nan")), errors.InvalidArgument, "ack_timeout"),
    (lambda e: e.work_queue("s", "g", max_deliveries=0), errors.InvalidArgument, "max_deliveries"),
    (lambda e: e.work_queue("s", "g", dead_letter="s"), errors.InvalidArgument, "another stream"),
    (lambda e: e.work_queue("s", "g", dead_letter="missing"), errors.StreamNotFound, "missing"),
    (lambda e: e.work_queue("s", "g", backoff=[-1]), errors.InvalidArgument, "backoff"),
    (lambda e: e.work_queue("s", "g").receive(max_items=0), errors.InvalidArgument, "max_items"),
    (lambda e: e.work_queue("s", "g").receive(timeout=-1), errors.InvalidArgument, "timeout"),
    (lambda e: e.backend.queue_status("s", "undeclared"), errors.WorkQueueNotFound, "undeclared"),
    (lambda e: e.backend.submit([O.QueueSettle("s", "g", "c", 99, [[0, 1, 0, 1]])]), errors.InvalidArgument,
     "action"),
    (lambda e: e.backend.submit([O.QueueSettle("s", "g", "c", 1, [])]), errors.InvalidArgument, "deliveries"),
    (lambda e: e.backend.submit([O.QueueSettle("s", "g", "c", 1, [[0, 1]])]), errors.InvalidArgument,
     "each delivery"),
    (lambda e: e.backend.submit([O.QueueReceive("s", "g", "c", 1, 1, None, [[0, 1, 0, 1]])]),
     errors.InvalidArgument, "resolved|engine"),
]


def test_bad_input_gets_a_specific_error(engine: ts.Engine) -> None:
    engine.create_stream("s")
    produce(engine, "s", 1)
    for call, error, match in BAD_CALLS:
        with pytest.raises(error, match=match):
            call(engine)
    assert engine.work_queue("s", "g").receive(timeout=0)[0].item == b"item-00000"  # nothing was broken


def test_settling_twice_is_refused(engine: ts.Engine) -> None:
    engine.create_stream("s")
    produce(engine, "s", 1)
    q = engine.work_queue("s", "g")
    [d] = q.receive(timeout=0)
    d.ack()
    with pytest.raises(errors.InvalidArgument, match="already settled"):
        d.ack()
    d._settled = False  # a forged second ack reaches the engine: refused there too
    with pytest.raises(errors.DeliveryExpired, match="settled"):
        d.ack()


def test_deleting_the_stream_drops_its_groups(engine: ts.Engine) -> None:
    engine.create_stream("s")
    produce(engine, "s", 3)
    engine.work_queue("s", "g").receive(timeout=0)
    engine.delete_stream("s")
    engine.create_stream("s")
    with pytest.raises(errors.WorkQueueNotFound):
        engine.backend.queue_status("s", "g")


def test_replaying_the_log_reproduces_the_queue_state(tmp_path: Any) -> None:
    """A replica applying the commit log reaches the same queue state and dead letters (the
    receives' deliveries are recomputed from the same state and clock, and checked)."""
    from tstreams_embedded.engine.storage.core import Core

    a = ts.open(tmp_path / "a", keepalive_interval=None, compaction_interval=None)
    b = Core(tmp_path / "b", "async", compaction_interval=None)
    try:
        a.create_stream("s", partitions=2)
        a.create_stream("dlq")
        produce(a, "s", 30, per_txn=4)
        q = a.work_queue("s", "g", max_deliveries=2, dead_letter="dlq", max_in_flight=10)
        first = q.receive(6, timeout=0)
        first[0].ack()
        first[1].nak(0, "x")
        first[2].term("y")
        first[3].in_progress()
        second = q.receive(20, timeout=0)
        second[0].nak(0)
        q.receive(20, timeout=0)
        log = a.backend.read_log(0, 100_000)
        assert b.apply_log(log) == len(log)
        for full in (False, True):
            assert b.queue_status("s", "g", full) == a.backend.queue_status("s", "g", full)
        assert b.fetch("dlq", 0, 0).txns == a.backend.fetch("dlq", 0, 0).txns
    finally:
        a.close()
        b.close()
