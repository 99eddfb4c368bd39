"""Random operation sequences against a pure-Python model of the T-streams semantics.

The engine runs with a :class:`FakeClock` (no background keep-alive, no background
compaction), so every result is predictable: transaction IDs (``max(now*100000, last+1)``,
strictly increasing per partition), which transactions a consumer sees (checkpointed only,
in ID order, skipping cancelled and expired ones, stopping at an open unexpired one),
offsets, TTL expiry of open transactions and of stream data, the opening policies, atomic
checkpoint groups, compaction, and what survives closing and reopening the engine. Each
rule performs public API calls and compares their results with the model.

Producer transactions are *registered* in storage lazily (at the first flush, the
checkpoint, or the first read of ``txn.id``); the model follows that rule, and the machine
registers eagerly (reads ``txn.id``) at random.

``TSTREAMS_HYPOTHESIS=thorough`` selects a profile with many more and longer sequences.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.ids import ID_MULTIPLIER
from tstreams_embedded.testing import FakeClock

_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much]
settings.register_profile("tstreams-engine-ci", max_examples=100, stateful_step_count=50, deadline=None,
                          suppress_health_check=_HEALTH)
settings.register_profile("tstreams-engine-thorough", max_examples=2000, stateful_step_count=100, deadline=None,
                          suppress_health_check=_HEALTH)
PROFILE = "tstreams-engine-" + os.environ.get("TSTREAMS_HYPOTHESIS", "ci")

TXN_TTL_MS = 1000
STREAM_NAMES = ["a", "b", "c"]
CONSUMER_NAMES = ["c1", "c2"]
POLICIES = [ts.EnqueueIfOpened, ts.ErrorIfOpened, ts.CheckpointIfOpened, ts.CancelIfOpened]

OPEN, CHECKPOINTED, CANCELLED, INVALID = "open", "checkpointed", "cancelled", "invalid"


# --------------------------------------------------------------------------- the model
@dataclass
class MTxn:
    """A transaction as stored."""

    state: str
    deadline: int = 0
    items: list[bytes] = field(default_factory=list)  # flushed items (all items once checkpointed)


@dataclass
class MPart:
    last: int = 0  # the highest ID ever allocated
    txns: dict[int, MTxn] = field(default_factory=dict)

    def ids(self) -> list[int]:
        return sorted(self.txns)


@dataclass
class MStream:
    partitions: int
    ttl: int  # seconds
    parts: list[MPart]


@dataclass(eq=False)
class HTxn:
    """A producer transaction handle; ``id`` is None until it is registered in storage."""

    real: Any
    producer: HProducer
    stream: str
    partition: int
    id: int | None = None
    buffered: list[bytes] = field(default_factory=list)  # sent, not yet flushed


@dataclass(eq=False)
class HProducer:
    real: Any
    stream: str
    partitions: int
    batch_size: int
    rr: int = 0
    open: dict[int, list[HTxn]] = field(default_factory=dict)  # same insertion order as the real one

    def choose(self) -> int:
        p = self.rr % self.partitions
        self.rr += 1
        return p

    def open_txns(self) -> list[HTxn]:
        return [t for lst in self.open.values() for t in lst]

    def forget(self, t: HTxn) -> None:
        lst = self.open.get(t.partition)
        if lst and t in lst:
            lst.remove(t)
            if not lst:
                del self.open[t.partition]


@dataclass(eq=False)
class HConsumer:
    real: Any
    stream: str
    name: str
    partitions: list[int]
    position: dict[int, int]
    next: int = 0


class Model:
    """The semantics, in plain Python."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.streams: dict[str, MStream] = {}
        self.offsets: dict[tuple[str, str], dict[int, int]] = {}
        self.id_floor = 0  # the highest ID of any deleted stream: first IDs are allocated above it

    @property
    def now(self) -> int:
        return self.clock.ms

    def floor(self, stream: str) -> int:
        """IDs below this are past the stream's TTL."""
        return (self.now - self.streams[stream].ttl * 1000) * ID_MULTIPLIER

    def part(self, stream: str, p: int) -> MPart:
        return self.streams[stream].parts[p]

    def allocate(self, stream: str, p: int) -> int:
        part = self.part(stream, p)
        txn_id = max(self.now * ID_MULTIPLIER, (part.last or self.id_floor) + 1)
        assert txn_id > part.last
        part.last = txn_id
        return txn_id

    def expire(self) -> None:
        """Open transactions past their deadline are invalid: never visible, never checkpointed."""
        for s in self.streams.values():
            for part in s.parts:
                for t in part.txns.values():
                    if t.state == OPEN and t.deadline <= self.now:
                        t.state, t.items = INVALID, []

    def write_error(self, h: HTxn) -> type[Exception] | None:
        """The error of writing data to / checkpointing a registered transaction, if any."""
        assert h.id is not None
        t = self.part(h.stream, h.partition).txns.get(h.id)
        if t is None:
            return errors.TransactionNotFound  # compacted (older than the stream's TTL)
        if t.state == INVALID:
            return errors.TransactionExpired
        assert t.state == OPEN, "a handle that is still open has an open (or expired) stored transaction"
        return None

    def register(self, h: HTxn, items: list[bytes]) -> int:
        h.id = self.allocate(h.stream, h.partition)
        self.part(h.stream, h.partition).txns[h.id] = MTxn(OPEN, self.now + TXN_TTL_MS, list(items))
        return h.id

    def checkpoint(self, h: HTxn) -> None:
        """Apply a successful checkpoint of a handle (an empty transaction is cancelled)."""
        if h.id is None:
            if h.buffered:  # one INSTANT write
                h.id = self.allocate(h.stream, h.partition)
                self.part(h.stream, h.partition).txns[h.id] = MTxn(CHECKPOINTED, 0, list(h.buffered))
            return
        t = self.part(h.stream, h.partition).txns[h.id]
        t.items = t.items + h.buffered
        t.state = CHECKPOINTED if t.items else CANCELLED

    def cancel(self, h: HTxn) -> None:
        if h.id is None:
            return
        t = self.part(h.stream, h.partition).txns.get(h.id)
        if t is not None and t.state == OPEN:
            t.state, t.items = CANCELLED, []

    def scan(self, stream: str, p: int, after: int, max_txns: int) -> tuple[list[tuple[int, list[bytes]]], int]:
        """Visible (checkpointed, within TTL) transactions after ``after`` in ID order, stopping
        at an open one; and the last ID passed."""
        floor = self.floor(stream)
        part = self.part(stream, p)
        out: list[tuple[int, list[bytes]]] = []
        position = after
        for tid in part.ids():
            if tid <= after:
                continue
            t = part.txns[tid]
            if t.state == OPEN:
                break
            position = tid
            if t.state == CHECKPOINTED and tid >= floor:
                out.append((tid, list(t.items)))
                if len(out) >= max_txns:
                    break
        return out, position

    def take(self, c: HConsumer, p: int) -> tuple[int, list[bytes]] | None:
        txns, position = self.scan(c.stream, p, c.position[p], 1)
        c.position[p] = max(c.position[p], position)
        return txns[0] if txns else None

    def visible(self, stream: str, p: int, txn_id: int) -> tuple[int, list[bytes]] | None:
        t = self.part(stream, p).txns.get(txn_id)
        if t is None or t.state != CHECKPOINTED or txn_id < self.floor(stream):
            return None
        return txn_id, t.items

    def last(self, stream: str, p: int) -> tuple[int, list[bytes]] | None:
        floor = self.floor(stream)
        part = self.part(stream, p)
        for tid in reversed(part.ids()):
            if tid < floor:
                return None
            if part.txns[tid].state == CHECKPOINTED:
                return tid, part.txns[tid].items
        return None

    def compact(self) -> int:
        removed = 0
        for name, s in self.streams.items():
            floor = self.floor(name)
            for part in s.parts:
                for tid in [t for t in part.txns if t < floor]:
                    del part.txns[tid]
                    removed += 1
        return removed


# --------------------------------------------------------------------------- the machine
def _txn_tuple(t: Any) -> tuple[int, list[bytes]] | None:
    return None if t is None else (t.id, list(t.items))


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="tstreams-sm-")
        self.clock = FakeClock()
        self.model = Model(self.clock)
        self.counter = 0
        self.engine = self._open("sync")
        self.producers: list[HProducer] = []
        self.txns: list[HTxn] = []
        self.finished: list[HTxn] = []
        self.consumers: list[HConsumer] = []

    def _open(self, durability: str) -> ts.Engine:
        return ts.open(self.dir, durability=durability, clock=self.clock, txn_ttl=TXN_TTL_MS / 1000,
                       keepalive_interval=None, compaction_interval=None)

    def teardown(self) -> None:
        self.engine.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers -------------------------------------------------------------------
    def _items(self, n: int) -> list[bytes]:
        out = []
        for _ in range(n):
            self.counter += 1
            out.append(b"item-%d" % self.counter)
        return out

    def _drop_stream_handles(self, name: str) -> None:
        self.producers = [p for p in self.producers if p.stream != name]
        self.txns = [t for t in self.txns if t.stream != name]
        self.finished = [t for t in self.finished if t.stream != name]
        self.consumers = [c for c in self.consumers if c.stream != name]
        gc.collect()  # producers with open transactions form cycles; drop them from the keep-alive set

    def _finish_handle(self, h: HTxn) -> None:
        h.producer.forget(h)
        h.buffered = []
        if h in self.txns:
            self.txns.remove(h)
        self.finished.append(h)
        del self.finished[:-5]

    def _check_id(self, h: HTxn) -> None:
        """The real transaction's ID is the one the model allocated (or both unregistered)."""
        assert h.real.registered == (h.id is not None)
        if h.id is not None:
            assert h.real.id == h.id

    def _checkpoint_failed(self, producers: list[HProducer]) -> None:
        """A write checkpointing these producers' open transactions (a CheckpointGroup, or the
        CheckpointIfOpened policy) failed because storage finished one of them (expired or
        compacted): nothing was written. The engine then probes every registered open
        transaction of each producer with a keep-alive: the ones storage finished are failed,
        as by a plain checkpoint; the others stay open, and the probe refreshed their
        deadlines, as a keep-alive tick does (the model must too, or it expires them early)."""
        for h in producers:
            for t in h.open_txns():
                if t.id is not None and self.model.write_error(t):
                    assert not t.real.is_open
                    self._finish_handle(t)
                    continue
                assert t.real.is_open
                if t.id is not None:
                    m = self.model.part(t.stream, t.partition).txns[t.id]
                    m.deadline = max(m.deadline, self.model.now + TXN_TTL_MS)

    def _register(self, h: HTxn) -> None:
        """Read ``txn.id``: registers the transaction in storage if it is not yet."""
        real_id = h.real.id
        if h.id is None:
            self.model.register(h, [])
        assert real_id == h.id
        self._check_id(h)

    # -- streams -------------------------------------------------------------------
    @initialize(partitions=st.integers(1, 2), ttl=st.sampled_from([2, 3600]))
    def start_with_a_stream(self, partitions: int, ttl: int) -> None:
        """Most sequences are about transactions: begin with a stream, a producer and a consumer."""
        self.create_stream("a", partitions, ttl)
        self.new_producer("a", 2)
        self.new_consumer("a", "c1", "oldest", True)

    @rule(name=st.sampled_from(STREAM_NAMES), partitions=st.integers(1, 3), ttl=st.sampled_from([1, 2, 3600]))
    def create_stream(self, name: str, partitions: int, ttl: int) -> None:
        if name in self.model.streams:
            with pytest.raises(errors.StreamExists):
                self.engine.create_stream(name, partitions=partitions, ttl=ttl)
            return
        info = self.engine.create_stream(name, partitions=partitions, ttl=ttl, description=f"d-{name}")
        assert (info.name, info.partitions, info.ttl, info.description) == (name, partitions, ttl, f"d-{name}")
        self.model.streams[name] = MStream(partitions, ttl, [MPart() for _ in range(partitions)])

    @rule(name=st.sampled_from(STREAM_NAMES[1:]))
    def delete_stream(self, name: str) -> None:
        if name not in self.model.streams:
            with pytest.raises(errors.StreamNotFound):
                self.engine.delete_stream(name)
            return
        self.engine.delete_stream(name)
        self.model.id_floor = max([self.model.id_floor] + [part.last for part in self.model.streams[name].parts])
        del self.model.streams[name]
        self.model.offsets = {k: v for k, v in self.model.offsets.items() if k[0] != name}
        self._drop_stream_handles(name)
        with pytest.raises(errors.StreamNotFound):
            self.engine.get_stream(name)

    # -- producers -----------------------------------------------------------------
    @rule(name=st.sampled_from(STREAM_NAMES), batch_size=st.sampled_from([1, 2, 100]))
    def new_producer(self, name: str, batch_size: int) -> None:
        if name not in self.model.streams:
            with pytest.raises(errors.StreamNotFound):
                self.engine.producer(name)
            return
        real = self.engine.producer(name, batch_size=batch_size)
        self.producers.append(HProducer(real, name, self.model.streams[name].partitions, batch_size))

    @precondition(lambda self: self.producers)
    @rule(data=st.data(), partition=st.sampled_from([None, None, 0, 1, 2, 3]), policy=st.sampled_from(POLICIES),
          eager=st.booleans())
    def open_transaction(self, data: st.DataObject, partition: int | None, policy: ts.Policy, eager: bool) -> None:
        h = data.draw(st.sampled_from(self.producers))
        if partition is not None and partition >= h.partitions:
            with pytest.raises(errors.PartitionOutOfRange):
                h.real.new_transaction(partition, policy=policy)
            return
        p = h.choose() if partition is None else partition
        previous = list(h.open.get(p, []))
        if previous and policy is ts.ErrorIfOpened:
            with pytest.raises(errors.TransactionAlreadyOpened):
                h.real.new_transaction(partition, policy=policy)
            return
        if previous and policy is ts.CheckpointIfOpened:
            err = next((e for e in (self.model.write_error(t) for t in previous if t.id is not None) if e), None)
            if err is not None:
                # One atomic write of the previous checkpoints fails: nothing is written and no
                # transaction is opened. But, as after a failed CheckpointGroup (issue item 8) and
                # as T-streams' CheckpointIfOpened, which is a plain checkpoint() of the previous
                # transaction, the ones storage finished are failed; keeping them open would make
                # every later CheckpointIfOpened/ErrorIfOpened on this partition fail for good.
                with pytest.raises(err):
                    h.real.new_transaction(partition, policy=policy)
                self._checkpoint_failed([h])
                return
        real = h.real.new_transaction(partition, policy=policy)
        for t in previous if policy in (ts.CheckpointIfOpened, ts.CancelIfOpened) else ():
            if policy is ts.CheckpointIfOpened:
                self.model.checkpoint(t)
            else:
                self.model.cancel(t)
            self._check_id(t)
            self._finish_handle(t)
        assert real.partition == p and not real.registered
        ht = HTxn(real, h, h.stream, p)
        h.open.setdefault(p, []).append(ht)
        self.txns.append(ht)
        if eager:
            self._register(ht)

    @precondition(lambda self: self.txns)
    @rule(data=st.data(), action=st.sampled_from(["send", "send", "send_many", "send_many", "checkpoint", "cancel",
                                                  "id"]),
          n=st.integers(1, 3))
    def transaction_action(self, data: st.DataObject, action: str, n: int) -> None:
        """send / send_many / checkpoint / cancel / id on an open transaction handle."""
        h = data.draw(st.sampled_from(self.txns))
        if action == "id":
            self._register(h)
            return
        if action == "checkpoint":
            err = self.model.write_error(h) if h.id is not None else None
            if err is not None:
                with pytest.raises(err):
                    h.real.checkpoint()
            else:
                h.real.checkpoint()
                self.model.checkpoint(h)
                self._check_id(h)
            self._finish_handle(h)
            return
        if action == "cancel":
            h.real.cancel()
            self.model.cancel(h)
            self._finish_handle(h)
            return
        to_send = self._items(n if action == "send_many" else 1)
        # the producer's buffer is flushed (registering the transaction, or one DATA write) when full
        expected_error = None
        for item in to_send:
            if len(h.buffered) >= h.producer.batch_size:
                if h.id is None:
                    self.model.register(h, h.buffered)
                else:
                    expected_error = self.model.write_error(h)
                    if expected_error is not None:
                        break
                    self.model.part(h.stream, h.partition).txns[h.id].items.extend(h.buffered)
                h.buffered = []
            h.buffered.append(item)
        send = h.real.send_many if action == "send_many" else (lambda items: h.real.send(items[0]))
        if expected_error is not None:
            with pytest.raises(expected_error):
                send(to_send)
            self._finish_handle(h)
            return
        send(to_send)
        self._check_id(h)

    @precondition(lambda self: self.finished)
    @rule(data=st.data(), action=st.sampled_from(["send", "checkpoint", "cancel", "send_many", "flush"]))
    def use_finished_transaction(self, data: st.DataObject, action: str) -> None:
        h = data.draw(st.sampled_from(self.finished))
        with pytest.raises(errors.TransactionFinished):
            if action == "send":
                h.real.send(b"late")
            elif action == "send_many":
                h.real.send_many([b"late"])
            else:
                getattr(h.real, action)()

    @precondition(lambda self: self.producers)
    @rule(data=st.data(), partition=st.sampled_from([None, None, 0, 1, 2]), n=st.integers(1, 3))
    def instant(self, data: st.DataObject, partition: int | None, n: int) -> None:
        h = data.draw(st.sampled_from(self.producers))
        items = self._items(n)
        if partition is not None and partition >= h.partitions:
            with pytest.raises(errors.PartitionOutOfRange):
                h.real.instant(items, partition)
            return
        p = h.choose() if partition is None else partition
        txn_id = h.real.instant(items, partition)
        assert txn_id == self.model.allocate(h.stream, p)
        self.model.part(h.stream, p).txns[txn_id] = MTxn(CHECKPOINTED, 0, items)

    @rule()
    def keep_alive(self) -> None:
        alive = 0
        for h in self.producers:
            for t in h.open_txns():
                m = self.model.part(t.stream, t.partition).txns.get(t.id) if t.id is not None else None
                if m is not None and m.state == OPEN:
                    m.deadline = max(m.deadline, self.model.now + TXN_TTL_MS)
                    alive += 1
        assert self.engine.keep_alive() == alive

    # -- time ----------------------------------------------------------------------
    @rule(ms=st.sampled_from([1, 400, 1000, 2500, 3_600_001]))
    def advance_time(self, ms: int) -> None:
        self.clock.advance(ms)
        self.model.expire()

    @rule()
    def compact(self) -> None:
        expected = self.model.compact()
        assert self.engine.compact()["transactions_removed"] == expected

    # -- consumers -----------------------------------------------------------------
    @rule(name=st.sampled_from(STREAM_NAMES), cname=st.sampled_from(CONSUMER_NAMES),
          start=st.sampled_from(["oldest", "newest", "id", "time"]), use_last=st.booleans())
    def new_consumer(self, name: str, cname: str, start: str, use_last: bool) -> None:
        if name not in self.model.streams:
            with pytest.raises(errors.StreamNotFound):
                self.engine.consumer(name, cname)
            return
        parts = self.model.streams[name].parts
        stored = self.model.offsets.get((name, cname), {}) if use_last else {}
        if start == "id":  # start at (and including) an existing or a future ID
            ids = sorted(i for part in parts for i in part.txns) or [self.model.now * ID_MULTIPLIER]
            start_arg: Any = ids[len(ids) // 2]
            default = [start_arg - 1] * len(parts)
        elif start == "time":  # 1.5 s ago
            start_arg = ts.txn_time((self.model.now - 1500) * ID_MULTIPLIER)
            default = [(self.model.now - 1500) * ID_MULTIPLIER - 1] * len(parts)
        elif start == "newest":
            start_arg = "newest"
            default = [part.last for part in parts]
        else:
            start_arg = "oldest"
            default = [0] * len(parts)
        positions = {p: stored.get(p, default[p]) for p in range(len(parts))}
        real = self.engine.consumer(name, cname, start=start_arg, use_last_offset=use_last, prefetch=1)
        assert real.offsets == positions
        self.consumers.append(HConsumer(real, name, cname, list(range(len(parts))), positions))

    @precondition(lambda self: self.consumers)
    @rule(data=st.data(), any_partition=st.booleans())
    def consume(self, data: st.DataObject, any_partition: bool) -> None:
        c = data.draw(st.sampled_from(self.consumers))
        if any_partition:  # fair round robin over the partitions
            expected = None
            n = len(c.partitions)
            for i in range(n):
                p = c.partitions[(c.next + i) % n]
                expected = self.model.take(c, p)
                if expected is not None:
                    c.next = (c.next + i + 1) % n
                    break
            got = c.real.get_transaction()
        else:
            p = data.draw(st.sampled_from(c.partitions))
            expected = self.model.take(c, p)
            got = c.real.get_transaction(p)
            assert got is None or got.partition == p
        assert _txn_tuple(got) == expected
        assert c.real.offsets == c.position

    @precondition(lambda self: self.consumers)
    @rule(data=st.data(), store=st.booleans())
    def consumer_offsets(self, data: st.DataObject, store: bool) -> None:
        """consumer.checkpoint() (store all positions) or consumer.set_offset(p, id)."""
        c = data.draw(st.sampled_from(self.consumers))
        if store:
            c.real.checkpoint()
            self.model.offsets.setdefault((c.stream, c.name), {}).update(c.position)
            return
        p = data.draw(st.sampled_from(c.partitions))
        txn_id = data.draw(st.sampled_from([0, *self.model.part(c.stream, p).ids()]))
        c.real.set_offset(p, txn_id)
        c.position[p] = txn_id

    @precondition(lambda self: self.producers or self.consumers)
    @rule(data=st.data())
    def group_checkpoint(self, data: st.DataObject) -> None:
        """CheckpointGroup: all producers' open transactions and consumers' offsets in one write."""
        agents = data.draw(st.lists(st.sampled_from(self.producers + self.consumers), min_size=1, max_size=4,
                                    unique_by=id))
        handles = [t for a in agents if isinstance(a, HProducer) for t in a.open_txns()]
        err = next((e for e in (self.model.write_error(t) for t in handles if t.id is not None) if e), None)
        group = ts.CheckpointGroup(*(a.real for a in agents))
        if err is not None:  # all or nothing: no transaction checkpointed, no offset stored
            with pytest.raises(err):
                group.checkpoint()
            self._checkpoint_failed([a for a in agents if isinstance(a, HProducer)])
            return
        group.checkpoint()
        for t in handles:  # in operation order: unregistered ones get their IDs in this order
            self.model.checkpoint(t)
            self._check_id(t)
            self._finish_handle(t)
        for a in agents:
            if isinstance(a, HConsumer):
                self.model.offsets.setdefault((a.stream, a.name), {}).update(a.position)

    # -- reads that do not move a consumer -------------------------------------------
    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def read_by_id_range_last(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(self.consumers))
        p = data.draw(st.sampled_from(c.partitions))
        ids = self.model.part(c.stream, p).ids()
        if ids:
            tid = data.draw(st.sampled_from(ids))
            assert _txn_tuple(c.real.get_transaction_by_id(p, tid)) == self.model.visible(c.stream, p, tid)
            lo = data.draw(st.sampled_from(ids))
            hi = data.draw(st.sampled_from(ids))
            expected = [t for t in self.model.scan(c.stream, p, lo, 1 << 30)[0] if t[0] <= hi]  # (lo, hi]
            got = [(t.id, list(t.items)) for t in c.real.get_transactions_from_to(p, lo, hi)]
            assert got == expected
        assert _txn_tuple(c.real.get_last_transaction(p)) == self.model.last(c.stream, p)

    # -- lifecycle -----------------------------------------------------------------
    @rule(durability=st.sampled_from(["sync", "strict", "async"]))
    def reopen(self, durability: str) -> None:
        """Close the engine cleanly: every handle is dead (EngineClosed), and the producers'
        registered open transactions are cancelled in one write (a crash would leave them
        open until their TTL instead)."""
        self.engine.close()
        for h in self.txns:
            self.model.cancel(h)
        self.engine.close()  # idempotent
        for h in self.producers[:1]:
            with pytest.raises(errors.EngineClosed):
                h.real.instant([b"x"])
        for t in self.txns[:1]:
            with pytest.raises(errors.EngineClosed):
                t.real.checkpoint()
        for c in self.consumers[:1]:
            with pytest.raises(errors.EngineClosed):
                c.real.get_transaction()
        with pytest.raises(errors.EngineClosed):
            self.engine.list_streams()
        consumers = sorted({(c.stream, c.name) for c in self.consumers})
        self.producers, self.txns, self.finished, self.consumers = [], [], [], []
        gc.collect()
        self.engine = self._open(durability)
        # the restarted application: fresh producers, and its consumers resume from stored offsets
        for name in sorted(self.model.streams):
            self.new_producer(name, 2)
        for name, cname in consumers:
            self.new_consumer(name, cname, "oldest", True)

    # -- invariants ----------------------------------------------------------------
    @invariant()
    def streams_and_ids_match(self) -> None:
        """Streams, and the last allocated ID of every partition."""
        assert [s.name for s in self.engine.list_streams()] == sorted(self.model.streams)
        for name, s in self.model.streams.items():
            for p, part in enumerate(s.parts):
                assert self.engine.backend.last_txn_id(name, p) == part.last

    @invariant()
    def stored_offsets_match(self) -> None:
        for name in self.model.streams:
            for cname in CONSUMER_NAMES:
                assert self.engine.backend.get_offsets(name, cname) == self.model.offsets.get((name, cname), {})


EngineMachine.TestCase.settings = settings.get_profile(PROFILE)
TestEngineStateMachine = EngineMachine.TestCase


class _Draw:
    """A stand-in for ``st.data()`` to replay a fixed sequence of draws."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def draw(self, strategy: Any) -> Any:
        return self.values.pop(0)


def _one_producer_one_consumer() -> tuple[EngineMachine, Any, Any]:
    """A machine with stream "a" (1 partition), a producer and a consumer on it."""
    m = EngineMachine()
    m.create_stream("a", 1, 3600)
    m.new_producer("a", 2)
    m.new_consumer("a", "c1", "oldest", True)
    return m, m.producers[0], m.consumers[0]


def test_range_read_skips_an_expired_transaction() -> None:
    """Regression found by the machine: a range read passes over an expired open transaction
    (it used to stop there when checkpointed ones preceded it)."""
    m, h, c = _one_producer_one_consumer()
    try:
        m.instant(_Draw(h), 0, 1)
        m.open_transaction(_Draw(h), 0, ts.EnqueueIfOpened, True)
        m.instant(_Draw(h), 0, 1)
        m.advance_time(TXN_TTL_MS)
        ids = m.model.part("a", 0).ids()
        m.read_by_id_range_last(_Draw(c, 0, ids[0], ids[0], ids[2]))
        assert len(c.real.get_transactions_from_to(0, ids[0] - 1, ids[2])) == 2
    finally:
        m.teardown()


def test_checkpoint_after_a_reader_invalidated_the_transaction() -> None:
    """Regression found by the machine: checkpointing an expired transaction raises
    TransactionExpired whether or not a consumer already passed over it."""
    m, h, c = _one_producer_one_consumer()
    try:
        m.open_transaction(_Draw(h), 0, ts.EnqueueIfOpened, True)
        m.advance_time(TXN_TTL_MS)
        m.consume(_Draw(c, 0), False)  # passes over (invalidates) the expired transaction
        with pytest.raises(errors.TransactionExpired):
            m.txns[0].real.checkpoint()
    finally:
        m.teardown()


def test_checkpoint_if_opened_fails_an_expired_previous_transaction() -> None:
    """Found by the machine: when CheckpointIfOpened cannot checkpoint the previous transaction
    because it expired, it raises TransactionExpired, opens nothing, and the expired transaction
    is failed (as by a plain checkpoint), so the partition is usable again: ErrorIfOpened opens,
    and a group checkpoint of the producer commits the new transaction."""
    m, h, c = _one_producer_one_consumer()
    try:
        m.open_transaction(_Draw(h), 0, ts.EnqueueIfOpened, True)
        expired = m.txns[0]
        m.advance_time(TXN_TTL_MS)
        m.open_transaction(_Draw(h), 0, ts.CheckpointIfOpened, False)  # raises TransactionExpired
        assert expired.real.state == "failed" and h.real.open_transactions() == [] and m.finished == [expired]
        m.use_finished_transaction(_Draw(expired), "send")
        m.open_transaction(_Draw(h), 0, ts.ErrorIfOpened, False)
        fresh = m.txns[0]
        m.transaction_action(_Draw(fresh), "send", 1)
        m.group_checkpoint(_Draw([h]))
        assert fresh.real.state == "checkpointed"
        m.consume(_Draw(c, 0), False)
        assert c.position[0] == fresh.id
    finally:
        m.teardown()


@pytest.mark.parametrize("how", ["group", "policy"])
def test_a_failed_checkpoint_refreshes_the_surviving_transactions(how: str) -> None:
    """A checkpoint that fails on an expired transaction probes the producer's other open
    transactions with a keep-alive, which refreshes their deadlines: they outlive their
    original deadline (the model used to expire them there)."""
    m = EngineMachine()
    try:
        m.create_stream("a", 2, 3600)
        m.new_producer("a", 2)
        h = m.producers[0]
        m.open_transaction(_Draw(h), 0, ts.EnqueueIfOpened, True)  # deadline TTL
        m.advance_time(400)
        m.open_transaction(_Draw(h), 1, ts.EnqueueIfOpened, True)  # deadline 400 + TTL
        expired, survivor = m.txns
        m.advance_time(400)
        m.advance_time(400)  # the first expired, the second has 200 ms left
        if how == "group":
            m.group_checkpoint(_Draw([h]))  # raises TransactionExpired
        else:
            m.open_transaction(_Draw(h), 0, ts.CheckpointIfOpened, False)  # raises TransactionExpired
        assert expired.real.state == "failed" and survivor.real.is_open
        m.advance_time(400)  # past the survivor's original deadline, before the refreshed one (+TTL at the probe)
        m.keep_alive()  # one transaction still alive
        m.transaction_action(_Draw(survivor), "send", 1)
        m.transaction_action(_Draw(survivor), "checkpoint", 1)
        assert survivor.real.state == "checkpointed"
        m.new_consumer("a", "c1", "oldest", False)
        m.consume(_Draw(m.consumers[0], 1), False)
        assert m.consumers[0].position[1] == survivor.id
    finally:
        m.teardown()
