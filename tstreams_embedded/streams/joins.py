"""Joins of a stream with a table, a global table or another stream (windowed).

* **stream–table** (``join``, ``left_join``): each stream record is joined with the table's
  current value of its key in the same task (table updates trigger nothing).
* **stream–global-table**: the same, with ``key_selector(key, value)`` giving the table key;
  the global table holds every partition, so no co-partitioning is needed.
* **stream–stream** with :class:`JoinWindows`: records ``l`` (this side) and ``r`` (other)
  of the same key join when ``l.ts - before_ms <= r.ts <= l.ts + after_ms``; the result has
  the larger timestamp. *Stream time* ``T`` is the largest timestamp either side has seen
  in the task. A record of this side is late (dropped, counted in ``late_dropped``) when
  ``ts + after_ms + grace_ms < T``, of the other side when ``ts + before_ms + grace_ms < T``
  (as in Kafka Streams). A record is *closed* when no accepted record can match it any more:
  ``ts + before_ms + after_ms + grace_ms < T``; closed records are deleted, and ``left_join``
  (this side) / ``outer_join`` (both sides) emit the closed ones that never matched, padded
  with None, with their own timestamp; the others are dropped (counted in ``join_no_match``,
  as are the stream records an inner stream–table join finds no row for).

Both sides of a join must be co-partitioned (same key on the same task): checked when the
topology is built (an upstream key change raises :class:`~..errors.TopologyError` with a hint
to ``repartition()``) and when the App starts (equal partition counts).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import msgpack

from .. import errors
from . import nodes as N
from .global_table import GlobalTable
from .records import Record
from .serdes import Serde, SerdeSpec, describe, serde
from .stores import time_key, time_of
from .topology import TopologyGraph, internal_name
from .windows import MAX_DURATION_MS

KINDS = ("inner", "left", "outer")


@runtime_checkable
class JoinedStream(Protocol):
    """A stream on either side of a join (:class:`~.kstream.KStream` is one)."""

    @property
    def builder(self) -> TopologyGraph: ...

    @property
    def name(self) -> str: ...

    @property
    def key_changed(self) -> bool: ...


@runtime_checkable
class JoinedTable(Protocol):
    """A table a stream joins by key, in the task of the key (:class:`~.table.Table` is one)."""

    @property
    def builder(self) -> TopologyGraph: ...

    @property
    def getter(self) -> N.Getter: ...

    def sources(self) -> frozenset[str]: ...


@dataclass(frozen=True)
class JoinWindows:
    """``l.ts - before_ms <= r.ts <= l.ts + after_ms``; records up to ``grace_ms`` out of
    order are still joined. ``JoinWindows.of(ms)`` is symmetric."""

    before_ms: int
    after_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        for what in ("before_ms", "after_ms", "grace_ms"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_DURATION_MS:
                raise errors.InvalidArgument(f"JoinWindows {what} must be an integer in [0, {MAX_DURATION_MS}] "
                                             f"(the span of the valid timestamps), got {v!r:.40}")

    @classmethod
    def of(cls, ms: int, grace_ms: int = 0) -> JoinWindows:
        return cls(ms, ms, grace_ms)


def check_copartitioned(b: TopologyGraph, left: frozenset[str], right: frozenset[str], what: str) -> None:
    """Both sides of a join must put each key on the same task: their sources must serialize
    keys alike (a record's partition is chosen by its key's *bytes*), checked here; their
    partition counts must be equal, checked when the App starts (:func:`check_partition_counts`)."""
    serdes = {stream: describe(b.source_key_serde(stream)) for stream in sorted(left | right)}
    if len(set(serdes.values())) > 1:
        shown = ", ".join(f"{internal_name('<application_id>', s)!r}: {d}" for s, d in serdes.items())
        raise errors.TopologyError(
            f"{what}: the joined streams are not co-partitioned: they serialize keys differently ({shown}), and a "
            "record's partition is chosen by its key's bytes, so equal keys would be on different tasks; read both "
            "sides with the same key_serde, or repartition(key_serde=...) one side to match the other")
    b.require_copartitioned(left | right)


def check_partition_counts(groups: list[frozenset[str]], resolve: Callable[[str], str], info: dict[str, Any]) -> None:
    """At start: the streams of each joined group have equal partition counts."""
    for group in groups:
        counts = {}
        for stream in group:
            name = resolve(stream)
            if name in info:
                counts[name] = info[name].partitions
        if len(set(counts.values())) > 1:
            raise errors.TopologyError(
                f"joined streams must be co-partitioned (equal partition counts), got {counts}; "
                "repartition() one side (repartition(partitions=N)) to match the other")


def _check_key(stream: JoinedStream, what: str) -> None:
    if stream.key_changed:
        raise errors.TopologyError(
            f"{what}: an operation upstream of {stream.name!r} may have changed the keys, so its records are not "
            "on the task of their key; call .repartition() on the stream before the join")


class TagNode(N.Node):
    """Marks records with the side of a join they come from: value ``(side, value)``."""

    def __init__(self, name: str, side: int) -> None:
        super().__init__(name)
        self.side = side

    def process(self, rec: Record) -> None:
        self.forward(Record(rec.key, (self.side, rec.value), rec.timestamp, rec.headers))


class StreamTableJoinNode(N.Node):
    """Each record joined with the table's value of ``key`` (or of ``key_selector(k, v)``)."""

    def __init__(self, name: str, getter: N.Getter, joiner: Callable[[Any, Any], Any], left: bool,
                 key_selector: Callable[[Any, Any], Any] | None) -> None:
        super().__init__(name)
        self.getter = getter
        self.joiner = joiner
        self.left = left
        self.key_selector = key_selector

    def init(self, ctx: N.TaskContext) -> None:
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


class StreamJoinNode(N.Node):
    """The windowed stream–stream join (see the module docstring). Records of each side are
    buffered per key in a store (``[timestamp, matched, value]`` in arrival order by
    timestamp); an index store ``timestamp, side, key`` lists them by time, read once at start
    into a heap that finds closed records (memory: one small tuple per buffered record)."""

    def __init__(self, name: str, windows: JoinWindows, joiner: Callable[[Any, Any], Any], kind: str,
                 stores: tuple[str, str, str]) -> None:
        super().__init__(name)
        self.windows = windows
        self.joiner = joiner
        self.kind = kind
        self.store_names = stores
        w = windows
        self.own_after = (w.after_ms, w.before_ms)
        self.reach = w.before_ms + w.after_ms + w.grace_ms  # closed when ts + reach < stream time

    def init(self, ctx: N.TaskContext) -> None:
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


def join(this: JoinedStream, other: Any, joiner: Callable[[Any, Any], Any], windows: Any,
         key_selector: Callable[[Any, Any], Any] | None, kind: str, name: str | None,
         serdes: dict[str, SerdeSpec]) -> tuple[str, bool]:
    """``stream.join`` / ``left_join`` / ``outer_join`` (see the module docstring): the join's
    node, and whether its keys may be on the wrong task (as ``this``'s after a global join)."""
    if not callable(joiner):
        raise errors.InvalidArgument(f"joiner must be callable, got {joiner!r:.60}")
    b = this.builder
    unknown = set(serdes) - {"key_serde", "value_serde", "other_value_serde"}
    if unknown:
        raise errors.InvalidArgument(f"unknown join arguments {sorted(unknown)}")
    if isinstance(other, GlobalTable):
        if key_selector is None or not callable(key_selector):
            raise errors.TopologyError("a join with a global table needs key_selector=(key, value) -> table key")
        if kind == "outer" or windows is not None:
            raise errors.TopologyError("a global table joins a stream with join or left_join, without windows")
        getter = other.getter
        node = b.add_node("global-join", lambda n: StreamTableJoinNode(n, getter, joiner, kind == "left",
                                                                       key_selector), [this.name], name)
        return node, this.key_changed
    if key_selector is not None:
        raise errors.TopologyError("key_selector is for joins with a global table")
    if isinstance(other, JoinedTable):
        if other.builder is not b:
            raise errors.TopologyError("the table belongs to another StreamsBuilder")
        if kind == "outer" or windows is not None:
            raise errors.TopologyError("a stream joins a table with join or left_join, without windows")
        _check_key(this, "stream–table join")
        check_copartitioned(b, b.source_streams(this.name), other.sources(), "stream–table join")
        table_getter = other.getter
        node = b.add_node("table-join", lambda n: StreamTableJoinNode(n, table_getter, joiner, kind == "left",
                                                                      None), [this.name], name)
        return node, False
    if isinstance(other, JoinedStream):
        if other.builder is not b:
            raise errors.TopologyError("the stream belongs to another StreamsBuilder")
        if not isinstance(windows, JoinWindows):
            raise errors.TopologyError("a stream–stream join needs windows=JoinWindows(before_ms, after_ms, grace_ms)")
        _check_key(this, "stream–stream join")
        _check_key(other, "stream–stream join")
        check_copartitioned(b, b.source_streams(this.name), b.source_streams(other.name), "stream–stream join")
        ks = serdes.get("key_serde", "msgpack")
        this_buf = BufferSerde(serde(serdes.get("value_serde", "msgpack"), "value_serde"))
        other_buf = BufferSerde(serde(serdes.get("other_value_serde", "msgpack"), "other_value_serde"))
        stores = (b.add_store(None, ks, this_buf, kind="join-this-store"),
                  b.add_store(None, ks, other_buf, kind="join-other-store"),
                  b.add_store(None, "bytes", "msgpack", kind="join-index-store"))
        left = b.add_node("join-this", lambda n: TagNode(n, 0), [this.name])
        right = b.add_node("join-other", lambda n: TagNode(n, 1), [other.name])
        node = b.add_node("stream-join", lambda n: StreamJoinNode(n, windows, joiner, kind, stores), [left, right],
                          name)
        return node, False
    raise errors.TopologyError(f"a stream joins a Table, a GlobalTable or a KStream, got {type(other).__name__}")


__all__ = ["JoinWindows"]
