"""The cache of a task's key-value store, bounded by the memory its entries really take.

:class:`StoreCache` holds entries as stored: key bytes -> value bytes, or None for a key
known to be absent. Each entry is *clean* (as committed: read from the engine, or written by
an earlier commit) or *dirty* (changed since the last commit: a put, or None for a delete).

* **Bound.** An entry costs :data:`ENTRY_OVERHEAD` bytes plus its key and value lengths:
  what it takes in this process (measured, ``tests/streams/test_store_cache.py``), not just
  its serialized size. Past ``max_bytes``, clean entries are dropped, least recently used
  first; dirty ones stay until the commit, and while they alone pass the bound
  :meth:`full` is true (the task commits). Keeping the bytes (and not deserialized values)
  is what makes the cost known: a value's Python objects can take tens of times its bytes.
* **Commit.** :meth:`changes` gives the puts and deletes of the commit; :meth:`committed`
  turns the puts into clean entries and forgets the deletes (no tombstone outlives its
  commit: the engine has the truth, and a later read finds the key absent there).
* **Ranges.** The keys are also kept in order (:class:`~.sorted_keys.SortedKeys`), so
  :meth:`drop_range` and :meth:`dirty_in` cost the cached keys in their range, not the
  whole cache.
"""

from __future__ import annotations

import enum
from collections import OrderedDict

from .sorted_keys import SortedKeys

#: what a cached entry takes beyond the bytes of its key and value: the two ``bytes``
#: objects' headers, its slot in a dict (with the slack dicts keep), the LRU order's link and
#: its slot in the key index. Measured with tracemalloc on CPython 3.11-3.13 (about 190 bytes
#: at worst; see ``test_entry_overhead_covers_what_an_entry_takes``).
ENTRY_OVERHEAD = 224


class Missing(enum.Enum):
    """The answer of :meth:`StoreCache.lookup` for a key that is not cached."""

    MISSING = 0


MISSING = Missing.MISSING


def entry_cost(key: bytes, value: bytes | None) -> int:
    """The bytes a cached entry is counted for."""
    return ENTRY_OVERHEAD + len(key) + (0 if value is None else len(value))


class StoreCache:
    """Clean entries (LRU, evictable) and dirty ones (kept until the commit), at most
    ``max_bytes`` of :func:`entry_cost` in all unless the dirty ones alone pass it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._clean: OrderedDict[bytes, bytes | None] = OrderedDict()
        self._dirty: dict[bytes, bytes | None] = {}
        self._keys = SortedKeys()
        self.clean_bytes = 0
        self.dirty_bytes = 0

    @property
    def cached_bytes(self) -> int:
        """The cost of every entry (:func:`entry_cost`)."""
        return self.clean_bytes + self.dirty_bytes

    def __len__(self) -> int:
        return len(self._clean) + len(self._dirty)

    def full(self) -> bool:
        """Whether the changes since the last commit alone pass the bound."""
        return self.dirty_bytes > self.max_bytes

    def lookup(self, key: bytes) -> bytes | None | Missing:
        """The cached value bytes of ``key``, None if it is known absent, MISSING if not cached."""
        dirty = self._dirty.get(key, MISSING)
        if dirty is not MISSING:
            return dirty
        clean = self._clean.get(key, MISSING)
        if clean is not MISSING:
            self._clean.move_to_end(key)
        return clean

    def remember(self, key: bytes, value: bytes | None) -> None:
        """Cache what the engine holds for ``key`` (a clean entry; not if the changes fill the cache)."""
        cost = entry_cost(key, value)
        if self.dirty_bytes + cost > self.max_bytes or key in self._dirty or key in self._clean:
            return
        self._clean[key] = value
        self._keys.add(key)
        self.clean_bytes += cost
        self._evict()

    def write(self, key: bytes, value: bytes | None) -> None:
        """A change of ``key`` (None: delete), committed with the next commit."""
        old = self._clean.pop(key, MISSING)
        if old is not MISSING:
            self.clean_bytes -= entry_cost(key, old)
        else:
            old = self._dirty.get(key, MISSING)
            if old is not MISSING:
                self.dirty_bytes -= entry_cost(key, old)
            else:
                self._keys.add(key)
        self._dirty[key] = value
        self.dirty_bytes += entry_cost(key, value)
        self._evict()

    def drop_range(self, lo: bytes, hi: bytes | None) -> None:
        """Forget every entry in ``[lo, hi)``, clean or dirty (a range delete covers them)."""
        for key in list(self._keys.irange(lo, hi)):
            self._forget(key)

    def dirty_in(self, lo: bytes | None, hi: bytes | None) -> list[tuple[bytes, bytes | None]]:
        """The changes in ``[lo, hi)``, in key order."""
        dirty = self._dirty
        return [(k, dirty[k]) for k in self._keys.irange(lo, hi) if k in dirty]

    def changes(self) -> tuple[list[list[bytes]], list[bytes]]:
        """The puts (``[key, value]``) and deletes since the last commit."""
        puts: list[list[bytes]] = []
        deletes: list[bytes] = []
        for key, value in self._dirty.items():
            if value is None:
                deletes.append(key)
            else:
                puts.append([key, value])
        return puts, deletes

    def has_changes(self) -> bool:
        return bool(self._dirty)

    def committed(self) -> None:
        """The changes are committed: puts become clean entries, deletes are forgotten."""
        dirty, self._dirty = self._dirty, {}
        self.dirty_bytes = 0
        clean = self._clean
        for key, value in dirty.items():
            if value is None:
                self._keys.discard(key)
            else:
                clean[key] = value
                self.clean_bytes += entry_cost(key, value)
        self._evict()

    def _forget(self, key: bytes) -> None:
        old = self._clean.pop(key, MISSING)
        if old is not MISSING:
            self.clean_bytes -= entry_cost(key, old)
        else:
            old = self._dirty.pop(key, MISSING)
            if old is MISSING:
                return
            self.dirty_bytes -= entry_cost(key, old)
        self._keys.discard(key)

    def _evict(self) -> None:
        clean = self._clean
        while clean and self.clean_bytes + self.dirty_bytes > self.max_bytes:
            key, value = clean.popitem(last=False)
            self.clean_bytes -= entry_cost(key, value)
            self._keys.discard(key)
