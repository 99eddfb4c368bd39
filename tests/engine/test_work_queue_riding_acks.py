"""Acknowledgements that ride on the next receive (``delivery.ack(commit=False)``, then
``q.receive(commit_staged=True)``): the staged settles and the receive are one atomic,
durable write; both or neither. Embedded and remote alike (the ``engine`` fixture)."""

from __future__ import annotations

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors

from .test_work_queue import produce


def _generation(engine: ts.Engine) -> int:
    return engine.backend.wait_for_commit(-1, 0)


def test_acks_of_the_previous_batch_and_the_next_receive_are_one_write(engine: ts.Engine) -> None:
    engine.create_stream("jobs", partitions=2)
    sent = produce(engine, "jobs", 300, per_txn=10)
    q = engine.work_queue("jobs", "g", consumer="w")
    got: list[bytes] = []
    batch = q.receive(max_items=100, timeout=0)
    while batch:
        got.extend(d.item for d in batch)
        for d in batch:
            d.ack(commit=False)
        assert q.staged == len(batch)
        before = _generation(engine)
        batch = q.receive(max_items=100, timeout=0, commit_staged=True)
        assert q.staged == 0
        if batch:
            assert _generation(engine) == before + 1  # the acks and the receive: one commit
        assert q.status().counters["acked"] == len(got)
    assert sorted(got) == sorted(sent)
    s = q.status(full=True)
    assert s.in_flight == 0 and not any(s.pending.values()) and s.counters["acked"] == 300


def test_staged_acks_free_room_under_max_in_flight_for_the_receive_they_ride_on(engine: ts.Engine) -> None:
    engine.create_stream("s")
    produce(engine, "s", 120, per_txn=10)
    q = engine.work_queue("s", "g", max_in_flight=50)
    first = q.receive(max_items=1000, timeout=0)
    assert len(first) == 50
    for d in first:
        d.ack(commit=False)
    assert len(q.receive(max_items=1000, timeout=0, commit_staged=True)) == 50  # settles first
    assert q.status().counters["acked"] == 50


def test_staged_acks_are_written_even_when_nothing_is_left_to_receive(engine: ts.Engine) -> None:
    engine.create_stream("s")
    produce(engine, "s", 5)
    q = engine.work_queue("s", "g")
    for d in q.receive(timeout=0):
        d.ack(commit=False)
    assert q.receive(timeout=0, commit_staged=True) == []
    s = q.status(full=True)
    assert s.counters["acked"] == 5 and s.in_flight == 0


def test_a_stale_staged_ack_refuses_the_receive_it_rides_on_and_writes_nothing(engine: ts.Engine) -> None:
    engine.create_stream("jobs")
    produce(engine, "jobs", 2, per_txn=1)
    slow = engine.work_queue("jobs", "g", consumer="slow", ack_timeout=0.3)
    fast = engine.work_queue("jobs", "g", consumer="fast", ack_timeout=0.3)
    both = slow.receive(max_items=2, timeout=0)
    assert len(both) == 2
    for d in both:
        d.ack(commit=False)  # staged; then slow is too slow
    taken = fast.receive(max_items=1, timeout=10)  # one of them, after slow's lock ran out
    assert len(taken) == 1
    engine.producer("jobs").instant([b"new"])  # what the refused receive would have handed out
    with pytest.raises(errors.DeliveryExpired):
        slow.receive(max_items=10, timeout=0, commit_staged=True)
    s = slow.status(full=True)
    assert s.counters["acked"] == 0  # not even the other, still current, ack
    assert s.in_flight == 2 and sum(s.pending.values()) == 1  # the new item was not handed out
    assert slow.staged == 0  # dropped, as by commit()
    again = slow.receive(max_items=10, timeout=10)  # the next receive works
    [other] = {d.item for d in both} - {taken[0].item}
    assert {d.item for d in again} == {other, b"new"}
    for d in taken + again:
        d.ack()
    assert slow.status().counters["acked"] == 3


def test_bad_commit_staged_is_refused_and_keeps_the_staged_acks(engine: ts.Engine) -> None:
    engine.create_stream("s")
    produce(engine, "s", 2)
    q = engine.work_queue("s", "g")
    [a, b] = q.receive(timeout=0)
    a.ack(commit=False)
    with pytest.raises(errors.InvalidArgument, match="commit_staged"):
        q.receive(timeout=0, commit_staged="yes")  # type: ignore[arg-type]
    assert q.staged == 1
    q.commit()
    assert q.status().counters["acked"] == 1
