"""Work queue state kept as runs (issue 22 §2 speed): a receive stores one entry per run of
consecutive items of a transaction; settling some items of a run trims or splits it, and
redelivery still goes item by item. Entries of directories written before runs (one per
item) still work."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.operator.check import check_directory
from tstreams_embedded.engine.protocol import queuestate as Q
from tstreams_embedded.engine.storage.store import Store, entries
from tstreams_embedded.testing import FakeClock

from .test_work_queue_model import CONSUMERS, WorkQueueMachine


def produce(engine: ts.Engine, stream: str, n: int, per_txn: int) -> None:
    p = engine.producer(stream)
    for start in range(0, n, per_txn):
        p.instant([b"item-%05d" % i for i in range(start, min(n, start + per_txn))])


def test_a_receive_stores_one_entry_per_transaction_not_per_item(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with ts.open(path, compaction_interval=None) as e:
        e.create_stream("s")
        produce(e, "s", 300, per_txn=100)
        q = e.work_queue("s", "g", max_in_flight=1_000)
        got = q.receive(max_items=250, timeout=0)
        assert [d.item for d in got] == [b"item-%05d" % i for i in range(250)]
    report = check_directory(str(path))
    assert report.ok, report.problems
    # settings, a cursor, and per transaction handed out one entry and one redelivery key
    assert report.counts["queue_entries"] == 1 + 1 + 3 * 2


def test_settling_part_of_a_run_keeps_the_rest(engine: ts.Engine) -> None:
    engine.create_stream("s")
    produce(engine, "s", 10, per_txn=10)
    q = engine.work_queue("s", "g", ack_timeout=60)
    d = q.receive(max_items=10, timeout=0)
    d[2].ack(commit=False)
    d[5].ack(commit=False)
    q.commit()
    d[7].nak(delay=0, error="boom")
    d[8].in_progress()
    status = q.status()
    assert (status.in_flight, status.waiting, status.counters["acked"]) == (7, 1, 2)
    d[2]._settled = False  # a forged second ack of a settled item of the run: refused
    with pytest.raises(errors.DeliveryExpired, match="settled"):
        d[2].ack()
    [again] = q.receive(max_items=10, timeout=0)
    assert (again.index, again.delivery_count) == (7, 2)
    for delivery in [d[0], d[1], d[3], d[4], d[6], d[8], d[9], again]:
        delivery.ack(commit=False)
    q.commit()
    status = q.status(full=True)
    assert (status.in_flight, status.waiting, status.counters["acked"]) == (0, 0, 10)


def test_one_commit_naming_an_item_twice_is_refused_whole(engine: ts.Engine) -> None:
    engine.create_stream("s")
    produce(engine, "s", 3, per_txn=3)
    q = engine.work_queue("s", "g")
    d = q.receive(max_items=3, timeout=0)
    d[0].ack(commit=False)
    d[1].ack(commit=False)
    q.stage(d[0].settle_op(Q.Settle.ACK))  # the same item again in the same write
    with pytest.raises(errors.DeliveryExpired, match="item 0 "):
        q.commit()
    status = q.status()
    assert (status.in_flight, status.counters["acked"]) == (3, 0)  # nothing was written
    for delivery in d:
        delivery._settled = False
        delivery.ack(commit=False)
    q.commit()
    assert q.status().counters["acked"] == 3


def test_an_expired_run_is_redelivered_item_by_item_as_room_allows(
        make_engine: Callable[..., ts.Engine], clock: FakeClock) -> None:
    e = make_engine(clock=clock, keepalive_interval=None)
    e.create_stream("s")
    produce(e, "s", 10, per_txn=10)
    q = e.work_queue("s", "g", ack_timeout=1, consumer="a")
    other = e.work_queue("s", "g", ack_timeout=1, consumer="b")
    first = q.receive(max_items=10, timeout=0)
    first[4].ack()
    clock.advance(1_500)
    rounds = [other.receive(max_items=3, timeout=0) for _ in range(3)]
    assert [[(d.index, d.delivery_count) for d in r] for r in rounds] == [
        [(0, 2), (1, 2), (2, 2)], [(3, 2), (5, 2), (6, 2)], [(7, 2), (8, 2), (9, 2)]]
    with pytest.raises(errors.DeliveryExpired, match="delivery 2 to 'b'"):
        first[9].ack()
    assert other.status().in_flight == 9


def _as_entries_of_one_item(path: Path) -> int:
    """Rewrite every run of a directory's work queues as the entries written before runs:
    one per item, without a count. Returns how many entries it wrote."""
    store = Store(str(path), "sync")
    written = 0
    try:
        with store.env.begin(write=True) as txn:
            runs: list[tuple[bytes, Q.Entry]] = []
            for k, v in entries(txn.cursor(db=store.queues).iternext()):
                if k.startswith(b"e"):
                    runs.append((k, Q.Entry.unpack(store.unseal("queues", k, v))))
            for key, entry in runs:
                prefix, (partition, txn_id, first) = key[1:-16], Q.parse_entry_key(key, len(key) - 16)
                txn.delete(key, db=store.queues)
                txn.delete(Q.due_key_in(prefix, entry.redeliver_at, partition, txn_id, first), db=store.queues)
                old: list[Any] = [int(entry.state), entry.deliveries, entry.lock_deadline, entry.redeliver_at,
                                  entry.consumer, entry.error]
                for index in range(first, first + entry.count):
                    store.put(txn, "queues", Q.entry_key_in(prefix, partition, txn_id, index), msgpack.packb(old))
                    store.put(txn, "queues", Q.due_key_in(prefix, entry.redeliver_at, partition, txn_id, index), b"")
                    written += 1
    finally:
        store.close()
    return written


def test_entries_written_before_runs_still_settle_and_redeliver(tmp_path: Path) -> None:
    path = tmp_path / "data"
    clock = FakeClock()
    with ts.open(path, clock=clock, compaction_interval=None, keepalive_interval=None) as e:
        e.create_stream("s")
        produce(e, "s", 6, per_txn=6)
        e.work_queue("s", "g", ack_timeout=1, consumer="a").receive(max_items=4, timeout=0)
    assert _as_entries_of_one_item(path) == 4
    assert check_directory(str(path)).counts["queue_entries"] == 1 + 1 + 4 * 2
    with ts.open(path, clock=clock, compaction_interval=None, keepalive_interval=None) as e:
        q = e.work_queue("s", "g", ack_timeout=1, consumer="a")
        assert q.status().in_flight == 4
        clock.advance(1_500)
        got = q.receive(max_items=10, timeout=0)
        assert [(d.index, d.delivery_count) for d in got] == [(0, 2), (1, 2), (2, 2), (3, 2), (4, 1), (5, 1)]
        got[1].ack(commit=False)
        got[2].ack(commit=False)
        q.commit()
        status = q.status()
        assert (status.in_flight, status.counters["acked"]) == (4, 2)


class BatchSettleMachine(WorkQueueMachine):
    """The model of ``test_work_queue_model``, with acknowledgements of several deliveries
    in one write too (several items of one run, or of several runs): all or nothing."""

    @rule(data=st.data(), consumer=st.sampled_from(CONSUMERS))
    def ack_many(self, data: st.DataObject, consumer: str) -> None:
        mine = [d for d in self.held if d.queue.consumer == consumer and not d.settled]
        if not mine:
            return
        picked = data.draw(st.lists(st.sampled_from(mine), min_size=1, max_size=8, unique_by=id))
        current = [self._current(d) for d in picked]
        for d in picked:
            d.ack(commit=False)
        for d in picked:
            self.held.remove(d)
        try:
            self.queues[consumer].commit()
        except errors.DeliveryExpired:
            assert not all(current), "a write of current acknowledgements was refused"
            return  # nothing was written: the current ones stay in flight until their locks run out
        assert all(current), "a write with a stale acknowledgement was accepted"
        for d in picked:
            self.model[(d.partition, d.txn_id, d.index)].state = "settled"
        self.acked += len(picked)

    def _current(self, d: ts.Delivery) -> bool:
        m = self.model[(d.partition, d.txn_id, d.index)]
        return m.state == "in_flight" and m.deliveries == d.delivery_count and m.consumer == d.queue.consumer


BatchSettleMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=30, deadline=None,
                                                suppress_health_check=[HealthCheck.too_slow])
TestBatchSettleModel = BatchSettleMachine.TestCase
