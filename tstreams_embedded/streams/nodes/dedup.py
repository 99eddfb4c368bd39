"""``stream.dedup(key=…, ttl_ms=…)``: drop records whose dedup key was seen within the TTL.

Semantics, in event time, per task: the node keeps, per dedup key, the timestamp ``t0`` of
the record that let it through. A record with dedup key ``d`` at ``t`` is a duplicate (dropped,
counted in ``dedup_dropped``) when ``d`` is remembered and ``t < t0 + ttl_ms``. ``d`` is
forgotten once the node's stream time (the largest timestamp it has seen) reaches
``t0 + ttl_ms``; the next record of ``d`` passes and is remembered. Forgotten keys are
deleted from the store by themselves (an index by time, read once at start into a heap,
finds them), so state is bounded by the keys of one TTL. The store, the index and the
stream time are committed with the task, in the same atomic write as the output and the
input offsets: dedup is exact across crashes.

Records with the same dedup key must reach the same task: key the stream by it (or by
something it depends on), and ``repartition()`` after an operation that changes keys. A
dedup that reads an input stream of more than one partition directly (no repartition or
``through`` in between) refuses a record without a key with
:class:`~tstreams_embedded.errors.TopologyError`: such records are spread over the
partitions (round-robin) whatever their dedup key, so duplicates would pass unnoticed.
Repartition by the dedup key first: ``.select_key(lambda k, v: v["id"]).repartition()``.

**Duplicates let through after the TTL** (``dedup_expired``): a record arriving out of order
may be a duplicate of a key already forgotten because the stream time passed ``t0 +
ttl_ms``, though ``t < t0 + ttl_ms``. It passes, as the rule says, and is counted: the node
keeps the keys it forgot for one more TTL, in memory only (about :data:`FORGOTTEN_BYTES`
of memory at most, the oldest dropped first; not committed, so a restart starts that count
afresh). Out-of-order input comes from repartition streams fed by several
tasks (see :class:`~.app.App`, *order across tasks*).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from ... import errors
from ..records import Record
from ..stores import time_key, time_of
from .base import Node, TaskContext

#: memory a dedup node spends on the keys it forgot, to count ``dedup_expired`` (bytes,
#: each key counted with :data:`FORGOTTEN_OVERHEAD`: its dict entry, heap entry and objects)
FORGOTTEN_BYTES = 4 << 20


FORGOTTEN_OVERHEAD = 160


class DedupNode(Node):
    def __init__(self, name: str, key: Callable[[Any, Any], Any], ttl_ms: int, store: str, index: str,
                 inputs: frozenset[str]) -> None:
        super().__init__(name)
        self.inputs = inputs  # the input streams it reads directly (their partitioning is the producers')
        self.key = key
        self.ttl = ttl_ms
        self.store_name = store
        self.index_name = index

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        #: records without a key are refused (see the module docstring)
        self.unkeyed_refused = [s for s in sorted(self.inputs) if ctx.source_partitions(s) > 1]
        self.seen = ctx.store(self.store_name)
        self.index = ctx.store(self.index_name)
        self.meta_key = ("dedup-time/" + self.name).encode()
        self.time: int | None = ctx.meta().get_raw(self.meta_key)
        # remembered (t0, key) by time: one range read of the index at start, then in memory
        self.pending: list[tuple[int, bytes]] = [(time_of(ik), ik[8:]) for ik, _ in self.index.scan_raw(None, None)]
        heapq.heapify(self.pending)
        # keys forgotten within the last TTL: key -> t0, and (t0, key) by time
        self.forgotten: dict[bytes, int] = {}
        self.forgotten_by_time: list[tuple[int, bytes]] = []
        self.forgotten_bytes = 0

    def flush(self) -> None:
        if self.time is not None:
            self.ctx.meta().put_raw(self.meta_key, self.time)

    def process(self, rec: Record) -> None:
        if rec.key is None and self.unkeyed_refused:
            raise errors.TopologyError(
                f"dedup {self.name!r} reads {', '.join(map(repr, self.unkeyed_refused))} (several partitions) and got "
                "a record without a key: such records are spread over the partitions whatever their dedup key, so "
                "duplicates would reach different tasks and pass. Repartition by the dedup key first, e.g. "
                "stream.select_key(lambda k, v: v['id']).repartition().dedup(...)")
        t = rec.timestamp
        now = t if self.time is None or t > self.time else self.time
        self.time = now
        kb = self.seen.key_serde.serialize(self.key(rec.key, rec.value))
        t0 = self.seen.get_raw(kb)
        if t0 is not None and t < t0 + self.ttl and now < t0 + self.ttl:
            self.ctx.count("dedup_dropped")
            self._expire(now)
            return
        if t0 is None:
            f0 = self.forgotten.get(kb)
            if f0 is not None and f0 <= t < f0 + self.ttl:
                self.ctx.count("dedup_expired")
        else:
            self.index.put_raw(time_key(t0) + kb, None)
            self.seen.put_raw(kb, None)
        if t + self.ttl > now:  # else it is forgotten at once: nothing to remember
            self.seen.put_raw(kb, t)
            self.index.put_raw(time_key(t) + kb, 1)
            heapq.heappush(self.pending, (t, kb))
        self._expire(now)
        self.forward(rec)

    def _expire(self, now: int) -> None:
        bound = now - self.ttl  # t0 <= bound: forgotten (t0 + ttl <= now)
        pending = self.pending
        while pending and pending[0][0] <= bound:
            t0, kb = heapq.heappop(pending)
            self.index.put_raw(time_key(t0) + kb, None)
            if self.seen.get_raw(kb) == t0:
                self.seen.put_raw(kb, None)
                self._remember_forgotten(kb, t0)
        forgotten = self.forgotten_by_time
        while forgotten and (forgotten[0][0] <= bound - self.ttl or self.forgotten_bytes > FORGOTTEN_BYTES):
            t0, kb = heapq.heappop(forgotten)
            self.forgotten_bytes -= len(kb) + FORGOTTEN_OVERHEAD
            if self.forgotten.get(kb) == t0:
                del self.forgotten[kb]

    def _remember_forgotten(self, kb: bytes, t0: int) -> None:
        """Keep forgotten key ``kb`` (remembered since ``t0``) for one more TTL, oldest first
        out beyond :data:`FORGOTTEN_BYTES`."""
        self.forgotten[kb] = t0
        heapq.heappush(self.forgotten_by_time, (t0, kb))
        self.forgotten_bytes += len(kb) + FORGOTTEN_OVERHEAD
