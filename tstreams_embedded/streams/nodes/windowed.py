"""Windowed aggregation: the runtime node behind ``windowed_by(...).count/reduce/aggregate``."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from ... import errors
from ...engine.storage import state_stores as state
from ..record_slices import RecordSlices
from ..records import Record
from ..serdes import JsonSerde, MsgpackSerde, Serde, StrSerde
from ..windows import SessionWindows, SlidingWindows, TimeWindows, Windowed, Windows
from .aggregate import Aggregation
from .base import Node, TaskContext

#: aggregate values a batch may keep in memory between its records (they cannot be changed
#: in place by a later aggregator call, so what was forwarded stays as it was)
_IMMUTABLE = frozenset({int, float, str, bytes, bool, type(None)})
_MISSING = object()
#: the most aggregates the batches since the last commit keep in memory (beyond, they go into
#: the store's cache, which is bounded by bytes)
LOCAL_MAX = 8192
#: the record keys a window remembers for its final result: those its key serde (str, JSON
#: or msgpack) reads back as they were
_KEPT_KEYS = (str, int)


class WindowAggregateNode(Node):
    """A windowed aggregation with event-time semantics.

    * Its *stream time* is the largest timestamp it has seen (kept in the task's meta store,
      so it survives restarts with the rest of the commit).
    * A record is *late* for a window when ``end + grace <= stream time`` (after counting
      the record itself): it is dropped and counted (``late_dropped``), or sent to
      ``late_to`` once (counted in ``late_redirected``).
    * Every update is forwarded to the ordinary children; the children that are
      :class:`SuppressNode` (``suppress_until_window_closes()``) get each window once
      instead, when it closes, with the window end as timestamp. So the table's updates and
      its final results can be read side by side.
    * Windows are deleted from the store once ``end + retention <= stream time``.

    A window that is not tracked as open is not in the store (every window written is
    tracked until it closes, and a closed one takes no more records), so a record that starts
    a window reads nothing from the store. Immutable aggregates (counts, sums) are kept in
    memory from record to record and from batch to batch, and each changed window goes into
    the store once per commit (:meth:`flush`; or once :data:`LOCAL_MAX` are kept);
    :meth:`process_batch` (time windows) loops over a batch with the same rules. Records are
    still aggregated, found late and closing windows one at a time, in order.
    """

    def __init__(self, name: str, store: str, windows: Windows, agg: Aggregation, late_to: str | None,
                 late_value_serde: Serde, raw_store: str | None = None) -> None:
        super().__init__(name)
        self.store_name = store
        self.raw_store_name = raw_store
        self.windows = windows
        self.agg = agg
        self.late_to = late_to
        self.late_value_serde = late_value_serde
        self.grace = windows.grace_ms
        self.sessions = isinstance(windows, SessionWindows)
        self.sliding = isinstance(windows, SlidingWindows)

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        self.updates = [c for c in self.children if not isinstance(c, SuppressNode)]
        self.finals = [c for c in self.children if isinstance(c, SuppressNode)]
        self.store = ctx.store(self.store_name)
        #: whether aggregates may stay in memory until the commit (:meth:`_set`): not when a
        #: Processor API node could read the store between records
        self.keep_local = ctx.batched
        self.raw = ctx.store(self.raw_store_name) if self.raw_store_name is not None else None
        if self.raw is not None:
            self.slices = RecordSlices(self.raw, self.windows.size_ms)  # type: ignore[attr-defined]
        self.key_serde = self.store.key_serde
        self.meta_key = ("observed/" + self.name).encode()
        self.observed: int | None = ctx.meta().get_raw(self.meta_key)
        self.retired_to = state.MIN_TIME
        #: the ends of the open windows (a heap), and the keys of the windows of each end
        #: (a window untracked early, by a session merge, stays there until its end)
        self.ends: list[int] = []
        self.closing: dict[int, list[bytes]] = {}
        #: the keys of the batches' records, kept for the final results (see :meth:`_close`)
        self.key_kept = type(self.key_serde) in (StrSerde, JsonSerde, MsgpackSerde)
        #: window key -> aggregate, kept in memory until the commit (see :meth:`process_batch`)
        self._local: dict[bytes, Any] = {}
        #: open window key -> its record key (None: read back from the key bytes when it closes)
        self.open: dict[bytes, Any] = {}
        self.by_key: dict[bytes, set[tuple[int, int]]] = {}
        if self.observed is not None:  # windows not closed yet, from the store (no replay)
            lo = state.window_bound(self.observed - self.grace + 1)
            for wk, _ in self.store.scan_raw(lo, None):
                end, start, kb = state.split_window_key(wk)
                self._track(wk, end, start, kb)

    def flush(self) -> None:
        self._put_local()
        if self.raw is not None:
            observed = self.observed
            size = self.windows.size_ms  # type: ignore[attr-defined]
            self.slices.flush(None if observed is None else observed - size - self.grace)
        if self.observed is not None:
            self.ctx.meta().put_raw(self.meta_key, self.observed)

    def own_stream_time(self) -> int | None:
        return self.observed

    def advance_stream_time(self, to: int) -> None:
        """Move stream time to ``to`` as a record stamped ``to`` would (closing windows,
        releasing suppressed results); nothing before the first record (no window is open)."""
        if self.observed is not None and to > self.observed:
            self.observed = to
            self._close(to)

    def _track(self, wk: bytes, end: int, start: int, kb: bytes, key: Any = None) -> None:
        if wk not in self.open:
            self.open[wk] = key if self.key_kept and type(key) in _KEPT_KEYS else None
            bucket = self.closing.get(end)
            if bucket is None:
                self.closing[end] = [wk]
                heapq.heappush(self.ends, end)
            else:
                bucket.append(wk)
            if self.sessions or self.sliding:
                self.by_key.setdefault(kb, set()).add((start, end))

    def _untrack(self, wk: bytes, end: int, start: int, kb: bytes) -> None:
        self.open.pop(wk, None)
        if self.sessions or self.sliding:
            spans = self.by_key.get(kb)
            if spans is not None:
                spans.discard((start, end))
                if not spans:
                    del self.by_key[kb]

    def process(self, rec: Record) -> None:
        if len(self._local) > LOCAL_MAX:
            self._put_local()
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
            late = True  # late only when no window of the record is still open (Kafka's rule)
            for start, end in self.windows.windows_for(t):
                if end + self.grace <= observed:
                    continue
                self._add(rec, kb, start, end)
                late = False
        if late:
            self._late(rec)
        self._close(observed)

    def _add(self, rec: Record, kb: bytes, start: int, end: int) -> None:
        wk = state.window_key(end, start, kb)
        current = self._get(wk) if wk in self.open else None  # (not open: a new window)
        if current is None:
            current = self.agg.initializer()
        self._put(rec, wk, kb, start, end, self.agg.aggregator(rec.key, rec.value, current))

    def _get(self, wk: bytes) -> Any:
        """The aggregate of window ``wk``: kept in memory, or from the store."""
        value = self._local.get(wk, _MISSING)
        return self.store.get_raw(wk) if value is _MISSING else value

    def _set(self, wk: bytes, value: Any) -> None:
        """Set the aggregate of window ``wk``: in memory until the commit when it is
        immutable and the task is batched (no Processor API node reads stores), else into
        the store at once (StoreKeyTooLong for a key too long)."""
        if len(wk) > state.MAX_STORE_KEY or type(value) not in _IMMUTABLE or not self.keep_local:
            self._local.pop(wk, None)
            self.store.put_raw(wk, value)
        else:
            self._local[wk] = value

    def _put(self, rec: Record, wk: bytes, kb: bytes, start: int, end: int, value: Any) -> None:
        self._set(wk, value)
        self._track(wk, end, start, kb, rec.key)
        self._update(Record(Windowed(rec.key, start, end), value, rec.timestamp, rec.headers))

    def _update(self, rec: Record) -> None:
        for child in self.updates:
            child.process(rec)

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
            old = self._get(wk)
            if old is not None:
                if merger is None:
                    raise errors.TopologyError("session windows need a merger: aggregate(..., merger=...)")
                value = merger(rec.key, value, old)
            self._set(wk, None)
            self._untrack(wk, e, s, kb)
            if (s, e) != (start, end):
                self._update(Record(Windowed(rec.key, s, e), None, t, rec.headers))
        self._put(rec, state.window_key(end, start, kb), kb, start, end, value)
        return False

    def _slide(self, rec: Record, kb: bytes, observed: int) -> bool:
        """Sliding windows: the record's own window aggregates every record of the key in
        ``[t - size, t]`` (read from the key's record slices, see :class:`RecordSlices`); the
        windows that contain ``t`` get the record added."""
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
                for key, v in self.slices.records(kb, start, t):
                    value = self.agg.aggregator(key, v, value)
                self._put(rec, wk, kb, start, end, self.agg.aggregator(rec.key, rec.value, value))
            else:
                self._add(rec, kb, start, end)
        if not late:  # a late record is dropped: no window made later may count it either
            self.slices.keep(kb, t, rec.key, rec.value)
        return late

    def process_batch(self, recs: list[Record], origins: list[int]) -> None:
        """The records of a batch, each as :meth:`process` does (see the class docstring).
        Session and sliding windows, a ``late_to`` stream and children of both kinds (updates
        and final results) go record by record."""
        if self.sessions or self.sliding or self.late_to is not None or (self.updates and self.finals):
            super().process_batch(recs, origins)
            return
        out: list[Record] = []  # updates, or final results
        out_origins: list[int] = []
        windows = self.windows
        if isinstance(windows, TimeWindows) and windows.advance_ms == windows.size_ms:
            self._tumbling_batch(recs, origins, windows.size_ms, out, out_origins)
        else:
            self._windows_batch(recs, origins, out, out_origins)
        if len(self._local) > LOCAL_MAX:
            self._put_local()
        if not out:
            return
        updates = bool(self.updates)
        children = self.updates or self.finals
        if len(children) == 1:
            if updates:
                children[0].process_batch(out, out_origins)
            else:
                children[0].final_batch(out, out_origins)  # type: ignore[attr-defined]
            return
        for rec, origin in zip(out, out_origins, strict=True):
            try:
                for child in children:
                    if updates:
                        child.process(rec)
                    else:
                        child.final(rec)  # type: ignore[attr-defined]
            except errors.StoreKeyTooLong as exc:
                self.ctx.record_failed(origin, exc)

    def _key_bytes(self) -> Callable[[Any], bytes]:
        """The key serde's ``serialize``, remembering str keys' bytes for one batch."""
        serialize = self.key_serde.serialize
        known: dict[str, bytes] = {}

        def key_bytes(key: Any) -> bytes:
            if type(key) is not str:
                return serialize(key)
            kb = known.get(key)
            if kb is None:
                kb = known[key] = serialize(key)
            return kb
        return key_bytes

    def _closing(self, observed: int) -> bool:
        """Whether :meth:`_close` at ``observed`` would close a window or delete expired ones."""
        ends = self.ends
        retention = self.windows.retention_ms
        return bool(ends and ends[0] + self.grace <= observed) or \
            observed - retention - self.retired_to >= max(1, retention // 4)

    def _tumbling_batch(self, recs: list[Record], origins: list[int], size: int, out: list[Record],
                        out_origins: list[int]) -> None:
        """:meth:`process_batch` for tumbling windows (one window per record)."""
        store, is_open, local, ends, closing = self.store, self.open, self._local, self.ends, self.closing
        key_kept = self.key_kept
        initializer, aggregator = self.agg.initializer, self.agg.aggregator
        grace, longest = self.grace, state.MAX_STORE_KEY
        serialize = self.key_serde.serialize
        known: dict[Any, bytes] = {}  # str key -> its bytes, for this batch
        updates = bool(self.updates)
        retention = self.windows.retention_ms
        every = max(1, retention // 4)  # (see _closing)
        prefix_start: int | None = None
        prefix = b""
        observed = self.observed
        for rec, origin in zip(recs, origins, strict=True):
            key = rec.key
            if key is None:
                self.ctx.count("skipped_null_key")
                continue
            t = rec.timestamp
            if observed is None or t > observed:
                observed = t
                self.observed = t
            if type(key) is str:
                kb = known.get(key)
                if kb is None:
                    kb = known[key] = serialize(key)
            else:
                kb = serialize(key)
            start = t - t % size
            end = start + size
            if end + grace <= observed:
                self._late(rec)
            else:
                if start != prefix_start:
                    prefix_start, prefix = start, state.window_key(end, start, b"")
                wk = prefix + kb
                current = local.get(wk, _MISSING)
                if current is _MISSING:
                    current = store.get_raw(wk) if wk in is_open else None
                if current is None:
                    current = initializer()
                new = aggregator(key, rec.value, current)
                if len(wk) > longest or type(new) not in _IMMUTABLE:
                    local.pop(wk, None)
                    try:
                        store.put_raw(wk, new)  # StoreKeyTooLong for a key too long
                    except errors.StoreKeyTooLong as exc:
                        self.ctx.record_failed(origin, exc)
                        continue
                else:
                    local[wk] = new
                if wk not in is_open:  # (as _track)
                    is_open[wk] = key if key_kept and type(key) in _KEPT_KEYS else None
                    bucket = closing.get(end)
                    if bucket is None:
                        closing[end] = [wk]
                        heapq.heappush(ends, end)
                    else:
                        bucket.append(wk)
                if updates:
                    out.append(Record(Windowed(key, start, end), new, t, rec.headers))
                    out_origins.append(origin)
            if (ends and ends[0] + grace <= observed) or observed - retention - self.retired_to >= every:
                self._close(observed, out, out_origins, origin)

    def _windows_batch(self, recs: list[Record], origins: list[int], out: list[Record],
                       out_origins: list[int]) -> None:
        """:meth:`process_batch` for any windows of :meth:`~.windows.Windows.windows_for`."""
        store, is_open, local = self.store, self.open, self._local
        initializer, aggregator = self.agg.initializer, self.agg.aggregator
        grace, windows_for, window_key = self.grace, self.windows.windows_for, state.window_key
        longest, key_bytes = state.MAX_STORE_KEY, self._key_bytes()
        updates = bool(self.updates)
        observed = self.observed
        for rec, origin in zip(recs, origins, strict=True):
            key = rec.key
            if key is None:
                self.ctx.count("skipped_null_key")
                continue
            t = rec.timestamp
            if observed is None or t > observed:
                observed = t
                self.observed = t
            kb = key_bytes(key)
            late = True
            try:
                for start, end in windows_for(t):
                    if end + grace <= observed:
                        continue
                    wk = window_key(end, start, kb)
                    current = local.get(wk, _MISSING)
                    if current is _MISSING:
                        current = store.get_raw(wk) if wk in is_open else None
                    if current is None:
                        current = initializer()
                    new = aggregator(key, rec.value, current)
                    if len(wk) > longest or type(new) not in _IMMUTABLE:
                        local.pop(wk, None)
                        store.put_raw(wk, new)  # StoreKeyTooLong for a key too long
                    else:
                        local[wk] = new
                    self._track(wk, end, start, kb, key)
                    if updates:
                        out.append(Record(Windowed(key, start, end), new, t, rec.headers))
                        out_origins.append(origin)
                    late = False
            except errors.StoreKeyTooLong as exc:
                self.ctx.record_failed(origin, exc)
                continue
            if late:
                self._late(rec)
            if self._closing(observed):
                self._close(observed, out, out_origins, origin)

    def _put_local(self) -> None:
        """Put the aggregates a batch kept in memory into the store."""
        local = self._local
        if local:
            put = self.store.put_raw
            for wk, value in local.items():
                put(wk, value)
            local.clear()

    def _late(self, rec: Record) -> None:
        if self.late_to is None:
            self.ctx.count("late_dropped")
        else:
            self.ctx.count("late_redirected")
            vb = None if rec.value is None else self.late_value_serde.serialize(rec.value)
            self.ctx.send(self.late_to, self.key_serde.serialize(rec.key), vb, rec.timestamp, rec.headers)

    def _close(self, observed: int, out: list[Record] | None = None, out_origins: list[int] | None = None,
               origin: int = 0) -> None:
        """Close the windows whose ``end + grace <= observed``: their final results to the
        :class:`SuppressNode` children, or (in a batch) onto ``out`` with ``origin``."""
        ends, closing, is_open = self.ends, self.closing, self.open
        grace = self.grace
        local = self._local
        finals = bool(self.finals)
        by_key = self.sessions or self.sliding
        while ends and ends[0] + grace <= observed:
            end = heapq.heappop(ends)
            for wk in sorted(closing.pop(end)):  # (by start, then key bytes)
                key = is_open.get(wk, _MISSING)
                if key is _MISSING:
                    continue
                _, start, kb = state.split_window_key(wk)
                if by_key:
                    self._untrack(wk, end, start, kb)
                else:
                    del is_open[wk]
                if not finals:
                    continue
                value = local.get(wk, _MISSING)
                if value is _MISSING:
                    value = self.store.get_raw(wk)
                if value is not None:
                    if key is None:
                        key = _hashable(self.key_serde.deserialize(kb))
                    final = Record(Windowed(key, start, end), value, end, None)
                    if out is not None and out_origins is not None:
                        out.append(final)
                        out_origins.append(origin)
                    else:
                        for child in self.finals:
                            child.final(final)
        cutoff = observed - self.windows.retention_ms
        if cutoff - self.retired_to >= max(1, self.windows.retention_ms // 4):
            hi = state.window_bound(cutoff + 1)
            for wk in [wk for wk in local if wk < hi]:  # (the range deletion covers them)
                del local[wk]
            for store in (self.store, self.raw):
                if store is not None:
                    store.delete_range_raw(state.window_bound(state.MIN_TIME), hi)
            if self.raw is not None:
                self.slices.retire(cutoff)
            self.retired_to = cutoff


class SuppressNode(Node):
    """The child of a windowed aggregation made by ``suppress_until_window_closes()``: it
    ignores the updates and forwards each window's final result, which its parent hands it
    (:meth:`final`) when the window closes."""

    def process(self, rec: Record) -> None:
        """Updates are not forwarded (the parent sends them only to its other children)."""

    def final(self, rec: Record) -> None:
        self.forward(rec)

    def final_batch(self, recs: list[Record], origins: list[int]) -> None:
        self.forward_batch(recs, origins)


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    return key
