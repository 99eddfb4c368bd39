"""Work queues against a small pure-Python model (a hypothesis state machine on the engine's
fake clock): produce, receive by several consumers, ack / nak / in-progress / term, staged
acks that ride on the next receive (``receive(commit_staged=True)``: both or neither) or on
``commit()``, stale acknowledgements and the passing of time. After every step the engine's deliveries, dead
letters and counts agree with the model."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass

import msgpack
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.testing import FakeClock

ACK_TIMEOUT_MS = 1_000
MAX_DELIVERIES = 3
PARTITIONS = 2
CONSUMERS = ("a", "b")

Key = tuple[int, int, int]  # partition, txn id, index


@dataclass
class ModelItem:
    item: bytes
    deliveries: int = 0
    state: str = "pending"  # pending | in_flight | waiting | settled
    consumer: str = ""
    due: int = 0  # in_flight: when its lock runs out; waiting: when it may be delivered again


class WorkQueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="wq-model-")
        self.clock = FakeClock()
        self.engine = ts.open(self.dir, clock=self.clock, durability="async", compaction_interval=None,
                              keepalive_interval=None)
        self.engine.create_stream("s", partitions=PARTITIONS, ttl=10**6)
        self.engine.create_stream("dlq")
        self.queues = {c: self.engine.work_queue("s", "g", ack_timeout=ACK_TIMEOUT_MS / 1000,
                                                 max_deliveries=MAX_DELIVERIES, dead_letter="dlq", consumer=c)
                       for c in CONSUMERS}
        self.model: dict[Key, ModelItem] = {}
        self.held: list[ts.Delivery] = []  # deliveries the consumers hold (current or stale)
        self.staged: dict[str, list[ts.Delivery]] = {c: [] for c in CONSUMERS}  # acks not written yet
        self.dead: list[bytes] = []  # dead letters the model expects
        self.dead_read: list[bytes] = []  # dead letters read from the engine
        self.acked = 0
        self.serial = 0
        self.dlq_reader = self.engine.consumer("dlq", "check")

    def teardown(self) -> None:
        self.engine.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model's view --------------------------------------------------------------
    def _eligible(self) -> set[Key]:
        now = self.clock()
        return {k for k, m in self.model.items()
                if m.state == "pending" or (m.state in ("in_flight", "waiting") and m.due <= now)}

    def _dead_letter(self, key: Key) -> None:
        m = self.model[key]
        m.state = "settled"
        self.dead.append(m.item)

    # -- rules -------------------------------------------------------------------------
    @rule(partition=st.integers(0, PARTITIONS - 1), n=st.integers(1, 4))
    def produce(self, partition: int, n: int) -> None:
        items = []
        for _ in range(n):
            self.serial += 1
            items.append(b"i%d" % self.serial)
        txn_id = self.engine.producer("s", partition=partition).instant(items)
        for index, item in enumerate(items):
            self.model[(partition, txn_id, index)] = ModelItem(item)

    def _current(self, d: ts.Delivery) -> bool:
        m = self.model[(d.partition, d.txn_id, d.index)]
        return m.state == "in_flight" and m.deliveries == d.delivery_count and m.consumer == d.queue.consumer

    def _write_staged(self, consumer: str) -> bool:
        """The model of writing ``consumer``'s staged acks in one write: all or none."""
        staged, self.staged[consumer] = self.staged[consumer], []
        if not all(self._current(d) for d in staged):
            return False
        for d in staged:
            self.model[(d.partition, d.txn_id, d.index)].state = "settled"
            self.acked += 1
        return True

    @rule(consumer=st.sampled_from(CONSUMERS), commit_staged=st.booleans())
    def receive(self, consumer: str, commit_staged: bool) -> None:
        if commit_staged:
            expect_written = self._write_staged(consumer)
            try:
                got = self.queues[consumer].receive(max_items=1000, timeout=0, commit_staged=True)
            except errors.DeliveryExpired:
                assert not expect_written, "current staged acks were refused"
                return  # nothing written: no ack, no item handed out
            assert expect_written, "a stale staged ack was accepted"
        eligible = self._eligible()
        if not commit_staged:
            got = self.queues[consumer].receive(max_items=1000, timeout=0)
        now = self.clock()
        returned = {(d.partition, d.txn_id, d.index): d for d in got}
        expect_dead = {k for k in eligible if self.model[k].deliveries >= MAX_DELIVERIES}
        assert set(returned) == eligible - expect_dead
        for key in sorted(expect_dead, key=lambda k: (self.model[k].due, k)):
            self._dead_letter(key)
        for key, d in returned.items():
            m = self.model[key]
            assert d.item == m.item and d.delivery_count == m.deliveries + 1
            m.deliveries += 1
            m.state, m.consumer, m.due = "in_flight", consumer, now + ACK_TIMEOUT_MS
            self.held.append(d)

    @rule(data=st.data(), action=st.sampled_from(["ack", "nak", "term", "progress"]),
          delay_ms=st.integers(0, 2_000))
    def settle(self, data: st.DataObject, action: str, delay_ms: int) -> None:
        if not self.held:
            return
        d = data.draw(st.sampled_from(self.held))
        key = (d.partition, d.txn_id, d.index)
        m = self.model[key]
        current = (m.state == "in_flight" and m.deliveries == d.delivery_count and m.consumer == d.queue.consumer
                   and not d.settled)
        if d.settled:
            return
        try:
            if action == "ack":
                d.ack()
            elif action == "nak":
                d.nak(delay=delay_ms / 1000, error="e")
            elif action == "term":
                d.term("t")
            else:
                d.in_progress()
        except errors.DeliveryExpired:
            assert not current, f"{d!r} was current but its {action} was refused"
            self.held.remove(d)
            return
        assert current, f"{d!r} was stale but its {action} was accepted"
        now = self.clock()
        if action == "progress":
            m.due = now + ACK_TIMEOUT_MS
            return
        self.held.remove(d)
        if action == "ack":
            m.state = "settled"
            self.acked += 1
        elif action == "nak" and m.deliveries < MAX_DELIVERIES:
            m.state, m.due = "waiting", now + delay_ms
        else:
            self._dead_letter(key)

    @rule(ms=st.integers(1, 2_500))
    def time_passes(self, ms: int) -> None:
        self.clock.advance(ms)

    # -- what must hold ----------------------------------------------------------------
    @invariant()
    def counts_and_dead_letters_agree(self) -> None:
        status = self.queues["a"].status(full=True)
        states = [m.state for m in self.model.values()]
        assert status.in_flight == states.count("in_flight")
        assert status.waiting == states.count("waiting")
        assert sum(status.pending.values()) == states.count("pending")
        assert status.counters["acked"] == self.acked
        got = []
        while (t := self.dlq_reader.get_transaction()) is not None:
            got.extend(msgpack.unpackb(i)["item"] for i in t.items)
        self.dead_read.extend(got)
        assert sorted(self.dead_read) == sorted(self.dead)


WorkQueueMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])
TestWorkQueueModel = WorkQueueMachine.TestCase


class RidingAcksMachine(WorkQueueMachine):
    """The model above, plus acks staged (``delivery.ack(commit=False)``) and written either
    with a consumer's next ``receive(commit_staged=True)`` (one write with the receive) or by
    ``commit()``: all of them or none, and a refused receive hands nothing out."""

    @rule(data=st.data())
    def stage_ack(self, data: st.DataObject) -> None:
        unsettled = [d for d in self.held if not d.settled]
        if not unsettled:
            return
        d = data.draw(st.sampled_from(unsettled))
        d.ack(commit=False)
        self.held.remove(d)
        self.staged[d.queue.consumer].append(d)

    @rule(consumer=st.sampled_from(CONSUMERS))
    def commit(self, consumer: str) -> None:
        expect_written = self._write_staged(consumer)
        try:
            self.queues[consumer].commit()
        except errors.DeliveryExpired:
            assert not expect_written, "current staged acks were refused"
            return
        assert expect_written, "a stale staged ack was accepted"


RidingAcksMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None,
                                               suppress_health_check=[HealthCheck.too_slow])
TestRidingAcksModel = RidingAcksMachine.TestCase
