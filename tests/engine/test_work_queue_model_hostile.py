"""The work queue model of ``test_work_queue_model`` with what a hostile user adds: small
receives (an expired run redelivered in pieces, the rest left due), a bound on the
unsettled items (``max_in_flight``), several settles of mixed actions in one write (staged
records: all or nothing), and reopening the directory between steps. After every step the
engine agrees with the pure-Python model."""

from __future__ import annotations

import msgpack
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import queuestate as Q

from .test_work_queue_model import ACK_TIMEOUT_MS, CONSUMERS, MAX_DELIVERIES, Key, WorkQueueMachine

MAX_IN_FLIGHT = 6
ACTIONS = {"ack": Q.Settle.ACK, "nak": Q.Settle.NAK, "term": Q.Settle.TERM, "progress": Q.Settle.PROGRESS}


class HostileMachine(WorkQueueMachine):
    def __init__(self) -> None:
        super().__init__()
        self._declare()
        self.dlq_sources: list[Key] = []  # the source of every dead letter read so far

    def _declare(self) -> None:
        self.queues = {c: self.engine.work_queue("s", "g", ack_timeout=ACK_TIMEOUT_MS / 1000,
                                                 max_deliveries=MAX_DELIVERIES, dead_letter="dlq", consumer=c,
                                                 max_in_flight=MAX_IN_FLIGHT)
                       for c in CONSUMERS}

    def _dead_sources(self) -> list[Key]:
        """The sources of the dead letters written since the last look."""
        got: list[Key] = []
        while (t := self.dlq_reader.get_transaction()) is not None:
            for raw in t.items:
                record = msgpack.unpackb(raw)
                got.append((record["partition"], record["txn_id"], record["index"]))
                self.dead_read.append(record["item"])
        return got

    @rule(consumer=st.sampled_from(CONSUMERS), max_items=st.integers(1, 5))
    def receive(self, consumer: str, max_items: int = 1000) -> None:  # type: ignore[override]
        now = self.clock()
        due = {k for k, m in self.model.items() if m.state in ("in_flight", "waiting") and m.due <= now}
        pending = {k for k, m in self.model.items() if m.state == "pending"}
        unsettled_before = sum(1 for m in self.model.values() if m.state == "in_flight")
        got = self.queues[consumer].receive(max_items=max_items, timeout=0)
        dead = self._dead_sources()
        returned = {(d.partition, d.txn_id, d.index): d for d in got}
        assert len(got) <= max_items
        assert set(returned) <= due | pending, "handed out an item that is neither due nor pending"
        for key in dead:
            assert key in due and self.model[key].deliveries >= MAX_DELIVERIES, f"{key} dead-lettered early"
            self.model[key].state = "settled"
            self.dead.append(self.model[key].item)
        for key in due:
            if self.model[key].deliveries >= MAX_DELIVERIES:
                assert key not in returned, f"{key} delivered beyond max_deliveries"
        new = set(returned) & pending
        if new:  # new items only after the due items were looked at (at most max_items of them)
            looked_at = len(set(returned) & due) + len(dead)
            assert due <= set(returned) | set(dead) or looked_at >= max_items, \
                f"a new item was handed out before a due one ({max_items=}, {looked_at=})"
        for key, d in returned.items():
            m = self.model[key]
            assert d.item == m.item and d.delivery_count == m.deliveries + 1
            if m.state == "in_flight":
                unsettled_before -= 1
            m.deliveries += 1
            m.state, m.consumer, m.due = "in_flight", consumer, now + ACK_TIMEOUT_MS
            self.held.append(d)
        in_flight = sum(1 for m in self.model.values() if m.state == "in_flight")
        if new:
            assert in_flight - 1 < MAX_IN_FLIGHT + (len(returned) - len(new)), "max_in_flight overrun"
        elif pending and len(got) + len(dead) < max_items:
            assert unsettled_before + len(returned) >= MAX_IN_FLIGHT, "pending items left though there was room"

    @rule(data=st.data(), consumer=st.sampled_from(CONSUMERS), delay_ms=st.integers(0, 2_000))
    def settle_mixed_in_one_write(self, data: st.DataObject, consumer: str, delay_ms: int) -> None:
        mine = [d for d in self.held if d.queue.consumer == consumer and not d.settled]
        if not mine:
            return
        picked = data.draw(st.lists(st.sampled_from(mine), min_size=1, max_size=6, unique_by=id))
        keys = [(d.partition, d.txn_id, d.index) for d in picked]
        actions = [data.draw(st.sampled_from(sorted(ACTIONS))) for _ in picked]
        q = self.queues[consumer]
        for d, action in zip(picked, actions, strict=True):
            q.stage(d.settle_op(ACTIONS[action], delay_ms if action == "nak" else None, "e"))
        current = [self._current(d) for d in picked]
        valid = all(current) and len(set(keys)) == len(keys)
        try:
            q.commit()
        except errors.DeliveryExpired:
            assert not valid, "a write of current settles was refused"
            return
        assert valid, "a write with a stale settle was accepted"
        now = self.clock()
        for d, key, action in zip(picked, keys, actions, strict=True):
            m = self.model[key]
            if action == "progress":
                m.due = now + ACK_TIMEOUT_MS
                continue
            self.held.remove(d)
            d._settled = True  # settled through its record, not through the Delivery
            if action == "ack":
                m.state = "settled"
                self.acked += 1
            elif action == "nak" and m.deliveries < MAX_DELIVERIES:
                m.state, m.due = "waiting", now + delay_ms
            else:
                self._dead_letter(key)

    def _current(self, d: ts.Delivery) -> bool:
        m = self.model[(d.partition, d.txn_id, d.index)]
        return m.state == "in_flight" and m.deliveries == d.delivery_count and m.consumer == d.queue.consumer

    @rule()
    def reopen(self) -> None:
        self.dlq_reader.checkpoint()  # the dead letters read so far are not read again
        self.engine.close()
        self.engine = ts.open(self.dir, clock=self.clock, durability="async", compaction_interval=None,
                              keepalive_interval=None)
        self._declare()
        self.dlq_reader = self.engine.consumer("dlq", "check")
        for d in self.held:
            d.queue = self.queues[d.queue.consumer]


HostileMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
TestHostileWorkQueueModel = HostileMachine.TestCase
