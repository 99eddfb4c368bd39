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
window reads no slice that is not there.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

from ..engine.storage import state_stores as state
from .stores import KeyValueStore

#: slices per window span: a window reads at most SLICES + 2 slices, a record rewrites one
SLICES = 8


class RecordSlices:
    """``keep(kb, t, key, value)`` and ``records(kb, lo, hi)`` over a task's store."""

    def __init__(self, store: KeyValueStore, size_ms: int) -> None:
        self.store = store
        self.width = max(1, -(-(size_ms + 1) // SLICES))
        #: key bytes -> the starts of its slices in the store
        self.starts: dict[bytes, set[int]] = {}
        for sk, _ in store.scan_raw(None, None):
            _, start, kb = state.split_window_key(sk)
            self.starts.setdefault(kb, set()).add(start)

    def retire(self, cutoff: int) -> None:
        """Forget the slices that end at or before ``cutoff`` (the store deletes them)."""
        width = self.width
        for kb in list(self.starts):
            starts = self.starts[kb]
            starts.difference_update([s for s in starts if s + width <= cutoff])
            if not starts:
                del self.starts[kb]

    def keep(self, kb: bytes, t: int, key: Any, value: Any) -> None:
        """Add a record of key bytes ``kb`` at ``t`` (after the key's records at ``t``)."""
        start = t - t % self.width  # floor, also for negative t
        sk = state.window_key(start + self.width, start, kb)
        starts = self.starts.setdefault(kb, set())
        records = list(self.store.get_raw(sk) or []) if start in starts else []
        starts.add(start)
        at = bisect.bisect_right(records, t, key=lambda r: r[0])
        records.insert(at, [t, key, value])
        self.store.put_raw(sk, records)

    def records(self, kb: bytes, lo: int, hi: int) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` of the records of ``kb`` with ``lo <= t <= hi``, in time order."""
        width = self.width
        starts = self.starts.get(kb)
        if not starts:
            return
        first = lo - lo % width
        for start in range(first, hi + 1, width):
            if start not in starts:
                continue
            records = self.store.get_raw(state.window_key(start + width, start, kb))
            if not records:
                continue
            for t, key, value in records:
                if lo <= t <= hi:
                    yield key, value
