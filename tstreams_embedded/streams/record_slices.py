"""The records of a sliding-window aggregation, indexed by key (:class:`RecordSlices`).

A sliding window ``[t - size, t]`` is made from every record of its key in that span. The
records are kept in the aggregation's second store (``<store>.record-slices``), in *slices*:
one entry per key and time slice of ``width`` ms (about an eighth of the window), whose key is
the engine's window key ``(slice end, slice start, key bytes)`` and whose value is the list
``[t, key, value]`` of the key's records in the slice, in time order (arrival order within one
millisecond). A window's records are then a few point reads of its own key (at most 9 or 10
slices), whatever the number of other keys, and a new record rewrites only its slice.

The slices live in the task's store, so they are committed with the task's ONE engine write
(exactly-once across restarts), and the time-first layout lets the aggregation's retention
delete whole expired slices by one range deletion (a slice is deleted once its end is at or
before the cutoff, so never before its last record). In memory there is only which
slices exist (the starts per key), rebuilt from the store when the task starts, so that a
window reads no slice that is not there; and, as lists, the slices a record was added to
lately whose new records' keys and values are immutable (ints, strings, ...), so that a
record neither decodes its window's slices nor encodes its own again and again: the changed
ones go into the store once per commit (:meth:`RecordSlices.flush`), and a slice no window
can read any more (it ends before stream time minus size and grace) is forgotten then; at
most :data:`LOCAL_MAX` are kept.
"""

from __future__ import annotations

import bisect
from typing import Any

from ..engine.storage import state_stores as state
from .stores import KeyValueStore

#: slices per window span: a window reads at most SLICES + 2 slices, a record rewrites one
SLICES = 8
#: the most slices kept in memory
LOCAL_MAX = 16384
#: the key and value types a slice kept in memory may hold (a later change of such an object
#: cannot change what was kept)
_IMMUTABLE = frozenset({int, float, str, bytes, bool, type(None)})


class RecordSlices:
    """``keep(kb, t, key, value)`` and ``records(kb, lo, hi)`` over a task's store."""

    def __init__(self, store: KeyValueStore, size_ms: int) -> None:
        self.store = store
        self.width = max(1, -(-(size_ms + 1) // SLICES))
        #: key bytes -> the starts of its slices in the store
        self.starts: dict[bytes, set[int]] = {}
        #: (key bytes, slice start) -> its records, kept in memory (see the module docstring);
        #: and those changed since the last commit
        self.local: dict[tuple[bytes, int], list[list[Any]]] = {}
        self.changed: set[tuple[bytes, int]] = set()
        for sk, _ in store.scan_raw(None, None):
            _, start, kb = state.split_window_key(sk)
            self.starts.setdefault(kb, set()).add(start)

    def _key(self, kb: bytes, start: int) -> bytes:
        """The store key of ``kb``'s slice that starts at ``start``."""
        return state.window_key(start + self.width, start, kb)

    def flush(self, unread_before: int | None) -> None:
        """Put the slices changed in memory into the store (before a commit), and forget
        those that end at or before ``unread_before`` (no window reads them any more)."""
        put, local, width = self.store.put_raw, self.local, self.width
        for kb, start in self.changed:
            put(self._key(kb, start), local[(kb, start)])
        self.changed.clear()
        if unread_before is not None:
            for slice_ in [s for s in local if s[1] + width <= unread_before]:
                del local[slice_]
        if len(local) >= LOCAL_MAX:
            local.clear()

    def retire(self, cutoff: int) -> None:
        """Forget the slices that end at or before ``cutoff`` (the store deletes them)."""
        width = self.width
        for slice_ in [s for s in self.local if s[1] + width <= cutoff]:
            del self.local[slice_]
            self.changed.discard(slice_)
        for kb in list(self.starts):
            starts = self.starts[kb]
            starts.difference_update([s for s in starts if s + width <= cutoff])
            if not starts:
                del self.starts[kb]

    def keep(self, kb: bytes, t: int, key: Any, value: Any) -> None:
        """Add a record of key bytes ``kb`` at ``t`` (after the key's records at ``t``)."""
        start = t - t % self.width  # floor, also for negative t
        slice_ = (kb, start)
        starts = self.starts.setdefault(kb, set())
        local = self.local
        records = local.get(slice_)
        if records is None:
            records = list(self.store.get_raw(self._key(kb, start)) or []) if start in starts else []
            starts.add(start)
        if records and records[-1][0] <= t:
            records.append([t, key, value])
        else:
            records.insert(bisect.bisect_right(records, t, key=lambda r: r[0]), [t, key, value])
        if type(key) in _IMMUTABLE and type(value) in _IMMUTABLE and (slice_ in local or len(local) < LOCAL_MAX):
            local[slice_] = records
            self.changed.add(slice_)
        else:
            local.pop(slice_, None)
            self.changed.discard(slice_)
            self.store.put_raw(self._key(kb, start), records)

    def records(self, kb: bytes, lo: int, hi: int) -> list[tuple[Any, Any]]:
        """``(key, value)`` of the records of ``kb`` with ``lo <= t <= hi``, in time order."""
        width = self.width
        starts = self.starts.get(kb)
        out: list[tuple[Any, Any]] = []
        if not starts:
            return out
        local = self.local
        for start in range(lo - lo % width, hi + 1, width):
            if start not in starts:
                continue
            records = local.get((kb, start))
            if records is None:
                records = self.store.get_raw(self._key(kb, start))
                if not records:
                    continue
            for t, key, value in records:
                if lo <= t <= hi:
                    out.append((key, value))
        return out
