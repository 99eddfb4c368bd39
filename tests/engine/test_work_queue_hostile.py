"""Work queues attacked as a hostile user would (issue: queue runs, the hostile review):
staged settles beyond one record's limit, staged records that are not acks, settles of
items the write names twice across records, and the bounds of a huge unsettled backlog."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import queuestate as Q
from tstreams_embedded.engine.storage.store import Store, entries
from tstreams_embedded.testing import FakeClock


def test_more_staged_acks_than_one_record_holds_commit_in_one_write(engine: ts.Engine) -> None:
    engine.create_stream("s")
    p = engine.producer("s")
    p.instant([b"%d" % i for i in range(10_000)])
    p.instant([b"x", b"y"])
    q = engine.work_queue("s", "g", max_in_flight=20_000)
    got = q.receive(max_items=10_000, timeout=0) + q.receive(max_items=10, timeout=0)
    assert len(got) == 10_002
    for d in got:
        d.ack(commit=False)
    q.commit()
    status = q.status(full=True)
    assert (status.in_flight, status.counters["acked"]) == (0, 10_002)


def test_a_staged_record_that_is_not_an_ack_keeps_its_action(engine: ts.Engine) -> None:
    engine.create_stream("s")
    engine.create_stream("dlq")
    engine.producer("s").instant([b"a", b"b"])
    q = engine.work_queue("s", "g", dead_letter="dlq", ack_timeout=60)
    first, second = q.receive(max_items=2, timeout=0)
    q.stage(first.settle_op(Q.Settle.NAK, 0, "again"))
    q.stage(second.settle_op(Q.Settle.TERM, None, "never"))
    q.commit()
    status = q.status()
    assert (status.counters["acked"], status.counters["nacked"], status.counters["terminated"]) == (0, 1, 1)
    [again] = q.receive(max_items=10, timeout=0)
    assert (again.item, again.delivery_count) == (b"a", 2)


def test_a_checkpoint_group_with_more_staged_acks_than_one_record_holds(engine: ts.Engine) -> None:
    engine.create_stream("s")
    engine.create_stream("out")
    engine.producer("s").instant([b"%d" % i for i in range(10_001)])
    q = engine.work_queue("s", "g", max_in_flight=20_000)
    out = engine.producer("out")
    group = ts.CheckpointGroup(out, q)
    got = q.receive(max_items=10_000, timeout=0) + q.receive(max_items=10, timeout=0)
    txn = out.new_transaction()
    for d in got:
        txn.send(d.item)
        d.ack(commit=False)
    group.checkpoint()
    assert q.status().counters["acked"] == 10_001


def test_staging_a_record_of_another_stream_or_group_is_refused(engine: ts.Engine) -> None:
    engine.create_stream("s")
    engine.producer("s").instant([b"a"])
    q = engine.work_queue("s", "g")
    other = engine.work_queue("s", "h")
    [d] = other.receive(timeout=0)
    with pytest.raises(errors.InvalidArgument, match="group"):
        q.stage(d.settle_op(Q.Settle.ACK))
    assert q.staged == 0


def _queue_keys(path: Path) -> tuple[dict[str, int], int, int]:
    """How many keys of each kind (``g``, ``c``, ``e``, ``d``) the ``queues`` database holds,
    and the bytes of its pages and of the commit log's."""
    store = Store(str(path), "sync")
    try:
        with store.env.begin() as txn:
            counts: dict[str, int] = {}
            for k, _ in entries(txn.cursor(db=store.queues).iternext()):
                kind = chr(k[0])
                counts[kind] = counts.get(kind, 0) + 1
            sizes = [txn.stat(db) for db in (store.queues, store.log)]
            queue_bytes, log_bytes = (st["psize"] * (st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"])
                                      for st in sizes)
            return counts, queue_bytes, log_bytes
    finally:
        store.close()


@pytest.mark.soak  # a million unsettled items: about a minute; measured for docs/QUEUES.md (Bounds)
def test_a_million_unsettled_items_cost_one_entry_per_transaction(tmp_path: Path) -> None:
    path = tmp_path / "data"
    transactions, per_txn = 10_000, 100
    with ts.open(path, durability="async", compaction_interval=None) as e:
        e.create_stream("s", partitions=4)
        p = e.producer("s")
        for t in range(transactions):
            p.instant([b"%07d" % (t * per_txn + i) for i in range(per_txn)], partition=t % 4)
        before = _file_bytes(path)
        q = e.work_queue("s", "g", ack_timeout=3600, max_in_flight=2_000_000)
        handed = 0
        while got := q.receive(max_items=10_000, timeout=0):
            handed += len(got)
            del got
        assert handed == transactions * per_txn
        status = q.status()
        assert (status.in_flight, status.waiting) == (handed, 0)
    counts, queue_bytes, log_bytes = _queue_keys(path)
    # one run and one redelivery key per transaction (a receive ends inside a transaction
    # at most once: a few transactions are split in two runs), settings and 4 cursors
    assert counts["g"] == 1 and counts["c"] == 4
    assert transactions <= counts["e"] == counts["d"] <= transactions + 100
    grown = _file_bytes(path) - before
    print(f"\n{handed} unsettled items: {counts} queue keys in {queue_bytes} bytes of pages; the commit log "
          f"{log_bytes} bytes (bounded by log_retention_bytes, trimmed at compaction); the data file grew by "
          f"{grown} bytes")
    assert queue_bytes < 4 << 20  # about 200 bytes per transaction handed out


def _file_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def test_a_deleted_dead_letter_stream_does_not_wedge_the_queue(engine: ts.Engine) -> None:
    engine.create_stream("s")
    engine.create_stream("dlq")
    engine.producer("s").instant([b"a", b"b", b"c"])
    q = engine.work_queue("s", "g", max_deliveries=1, dead_letter="dlq", ack_timeout=60)
    a, b, c = q.receive(max_items=3, timeout=0)
    engine.delete_stream("dlq")
    a.term("never")  # refused with StreamNotFound before: the item could never be settled
    b.nak(delay=0)  # the last delivery allowed: settled for good
    c.ack()
    status = q.status(full=True)
    assert (status.in_flight, status.waiting, status.pending) == (0, 0, {0: 0})
    assert (status.counters["terminated"], status.counters["exhausted"], status.counters["acked"]) == (1, 1, 1)
    assert status.counters["dead_lettered"] == 0


def test_an_expired_item_past_max_deliveries_with_its_dead_letter_stream_deleted(
        make_engine: Callable[..., ts.Engine], clock: FakeClock) -> None:
    e = make_engine(clock=clock, keepalive_interval=None)
    e.create_stream("s")
    e.create_stream("dlq")
    e.producer("s").instant([b"a"])
    q = e.work_queue("s", "g", max_deliveries=1, dead_letter="dlq", ack_timeout=1)
    assert len(q.receive(timeout=0)) == 1
    e.delete_stream("dlq")
    e.producer("s").instant([b"b"])
    clock.advance(1_500)
    [d] = q.receive(max_items=10, timeout=0)  # every receive raised StreamNotFound before
    assert d.item == b"b"
    assert q.status().counters["exhausted"] == 1


def test_staged_settles_are_written_in_the_order_they_were_staged(engine: ts.Engine) -> None:
    engine.create_stream("s")
    engine.producer("s").instant([b"a", b"b"])
    q = engine.work_queue("s", "g", ack_timeout=60)
    first, second = q.receive(max_items=2, timeout=0)
    q.stage(first.settle_op(Q.Settle.PROGRESS))  # still working on it ...
    first.ack(commit=False)  # ... then done: the same write
    second.ack(commit=False)
    assert q.staged == 3
    q.commit()
    status = q.status()
    assert (status.in_flight, status.counters["acked"]) == (0, 2)


def test_a_checkpoint_group_naming_an_item_twice_or_a_stale_delivery_writes_nothing(engine: ts.Engine) -> None:
    engine.create_stream("in")
    engine.create_stream("out")
    engine.producer("in").instant([b"a", b"b"])
    q1 = engine.work_queue("in", "g", consumer="w")
    q2 = engine.work_queue("in", "g", consumer="w")  # the same consumer, another queue object
    out = engine.producer("out")
    group = ts.CheckpointGroup(out, q1, q2)
    first, second = q1.receive(max_items=2, timeout=0)
    out.new_transaction().send(b"x")
    first.ack(commit=False)
    q2.stage(first.settle_op(Q.Settle.ACK))  # the same item through the other member
    with pytest.raises(errors.DeliveryExpired, match="item 0 "):
        group.checkpoint()
    second.nak(delay=0)
    [again] = q1.receive(timeout=0)
    out.new_transaction().send(b"y")
    q1.stage(second.settle_op(Q.Settle.ACK))  # the stale delivery of the item ...
    again.ack(commit=False)  # ... and its current one
    with pytest.raises(errors.DeliveryExpired, match="item 1 "):
        group.checkpoint()
    assert engine.consumer("out", "check").get_transaction() is None
    status = q1.status()
    assert (status.in_flight, status.counters["acked"]) == (2, 0)
