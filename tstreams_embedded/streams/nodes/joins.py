"""Join operators (semantics: :mod:`..joins`): the stream–table and stream–global-table
lookup, and the windowed stream–stream join with its buffers and index by time."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

import msgpack

from ..records import Record
from ..serdes import Serde
from ..stores import time_key, time_of
from .base import Getter, Node, TaskContext

if TYPE_CHECKING:
    from ..windows import JoinWindows


class JoinKind(str, Enum):
    """Which unmatched records a join emits: none (inner), the left side's, or both sides'."""

    INNER = "inner"
    LEFT = "left"
    OUTER = "outer"


class TagNode(Node):
    """Marks records with the side of a join they come from: value ``(side, value)``."""

    def __init__(self, name: str, side: int) -> None:
        super().__init__(name)
        self.side = side

    def process(self, rec: Record) -> None:
        self.forward(Record(rec.key, (self.side, rec.value), rec.timestamp, rec.headers))


class StreamTableJoinNode(Node):
    """Each record joined with the table's value of ``key`` (or of ``key_selector(k, v)``)."""

    def __init__(self, name: str, getter: Getter, joiner: Callable[[Any, Any], Any], left: bool,
                 key_selector: Callable[[Any, Any], Any] | None) -> None:
        super().__init__(name)
        self.getter = getter
        self.joiner = joiner
        self.left = left
        self.key_selector = key_selector

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        self.lookup = self.getter(ctx)

    def process(self, rec: Record) -> None:
        key = rec.key if self.key_selector is None else self.key_selector(rec.key, rec.value)
        other = None if key is None else self.lookup(key)
        if other is None and not self.left:
            self.ctx.count("skipped_null_key" if key is None else "join_no_match")
            return
        self.forward(Record(rec.key, self.joiner(rec.value, other), rec.timestamp, rec.headers))

    def process_batch(self, recs: list[Record], origins: list[int]) -> None:
        """(The table is not changed within a batch: its rows come in transactions of their own.)"""
        lookup, joiner, selector, left = self.lookup, self.joiner, self.key_selector, self.left
        out: list[Record] = []
        out_origins: list[int] = []
        for rec, origin in zip(recs, origins, strict=True):
            key = rec.key if selector is None else selector(rec.key, rec.value)
            other = None if key is None else lookup(key)
            if other is None and not left:
                self.ctx.count("skipped_null_key" if key is None else "join_no_match")
                continue
            out.append(Record(rec.key, joiner(rec.value, other), rec.timestamp, rec.headers))
            out_origins.append(origin)
        self.forward_batch(out, out_origins)


class BufferSerde:
    """A join buffer entry: a list of ``[timestamp, matched, value]``, values with ``inner``."""

    def __init__(self, inner: Serde) -> None:
        self.inner = inner

    def serialize(self, obj: Any) -> bytes:
        data: bytes = msgpack.packb([[t, m, self.inner.serialize(v)] for t, m, v in obj], use_bin_type=True)
        return data

    def deserialize(self, data: bytes) -> Any:
        return [[t, m, self.inner.deserialize(v)] for t, m, v in msgpack.unpackb(data, raw=False)]


class StreamJoinNode(Node):
    """The windowed stream–stream join (see the module docstring). Records of each side are
    buffered per key in a store (``[timestamp, matched, value]`` in arrival order by
    timestamp); an index store ``timestamp, side, key`` lists them by time, read once at start
    into a heap that finds closed records (memory: one small tuple per buffered record)."""

    def __init__(self, name: str, windows: JoinWindows, joiner: Callable[[Any, Any], Any], kind: JoinKind,
                 stores: tuple[str, str, str]) -> None:
        super().__init__(name)
        self.windows = windows
        self.joiner = joiner
        self.kind = kind
        self.store_names = stores
        w = windows
        self.own_after = (w.after_ms, w.before_ms)
        self.reach = w.before_ms + w.after_ms + w.grace_ms  # closed when ts + reach < stream time

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        self.buffers = (ctx.store(self.store_names[0]), ctx.store(self.store_names[1]))
        self.index = ctx.store(self.store_names[2])
        self.meta_key = ("join-time/" + self.name).encode()
        self.time: int | None = ctx.meta().get_raw(self.meta_key)
        # the buffered records by time (one range read of the index at start, then in memory)
        self.pending: list[tuple[int, int, bytes]] = [
            (time_of(ik), ik[8], ik[9:]) for ik, _ in self.index.scan_raw(None, None)]
        heapq.heapify(self.pending)
        self.emit_unmatched = (self.kind in ("left", "outer"), self.kind == "outer")

    def flush(self) -> None:
        if self.time is not None:
            self.ctx.meta().put_raw(self.meta_key, self.time)

    def process(self, rec: Record) -> None:
        side, value = rec.value
        key, t = rec.key, rec.timestamp
        if key is None:
            self.ctx.count("skipped_null_key")
            return
        now = t if self.time is None or t > self.time else self.time
        self.time = now
        if t + self.own_after[side] + self.windows.grace_ms < now:
            self.ctx.count("late_dropped")
            return
        w = self.windows
        lo, hi = (t - w.before_ms, t + w.after_ms) if side == 0 else (t - w.after_ms, t + w.before_ms)
        kb = self.buffers[0].key_serde.serialize(key)
        other_store = self.buffers[1 - side]
        others = other_store.get_raw(kb)
        matched = False
        if others:
            changed = False
            for entry in others:
                if lo <= entry[0] <= hi:
                    left, right = (value, entry[2]) if side == 0 else (entry[2], value)
                    self.forward(Record(key, self.joiner(left, right), max(t, entry[0]), rec.headers))
                    matched = True
                    if not entry[1]:
                        entry[1] = changed = True
            if changed:
                other_store.put_raw(kb, others)
        own_store = self.buffers[side]
        own = list(own_store.get_raw(kb) or [])
        pos = bisect.bisect_right([e[0] for e in own], t)
        own.insert(pos, [t, matched, value])
        own_store.put_raw(kb, own)
        ik = time_key(t) + bytes([side]) + kb
        if self.index.get_raw(ik) is None:
            self.index.put_raw(ik, 1)
            heapq.heappush(self.pending, (t, side, kb))
        self._expire(now, rec.headers)

    def _expire(self, now: int, headers: dict[str, bytes] | None) -> None:
        bound = now - self.reach  # records with ts < bound are closed
        pending = self.pending
        while pending and pending[0][0] < bound:
            t, side, kb = heapq.heappop(pending)
            self.index.put_raw(time_key(t) + bytes([side]) + kb, None)
            store = self.buffers[side]
            entries = store.get_raw(kb) or []
            keep = [e for e in entries if e[0] != t]
            unmatched = [e for e in entries if e[0] == t and not e[1]]
            if self.emit_unmatched[side]:
                key = store.key_serde.deserialize(kb)
                for e in unmatched:
                    left, right = (e[2], None) if side == 0 else (None, e[2])
                    self.forward(Record(key, self.joiner(left, right), t, headers))
            elif unmatched:  # closed without a match, in a join that drops those
                self.ctx.count("join_no_match", len(unmatched))
            store.put_raw(kb, keep or None)
