"""A task's windowed store as processors see it (:class:`WindowStore`).

It is a view over the task's :class:`~.stores.KeyValueStore` of that name, whose keys are the
engine's window keys (:func:`~..engine.state.window_key`: window end, window start, key
bytes): its changes are buffered with the rest of the task's and committed in the task's ONE
engine write, and ``app.store(name)`` reads it back as a
:class:`~.stores.ReadOnlyWindowStore`. Stores declared with
``StreamsBuilder.add_window_store(name, size_ms=…, retention_ms=…)`` have windows of one
size and expire: a window is deleted once ``end + retention_ms <= stream time`` (the task's;
deleted with the next commit, invisible at once). The stores of the DSL's windowed
aggregations have windows of any size (give ``window_end``) and are expired by their
aggregation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import errors
from ..engine.storage import state_stores as state
from .stores import KeyValueStore
from .windows import Windowed

#: the bytes a window key adds to the user's key (window end and start)
WINDOW_KEY_BYTES = 16


class WindowStore:
    """``put(key, value, window_start)``, ``get(key, window_start)``,
    ``fetch(key, time_from, time_to)``, ``fetch_all(time_from, time_to)`` (epoch ms)."""

    def __init__(self, store: KeyValueStore, size_ms: int | None, retention_ms: int | None,
                 stream_time: Callable[[], int | None]) -> None:
        self.store = store
        self.name = store.name
        self.size_ms = size_ms
        self.retention_ms = retention_ms
        self._stream_time = stream_time
        self._expired_to: int | None = None  # windows ending at or before it were deleted

    def _window(self, start: Any, end: Any) -> tuple[int, int]:
        state.check_time(start, "window_start")
        if end is None:
            if self.size_ms is None:
                raise errors.InvalidArgument(f"store {self.name!r} has windows of no fixed size: give window_end")
            end = start + self.size_ms
        state.check_time(end, "window_end")
        if end <= start:
            raise errors.InvalidArgument(f"a window ends after it starts, got [{start}, {end})")
        return start, end

    def _cutoff(self) -> int | None:
        """Windows ending at or before this are expired (None: none is)."""
        now = self._stream_time()
        if self.retention_ms is None or now is None:
            return None
        return now - self.retention_ms

    def _key(self, key: Any) -> bytes:
        kb = self.store.key_serde.serialize(key)
        if len(kb) > state.MAX_STORE_KEY - WINDOW_KEY_BYTES:
            raise errors.InvalidArgument(f"store {self.name!r}: a windowed store's key is at most "
                                         f"{state.MAX_STORE_KEY - WINDOW_KEY_BYTES} bytes serialized, "
                                         f"got {len(kb)}")
        return kb

    def put(self, key: Any, value: Any, window_start: int, window_end: int | None = None) -> None:
        """Set the value of ``key``'s window starting at ``window_start`` (ending at
        ``window_start + size_ms`` unless ``window_end`` is given); None deletes it. A window
        already expired is not stored (as in Kafka Streams)."""
        start, end = self._window(window_start, window_end)
        kb = self._key(key)
        cutoff = self._cutoff()
        if cutoff is not None and end <= cutoff:
            return
        self.store.put_raw(state.window_key(end, start, kb), value)

    def get(self, key: Any, window_start: int, window_end: int | None = None) -> Any:
        """The value of ``key``'s window starting at ``window_start`` (see :meth:`put`), or
        None. Without a fixed size and ``window_end``: the first window of ``key`` that
        starts then."""
        if window_end is None and self.size_ms is None:
            state.check_time(window_start, "window_start")
            found = self.fetch(key, window_start, window_start)
            return found[0][1] if found else None
        start, end = self._window(window_start, window_end)
        cutoff = self._cutoff()
        if cutoff is not None and end <= cutoff:
            return None
        return self.store.get_raw(state.window_key(end, start, self._key(key)))

    def fetch(self, key: Any, time_from: int = state.MIN_TIME,
              time_to: int = state.MAX_TIME) -> list[tuple[Windowed, Any]]:
        """``key``'s windows whose start is in ``[time_from, time_to]``, by end then start,
        this commit's changes included."""
        return self._scan(self._key(key), key, time_from, time_to)

    def fetch_all(self, time_from: int = state.MIN_TIME,
                  time_to: int = state.MAX_TIME) -> list[tuple[Windowed, Any]]:
        """Every window whose start is in ``[time_from, time_to]``, by end then start."""
        return self._scan(None, None, time_from, time_to)

    def _scan(self, kb: bytes | None, key: Any, time_from: Any, time_to: Any) -> list[tuple[Windowed, Any]]:
        state.check_time(time_from, "time_from")
        state.check_time(time_to, "time_to")
        cutoff = self._cutoff()
        first_end = time_from if cutoff is None else max(time_from, cutoff + 1)
        lo = state.window_bound(first_end)
        last_end = None if self.size_ms is None else time_to + self.size_ms + 1
        hi = None if last_end is None or last_end > state.MAX_TIME else state.window_bound(last_end)
        out: list[tuple[Windowed, Any]] = []
        deserialize = self.store.key_serde.deserialize
        for wk, value in self.store.scan_raw(lo, hi):
            end, start, k = state.split_window_key(wk)
            if (kb is None or k == kb) and time_from <= start <= time_to:
                out.append((Windowed(key if kb is not None else deserialize(k), start, end), value))
        return out

    def expire(self) -> None:
        """Delete the expired windows (with the next commit; called when the task commits)."""
        cutoff = self._cutoff()
        if cutoff is not None and (self._expired_to is None or cutoff > self._expired_to):
            self.store.delete_range_raw(b"", state.window_bound(cutoff + 1))
            self._expired_to = cutoff
