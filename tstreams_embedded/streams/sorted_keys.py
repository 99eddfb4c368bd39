"""An ordered set of byte strings whose range queries cost what they return.

:class:`SortedKeys` keeps its keys in sorted chunks of at most :data:`CHUNK` keys (the
layout of ``sortedcontainers.SortedList``): ``add`` and ``discard`` cost a binary search and
a move of at most one chunk, ``irange(lo, hi)`` a binary search and then the keys it yields.
The store cache (:mod:`.store_cache`) indexes its entries with it, so that a range delete or
a scan of a store touches only the cached keys in its range.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

#: the most keys a chunk holds before it is split in two
CHUNK = 512


class SortedKeys:
    """``add``, ``discard``, ``irange(lo, hi)`` (``[lo, hi)``, None: unbounded), ``len``."""

    def __init__(self) -> None:
        self._chunks: list[list[bytes]] = []
        self._maxes: list[bytes] = []  # the last key of each chunk
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[bytes]:
        return self.irange(None, None)

    def add(self, key: bytes) -> None:
        """Add ``key`` (nothing if it is in already)."""
        maxes = self._maxes
        if not maxes:
            self._chunks.append([key])
            maxes.append(key)
            self._len = 1
            return
        i = bisect_left(maxes, key)
        if i == len(maxes):  # past the last key: append to the last chunk
            i -= 1
            self._chunks[i].append(key)
            maxes[i] = key
        else:
            chunk = self._chunks[i]
            j = bisect_left(chunk, key)
            if j < len(chunk) and chunk[j] == key:
                return
            chunk.insert(j, key)
        self._len += 1
        chunk = self._chunks[i]
        if len(chunk) > CHUNK:
            half = len(chunk) // 2
            self._chunks[i:i + 1] = [chunk[:half], chunk[half:]]
            maxes[i:i + 1] = [chunk[half - 1], chunk[-1]]

    def discard(self, key: bytes) -> None:
        """Remove ``key`` if it is in."""
        maxes = self._maxes
        i = bisect_left(maxes, key)
        if i == len(maxes):
            return
        chunk = self._chunks[i]
        j = bisect_left(chunk, key)
        if j == len(chunk) or chunk[j] != key:
            return
        del chunk[j]
        self._len -= 1
        if not chunk:
            del self._chunks[i]
            del maxes[i]
        elif j == len(chunk):
            maxes[i] = chunk[-1]

    def pop_range(self, lo: bytes | None, hi: bytes | None) -> list[bytes]:
        """Remove the keys in ``[lo, hi)`` (None: unbounded) and return them in order: whole
        chunks at a time, a binary search at each end."""
        chunks, maxes = self._chunks, self._maxes
        i = 0 if lo is None else bisect_left(maxes, lo)
        out: list[bytes] = []
        while i < len(chunks):
            chunk = chunks[i]
            j = 0 if lo is None else bisect_left(chunk, lo)
            last = hi is not None and chunk[-1] >= hi  # the range ends in this chunk
            k = bisect_left(chunk, hi, j) if hi is not None and last else len(chunk)
            out += chunk[j:k]
            del chunk[j:k]
            if chunk:
                maxes[i] = chunk[-1]
                i += 1
            else:
                del chunks[i]
                del maxes[i]
            if last:
                break
        self._len -= len(out)
        return out

    def irange(self, lo: bytes | None, hi: bytes | None) -> Iterator[bytes]:
        """The keys in ``[lo, hi)`` in order. The set must not change while it is iterated
        (take a list first to change it)."""
        chunks = self._chunks
        if lo is None:
            i, j = 0, 0
        else:
            i = bisect_left(self._maxes, lo)
            if i == len(chunks):
                return
            j = bisect_left(chunks[i], lo)
        while i < len(chunks):
            chunk = chunks[i]
            if hi is not None and chunk[-1] >= hi:
                yield from chunk[j:bisect_left(chunk, hi, j)]
                return
            yield from chunk[j:] if j else chunk
            i, j = i + 1, 0
