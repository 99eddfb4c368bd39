"""Runtime processor nodes: one instance per task, wired parent -> children.

Each node receives a :class:`~.records.Record` in :meth:`Node.process` and passes results
on with :meth:`Node.forward`. Nodes reach their task only through :class:`TaskContext`
(stores, output, metrics, time).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .. import errors
from ..engine import state
from .records import Record
from .serdes import Serde
from .stores import KeyValueStore
from .windows import SessionWindows, SlidingWindows, Windowed, Windows


class TaskContext(Protocol):
    """What nodes may use of their task."""

    application_id: str
    partition: int

    def store(self, name: str) -> KeyValueStore: ...

    def meta(self) -> KeyValueStore: ...

    def send(self, stream: str, key: bytes | None, value: bytes | None, timestamp: int,
             headers: dict[str, bytes] | None) -> None: ...

    def count(self, metric: str, n: int = 1) -> None: ...

    def stream_time(self) -> int | None: ...

    def wall_clock_ms(self) -> int: ...

    def schedule(self, interval_ms: int, punctuation: str, callback: Callable[[int], Any]) -> None: ...


class Node:
    """A processor node: ``process`` a record, ``forward`` results to the children."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.children: list[Node] = []

    def init(self, ctx: TaskContext) -> None:
        self.ctx = ctx

    def process(self, rec: Record) -> None:
        self.forward(rec)

    def forward(self, rec: Record) -> None:
        for child in self.children:
            child.process(rec)

    def flush(self) -> None:
        """Called before each commit: put state kept in memory into the task's stores."""

    def close(self) -> None:
        pass


class SourceNode(Node):
    """Decodes items of a stream into records (see :mod:`.records` for the envelope)."""

    def __init__(self, name: str, stream: str, key_serde: Serde, value_serde: Serde,
                 timestamp: Callable[[Any, Any], int] | None) -> None:
        super().__init__(name)
        self.stream = stream
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.extract = timestamp


class FilterNode(Node):
    def __init__(self, name: str, predicate: Callable[[Any, Any], Any], keep: bool) -> None:
        super().__init__(name)
        self.predicate = predicate
        self.keep = keep

    def process(self, rec: Record) -> None:
        if bool(self.predicate(rec.key, rec.value)) is self.keep:
            self.forward(rec)


class MapNode(Node):
    """``map``: ``fn(key, value) -> (key, value)``."""

    def __init__(self, name: str, fn: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        super().__init__(name)
        self.fn = fn

    def process(self, rec: Record) -> None:
        key, value = _pair(self.fn(rec.key, rec.value), self.name)
        self.forward(Record(key, value, rec.timestamp, rec.headers))


class MapValuesNode(Node):
    def __init__(self, name: str, fn: Callable[[Any, Any], Any], with_key: bool) -> None:
        super().__init__(name)
        self.fn = fn
        self.with_key = with_key

    def process(self, rec: Record) -> None:
        value = self.fn(rec.key, rec.value) if self.with_key else self.fn(rec.value)  # type: ignore[call-arg]
        self.forward(Record(rec.key, value, rec.timestamp, rec.headers))


class FlatMapNode(Node):
    """``flat_map``: ``fn(key, value) -> iterable of (key, value)``; ``flat_map_values``:
    ``fn(value) -> iterable of values``."""

    def __init__(self, name: str, fn: Callable[..., Iterable[Any]], values_only: bool) -> None:
        super().__init__(name)
        self.fn = fn
        self.values_only = values_only

    def process(self, rec: Record) -> None:
        if self.values_only:
            for value in self.fn(rec.value):
                self.forward(Record(rec.key, value, rec.timestamp, rec.headers))
        else:
            for pair in self.fn(rec.key, rec.value):
                key, value = _pair(pair, self.name)
                self.forward(Record(key, value, rec.timestamp, rec.headers))


class SelectKeyNode(Node):
    def __init__(self, name: str, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(name)
        self.fn = fn

    def process(self, rec: Record) -> None:
        self.forward(Record(self.fn(rec.key, rec.value), rec.value, rec.timestamp, rec.headers))


class PeekNode(Node):
    """``peek`` (forwards) and ``foreach`` (terminal)."""

    def __init__(self, name: str, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(name)
        self.fn = fn

    def process(self, rec: Record) -> None:
        self.fn(rec.key, rec.value)
        self.forward(rec)


class BranchNode(Node):
    """``split()``: each record goes to the first branch whose predicate holds (children in
    branch order; a default branch has predicate None)."""

    def __init__(self, name: str, predicates: list[Callable[[Any, Any], Any] | None]) -> None:
        super().__init__(name)
        self.predicates = predicates
        self.branches: list[Node | None] = []

    def process(self, rec: Record) -> None:
        for predicate, child in zip(self.predicates, self.branches, strict=True):
            if predicate is None or predicate(rec.key, rec.value):
                if child is not None:
                    child.process(rec)
                return


class SinkNode(Node):
    """Writes records to a stream (committed with the task: output, state and offsets in one
    write). Keys go to their CRC-32C partition."""

    def __init__(self, name: str, stream: str, key_serde: Serde, value_serde: Serde) -> None:
        super().__init__(name)
        self.stream = stream
        self.key_serde = key_serde
        self.value_serde = value_serde
        #: set by the task: the source node that reads this stream in the same task when the
        #: stream is an internal repartition stream with one partition (no round trip needed)
        self.fused: Node | None = None

    def process(self, rec: Record) -> None:
        if self.fused is not None:
            self.fused.forward(rec)
            return
        kb = None if rec.key is None else self.key_serde.serialize(rec.key)
        vb = None if rec.value is None else self.value_serde.serialize(rec.value)
        self.ctx.send(self.stream, kb, vb, rec.timestamp, rec.headers)


class Aggregation:
    """``initializer() -> agg``, ``aggregator(key, value, agg) -> agg`` and, for sessions,
    ``merger(key, agg1, agg2) -> agg``."""

    def __init__(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                 merger: Callable[[Any, Any, Any], Any] | None) -> None:
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger


class AggregateNode(Node):
    """``count`` / ``reduce`` / ``aggregate`` per key; forwards each updated value."""

    def __init__(self, name: str, store: str, agg: Aggregation) -> None:
        super().__init__(name)
        self.store_name = store
        self.agg = agg

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        self.store = ctx.store(self.store_name)

    def process(self, rec: Record) -> None:
        if rec.key is None:
            self.ctx.count("skipped_null_key")
            return
        kb = self.store.key_serde.serialize(rec.key)
        current = self.store.get_raw(kb)
        if current is None:
            current = self.agg.initializer()
        new = self.agg.aggregator(rec.key, rec.value, current)
        self.store.put_raw(kb, new)
        self.forward(Record(rec.key, new, rec.timestamp, rec.headers))


class WindowAggregateNode(Node):
    """A windowed aggregation with event-time semantics.

    * Its *stream time* is the largest timestamp it has seen (kept in the task's meta store,
      so it survives restarts with the rest of the commit).
    * A record is *late* for a window when ``end + grace <= stream time`` (after counting
      the record itself): it is dropped and counted (``late_dropped``), or sent to
      ``late_to`` once.
    * Without suppression every update is forwarded; with ``suppress_until_window_closes``
      each window is forwarded once, when it closes, with the window end as timestamp.
    * Windows are deleted from the store once ``end + retention <= stream time``.
    """

    def __init__(self, name: str, store: str, windows: Windows, agg: Aggregation, late_to: str | None,
                 late_value_serde: Serde, raw_store: str | None = None) -> None:
        super().__init__(name)
        self.store_name = store
        self.raw_store_name = raw_store
        self.windows = windows
        self.agg = agg
        self.suppress = False
        self.late_to = late_to
        self.late_value_serde = late_value_serde
        self.grace = windows.grace_ms
        self.sessions = isinstance(windows, SessionWindows)
        self.sliding = isinstance(windows, SlidingWindows)

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        self.store = ctx.store(self.store_name)
        self.raw = ctx.store(self.raw_store_name) if self.raw_store_name is not None else None
        self.key_serde = self.store.key_serde
        self.meta_key = ("observed/" + self.name).encode()
        self.observed: int | None = ctx.meta().get_raw(self.meta_key)
        self.retired_to = state.MIN_TIME
        self.heap: list[tuple[int, int, bytes]] = []
        self.open: set[bytes] = set()
        self.by_key: dict[bytes, set[tuple[int, int]]] = {}
        if self.observed is not None:  # windows not closed yet, from the store (no replay)
            lo = state.window_bound(self.observed - self.grace + 1)
            for wk, _ in self.store.scan_raw(lo, None):
                end, start, kb = state.split_window_key(wk)
                self._track(wk, end, start, kb)

    def flush(self) -> None:
        if self.observed is not None:
            self.ctx.meta().put_raw(self.meta_key, self.observed)

    def _track(self, wk: bytes, end: int, start: int, kb: bytes) -> None:
        if wk not in self.open:
            self.open.add(wk)
            heapq.heappush(self.heap, (end, start, kb))
            if self.sessions or self.sliding:
                self.by_key.setdefault(kb, set()).add((start, end))

    def _untrack(self, wk: bytes, end: int, start: int, kb: bytes) -> None:
        self.open.discard(wk)
        if self.sessions or self.sliding:
            spans = self.by_key.get(kb)
            if spans is not None:
                spans.discard((start, end))
                if not spans:
                    del self.by_key[kb]

    def process(self, rec: Record) -> None:
        if rec.key is None:
            self.ctx.count("skipped_null_key")
            return
        t = rec.timestamp
        observed = t if self.observed is None or t > self.observed else self.observed
        self.observed = observed
        kb = self.key_serde.serialize(rec.key)
        if self.sessions:
            late = self._session(rec, kb, observed)
        elif self.sliding:
            late = self._slide(rec, kb, observed)
        else:
            late = False
            for start, end in self.windows.windows_for(t):
                if end + self.grace <= observed:
                    late = True
                    continue
                self._add(rec, kb, start, end)
        if late:
            self._late(rec)
        self._close(observed)

    def _add(self, rec: Record, kb: bytes, start: int, end: int) -> None:
        wk = state.window_key(end, start, kb)
        current = self.store.get_raw(wk)
        if current is None:
            current = self.agg.initializer()
        self._put(rec, wk, kb, start, end, self.agg.aggregator(rec.key, rec.value, current))

    def _put(self, rec: Record, wk: bytes, kb: bytes, start: int, end: int, value: Any) -> None:
        self.store.put_raw(wk, value)
        self._track(wk, end, start, kb)
        if not self.suppress:
            self.forward(Record(Windowed(rec.key, start, end), value, rec.timestamp, rec.headers))

    def _session(self, rec: Record, kb: bytes, observed: int) -> bool:
        t = rec.timestamp
        gap = self.windows.gap_ms  # type: ignore[attr-defined]
        merged = sorted((s, e) for s, e in self.by_key.get(kb, ()) if s - gap <= t <= e - 1 + gap)
        start = min([t] + [s for s, _ in merged])
        end = max([t + 1] + [e for _, e in merged])
        if end + self.grace <= observed:
            return True
        value = self.agg.aggregator(rec.key, rec.value, self.agg.initializer())
        merger = self.agg.merger
        for s, e in merged:
            wk = state.window_key(e, s, kb)
            old = self.store.get_raw(wk)
            if old is not None:
                if merger is None:
                    raise errors.TopologyError("session windows need a merger: aggregate(..., merger=...)")
                value = merger(rec.key, value, old)
            self.store.put_raw(wk, None)
            self._untrack(wk, e, s, kb)
            if not self.suppress and (s, e) != (start, end):
                self.forward(Record(Windowed(rec.key, s, e), None, t, rec.headers))
        self._put(rec, state.window_key(end, start, kb), kb, start, end, value)
        return False

    def _slide(self, rec: Record, kb: bytes, observed: int) -> bool:
        """Sliding windows: the record's own window aggregates every record of the key in
        ``[t - size, t]`` (the records are kept in a second store, by time); the windows
        that contain ``t`` get the record added."""
        t = rec.timestamp
        size = self.windows.size_ms  # type: ignore[attr-defined]
        late = True
        # existing windows [e - 1 - size, e) that contain t (their own record time e - 1 >= t)
        for s, e in sorted(self.by_key.get(kb, ())):
            if s <= t < e and (s, e) != (t - size, t + 1) and e + self.grace > observed:
                self._add(rec, kb, s, e)
                late = False
        start, end = t - size, t + 1
        if end + self.grace > observed:
            late = False
            wk = state.window_key(end, start, kb)
            if wk not in self.open:
                value = self.agg.initializer()
                raw = self._raw_records(kb, start, t)
                for key, v in raw:
                    value = self.agg.aggregator(key, v, value)
                self._put(rec, wk, kb, start, end, self.agg.aggregator(rec.key, rec.value, value))
            else:
                self._add(rec, kb, start, end)
        self._keep_raw(rec, kb)
        return late

    def _raw_records(self, kb: bytes, lo: int, hi: int) -> list[tuple[Any, Any]]:
        assert self.raw is not None
        out = []
        for rk, values in self.raw.scan_raw(state.window_bound(lo), state.window_bound(hi + 1)):
            if state.split_window_key(rk)[2] == kb:
                out.extend(values)
        return out

    def _keep_raw(self, rec: Record, kb: bytes) -> None:
        assert self.raw is not None
        t = rec.timestamp
        wk = state.window_key(t, t, kb)
        values = list(self.raw.get_raw(wk) or [])
        values.append([rec.key, rec.value])
        self.raw.put_raw(wk, values)

    def _late(self, rec: Record) -> None:
        self.ctx.count("late_dropped")
        if self.late_to is not None:
            vb = None if rec.value is None else self.late_value_serde.serialize(rec.value)
            self.ctx.send(self.late_to, self.key_serde.serialize(rec.key), vb, rec.timestamp, rec.headers)

    def _close(self, observed: int) -> None:
        heap = self.heap
        grace = self.grace
        while heap and heap[0][0] + grace <= observed:
            end, start, kb = heapq.heappop(heap)
            wk = state.window_key(end, start, kb)
            if wk not in self.open:
                continue
            self._untrack(wk, end, start, kb)
            if self.suppress:
                value = self.store.get_raw(wk)
                if value is not None:
                    key = _hashable(self.key_serde.deserialize(kb))
                    self.forward(Record(Windowed(key, start, end), value, end, None))
        cutoff = observed - self.windows.retention_ms
        if cutoff - self.retired_to >= max(1, self.windows.retention_ms // 4):
            for store in (self.store, self.raw):
                if store is not None:
                    store.delete_range_raw(state.window_bound(state.MIN_TIME), state.window_bound(cutoff + 1))
            self.retired_to = cutoff


class ProcessorNode(Node):
    """A user :class:`Processor` (``stream.process`` / ``add_processor``)."""

    def __init__(self, name: str, factory: Callable[[], Any], stores: tuple[str, ...]) -> None:
        super().__init__(name)
        self.factory = factory
        self.store_names = stores

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        from .processor import ProcessorContext

        self.processor = self.factory()
        self.processor.init(ProcessorContext(ctx, self))

    def process(self, rec: Record) -> None:
        self.processor.process(rec)

    def close(self) -> None:
        self.processor.close()


def _pair(value: Any, where: str) -> tuple[Any, Any]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise errors.TopologyError(f"{where}: the function must return a (key, value) pair, got {value!r:.80}")
    return value[0], value[1]


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    return key
