"""Work queues attacked as a hostile user would (issue: queue runs, the hostile review):
staged settles beyond one record's limit, staged records that are not acks, settles of
items the write names twice across records, and the bounds of a huge unsettled backlog."""

from __future__ import annotations

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine import queuestate as Q


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
