"""The cache of a task's key-value store, bounded by the memory its entries really take.

:class:`StoreCache` holds entries as stored: key bytes -> value bytes, or None for a key
known to be absent. Each entry is *clean* (as committed: read from the engine, or written by
an earlier commit) or *dirty* (changed since the last commit: a put, or None for a delete).

* **Bound.** An entry costs :data:`ENTRY_OVERHEAD` bytes plus its key and value lengths:
  what it takes in this process (measured), not just its serialized size. Keeping the bytes
  (and not deserialized values) is what makes the cost known: a value's Python objects can
  take tens of times its bytes. Clean entries are kept in two generations (plain dicts): new
  ones and those used again go into the young one; once it holds half the bound it becomes
  the old one, and the old one is dropped whole. That is LRU at the grain of half the cache,
  without the per-entry links of an LRU list nor the deleted slots its dict would keep
  (which cost more than the entries under churn). Dirty entries stay until the commit, and
  while they alone pass the bound :meth:`full` is true (the task commits).
* **Commit.** :meth:`changes` gives the puts and deletes of the commit; :meth:`committed`
  turns the puts into clean entries and forgets the deletes, clean copies included (no
  tombstone outlives its commit: the engine has the truth, and a later read finds the key
  absent there). A removal leaves a deleted slot in its generation's dict, which goes with
  the generation.
* **Ranges.** The keys are also kept in order (:class:`~.sorted_keys.SortedKeys`), so
  :meth:`drop_range` and :meth:`dirty_in` cost the cached keys in their range, not the
  whole cache.
"""

from __future__ import annotations

import enum

from .sorted_keys import SortedKeys

#: what a cached entry takes beyond the bytes of its key and value: the two ``bytes``
#: objects' headers, its slot in a generation's dict (with the slack dicts keep) and in the
#: key index. Measured on CPython 3.11 with ``tracemalloc``: 104-133 bytes an entry from 1k to
#: 180k entries; the anonymous RSS of a process whose 4-64 MiB cache churns through 300k
#: small entries peaks at 0.25-0.45 of the bound with a constant of 224, so within it with
#: this one. The tests: ``tests/streams/test_store_cache.py`` (heap) and
#: ``test_store_cache_rss.py`` (an app process's RSS).
ENTRY_OVERHEAD = 144


class Missing(enum.Enum):
    """The answer of :meth:`StoreCache.lookup` for a key that is not cached."""

    MISSING = 0


MISSING = Missing.MISSING


def entry_cost(key: bytes, value: bytes | None) -> int:
    """The bytes a cached entry is counted for."""
    return ENTRY_OVERHEAD + len(key) + (0 if value is None else len(value))


class StoreCache:
    """Clean entries in two generations (evicted a generation at a time) and dirty ones (kept
    until the commit), at most ``max_bytes`` of :func:`entry_cost` in all unless the dirty ones
    alone pass it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._young: dict[bytes, bytes | None] = {}  # clean, read or committed lately
        self._old: dict[bytes, bytes | None] = {}  # clean, the generation before (a hit moves it up)
        self._dirty: dict[bytes, bytes | None] = {}
        self._keys = SortedKeys()  # every key of the three
        self.young_bytes = 0
        self.old_bytes = 0
        self.dirty_bytes = 0

    @property
    def cached_bytes(self) -> int:
        """The cost of every entry (:func:`entry_cost`)."""
        return self.young_bytes + self.old_bytes + self.dirty_bytes

    def __len__(self) -> int:
        return len(self._keys)

    def full(self) -> bool:
        """Whether the changes since the last commit alone pass the bound."""
        return self.dirty_bytes > self.max_bytes

    def lookup(self, key: bytes) -> bytes | None | Missing:
        """The cached value bytes of ``key``, None if it is known absent, MISSING if not cached."""
        value = self._dirty.get(key, MISSING)
        if value is MISSING:
            value = self._young.get(key, MISSING)
            if value is MISSING:
                value = self._old.pop(key, MISSING)
                if value is not MISSING:  # used again: into the young generation
                    cost = entry_cost(key, value)
                    self.old_bytes -= cost
                    self._young[key] = value
                    self.young_bytes += cost
                    self._evict()
        return value

    def remember(self, key: bytes, value: bytes | None) -> None:
        """Cache what the engine holds for ``key``, not cached yet (a clean entry; not if the
        changes fill the cache)."""
        cost = entry_cost(key, value)
        if self.dirty_bytes + cost > self.max_bytes:
            return
        self._young[key] = value
        self._keys.add(key)
        self.young_bytes += cost
        self._evict()

    def write(self, key: bytes, value: bytes | None) -> None:
        """A change of ``key`` (None: delete), committed with the next commit."""
        old = self._dirty.get(key, MISSING)
        if old is not MISSING:
            self.dirty_bytes -= entry_cost(key, old)
        elif key not in self._young and key not in self._old:
            self._keys.add(key)
        self._dirty[key] = value  # (a clean copy stays, hidden, until the commit)
        self.dirty_bytes += entry_cost(key, value)
        self._evict()

    def drop_range(self, lo: bytes, hi: bytes | None) -> None:
        """Forget every entry in ``[lo, hi)``, clean or dirty (a range delete covers them)."""
        dirty, young, old = self._dirty, self._young, self._old
        for key in self._keys.pop_range(lo, hi):
            value = dirty.pop(key, MISSING)
            if value is not MISSING:
                self.dirty_bytes -= entry_cost(key, value)
            value = young.pop(key, MISSING)
            if value is not MISSING:
                self.young_bytes -= entry_cost(key, value)
            value = old.pop(key, MISSING)
            if value is not MISSING:
                self.old_bytes -= entry_cost(key, value)

    def dirty_in(self, lo: bytes | None, hi: bytes | None) -> list[tuple[bytes, bytes | None]]:
        """The changes in ``[lo, hi)``, in key order."""
        dirty = self._dirty
        if not dirty:
            return []
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
        """The changes are committed: puts become clean entries (young), deletes are forgotten
        (with any clean copy of their keys)."""
        dirty, self._dirty = self._dirty, {}
        self.dirty_bytes = 0
        young, old = self._young, self._old
        for key, value in dirty.items():
            stale = young.pop(key, MISSING)
            if stale is not MISSING:
                self.young_bytes -= entry_cost(key, stale)
            stale = old.pop(key, MISSING)
            if stale is not MISSING:
                self.old_bytes -= entry_cost(key, stale)
            if value is None:
                self._keys.discard(key)
            else:
                young[key] = value
                self.young_bytes += entry_cost(key, value)
        self._evict()

    def _evict(self) -> None:
        """A young generation past half the bound becomes the old one (the old one goes);
        past the bound in all, the old generation goes, then the young one."""
        if self.young_bytes > self.max_bytes // 2:
            self._drop_old()
            self._old, self._young = self._young, {}
            self.old_bytes, self.young_bytes = self.young_bytes, 0
        while self.cached_bytes > self.max_bytes and (self._old or self._young):
            if self._old:
                self._drop_old()
            else:
                self._old, self._young = self._young, {}
                self.old_bytes, self.young_bytes = self.young_bytes, 0

    def _drop_old(self) -> None:
        young, dirty, keys = self._young, self._dirty, self._keys
        for key in self._old:
            if key not in young and key not in dirty:
                keys.discard(key)
        self._old = {}
        self.old_bytes = 0
