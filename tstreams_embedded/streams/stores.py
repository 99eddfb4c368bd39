"""State stores of a task, and read-only views of an application's stores.

A task's store lives in the engine (the ``state`` database, namespace
``application/partition/store``). Inside a task, :class:`KeyValueStore` keeps the values it
read or wrote in memory (deserialized) and remembers what changed since the last commit;
:meth:`KeyValueStore.changes` turns that into ONE :class:`~..engine.ops.StoreWrite` record
that goes into the task's commit batch. Nothing reaches the engine record by record.

:class:`ReadOnlyKeyValueStore` and :class:`ReadOnlyWindowStore` read committed state of
every task through the Backend (``app.store(name)``, ``TestDriver.store(name)``), each query
in one snapshot of the engine (``Backend.store_snapshot``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import Any

from .. import errors
from ..engine.protocol import ops as O
from ..engine.protocol.backend import Backend, StoreScan
from ..engine.storage import state_stores as state
from .serdes import BytesSerde, Serde, StrSerde
from .store_cache import MISSING, StoreCache
from .windows import Windowed


def time_key(t: int) -> bytes:
    """``t`` (epoch ms, may be negative) as 8 bytes that sort in time order: the prefix of
    the keys of the time indexes that joins and dedup keep in a store."""
    return (t + (1 << 63)).to_bytes(8, "big")


def time_of(key: bytes) -> int:
    """The time a :func:`time_key`-prefixed key starts with."""
    return int.from_bytes(key[:8], "big") - (1 << 63)


#: the default bound of a task's store cache (``App(store_cache_bytes=…)``), per store of each
#: task: what its entries take in memory (:func:`~.store_cache.entry_cost`)
DEFAULT_CACHE_BYTES = 32 << 20
PAGE = 4096


def namespace(application_id: str, partition: int, store: str) -> str:
    return f"{application_id}/{partition}/{store}"


def pages(backend: Backend, store: str, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """Every entry of ``store`` in ``[lo, hi)``, read page by page."""
    start = lo
    skip: bytes | None = None
    while True:
        page = backend.store_range(store, start, hi, PAGE)
        fresh = [kv for kv in page if kv[0] != skip]
        if not fresh:
            if not page or skip is None or len(skip) >= state.MAX_STORE_KEY:
                return
            start = skip + b"\x00"  # the page held only the last key again (a value near the byte cap)
            continue
        yield from fresh
        skip = start = page[-1][0]  # the next page starts at the last key (read again, skipped)


class KeyValueStore:
    """A task's key-value store: ``get``, ``put``, ``delete``, ``range``, ``all``.

    Its cache (:class:`~.store_cache.StoreCache`) keeps keys and values as stored
    (serialized) and is bounded by what they take in memory: at most ``max_bytes``, each
    entry counted for its key and value bytes plus a measured per-entry overhead. A put
    serializes its value at once (what is committed, and what a later get in the same commit
    returns, is the value as it was put, as in Kafka Streams). Past the bound, entries not
    changed since the last commit are dropped, the least recently used generation first;
    changed ones stay until the commit, and while they alone pass the bound :meth:`full` is
    true (the task then commits at the end of its transaction). A commit's deletes are
    forgotten once committed. Range deletes and scans cost the cached keys in their range
    (the keys are kept in order)."""

    def __init__(self, backend: Backend, namespace: str, name: str, key_serde: Serde, value_serde: Serde,
                 max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.backend = backend
        self.namespace = namespace
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.cache = StoreCache(max_bytes)
        self._ranges: list[tuple[bytes, bytes | None]] = []  # range deletes since the last commit
        #: whether the engine is served (a read is a round trip): :meth:`prefetch_raw` reads ahead
        self.remote = False

    @property
    def max_bytes(self) -> int:
        return self.cache.max_bytes

    @property
    def cached_bytes(self) -> int:
        """What the cache's entries take (:func:`~.store_cache.entry_cost`)."""
        return self.cache.cached_bytes

    def full(self) -> bool:
        """Whether this commit's changes alone fill the cache (commit soon)."""
        return self.cache.full()

    # -- raw (key bytes) interface used by the processors ----------------------------------
    def get_raw(self, kb: bytes) -> Any:
        data = self.cache.lookup(kb)
        if data is MISSING:  # (a key a pending range deletion covers is gone, whatever is stored)
            if len(kb) > state.MAX_STORE_KEY:
                return None  # cannot be stored, so it is not there (a put raises StoreKeyTooLong)
            data = None if self._ranges and self._deleted_by_range(kb) else self.backend.store_get(self.namespace, kb)
            self.cache.remember(kb, data)
        return None if data is None else self.value_serde.deserialize(data)

    def prefetch_raw(self, kbs: list[bytes]) -> None:
        """Read the keys of ``kbs`` that are not cached into the cache, in one engine read
        per :data:`~.state.MAX_SCANS` keys (one round trip to a served engine instead of one
        per key; see :attr:`remote`). Nothing for an embedded engine, whose point reads cost
        less than the scans."""
        if not self.remote:
            return
        lookup, ranges = self.cache.lookup, self._ranges
        missing = [kb for kb in dict.fromkeys(kbs) if len(kb) <= state.MAX_STORE_KEY and lookup(kb) is MISSING
                   and not (ranges and self._deleted_by_range(kb))]
        for first in range(0, len(missing), state.MAX_SCANS):
            chunk = missing[first:first + state.MAX_SCANS]
            try:
                found = self.backend.store_snapshot([StoreScan(self.namespace, kb, kb + b"\0", 1) for kb in chunk])
            except errors.QueryTooLarge:
                return  # (the values are large: read one at a time, as without prefetching)
            for kb, entries in zip(chunk, found, strict=True):
                self.cache.remember(kb, entries[0][1] if entries else None)

    def put_raw(self, kb: bytes, value: Any) -> None:
        if len(kb) > state.MAX_STORE_KEY:
            raise errors.StoreKeyTooLong(f"store {self.name!r}: a key is at most {state.MAX_STORE_KEY} bytes "
                                         f"serialized (16 fewer in a windowed store), got {len(kb)} "
                                         "(App(on_record_error='skip') skips such records)")
        self.cache.write(kb, None if value is None else self.value_serde.serialize(value))

    def delete_range_raw(self, lo: bytes, hi: bytes | None) -> None:
        """Delete every key in ``[lo, hi)`` (committed with the next commit)."""
        self._ranges.append((lo, hi))
        self.cache.drop_range(lo, hi)

    def scan_raw(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, Any]]:
        """Entries in ``[lo, hi)`` in key order, this commit's changes included (as they
        were when the scan began)."""
        changes = self.cache.dirty_in(lo, hi)
        ranges = list(self._ranges)
        stored = ((k, v) for k, v in pages(self.backend, self.namespace, lo, hi)
                  if not (ranges and _covered(k, ranges)))
        deserialize = self.value_serde.deserialize
        for k, v in _overlay(stored, changes):
            yield k, deserialize(v)

    def _deleted_by_range(self, k: bytes) -> bool:
        return _covered(k, self._ranges)

    # -- the user interface -------------------------------------------------------------
    def get(self, key: Any) -> Any:
        """The value of ``key``, or None."""
        return self.get_raw(self.key_serde.serialize(key))

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` (None deletes it)."""
        self.put_raw(self.key_serde.serialize(key), value)

    def delete(self, key: Any) -> None:
        self.put_raw(self.key_serde.serialize(key), None)

    def range(self, start: Any = None, end: Any = None) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` with ``start <= key bytes < end`` (serialized keys, byte order)."""
        lo = None if start is None else self.key_serde.serialize(start)
        hi = None if end is None else self.key_serde.serialize(end)
        for k, v in self.scan_raw(lo, hi):
            yield self.key_serde.deserialize(k), v

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self.range()

    # -- commit ---------------------------------------------------------------------
    def changes(self) -> O.StoreWrite | None:
        """This commit's changes as one record (None if nothing changed)."""
        if not self.cache.has_changes() and not self._ranges:
            return None
        puts, deletes = self.cache.changes()
        ranges = [[lo, hi] for lo, hi in self._ranges]
        return O.StoreWrite(self.namespace, puts, deletes or None, ranges or None)

    def committed(self) -> None:
        self.cache.committed()
        self._ranges = []


def _covered(k: bytes, ranges: list[tuple[bytes, bytes | None]]) -> bool:
    return any(k >= lo and (hi is None or k < hi) for lo, hi in ranges)


def _overlay(stored: Iterator[tuple[bytes, bytes]],
             changes: list[tuple[bytes, bytes | None]]) -> Iterator[tuple[bytes, bytes]]:
    """``stored`` (sorted) with ``changes`` (sorted; None: deleted) laid over it, in key order."""
    i, n = 0, len(changes)
    for k, v in stored:
        while i < n and changes[i][0] < k:
            ck, cv = changes[i]
            i += 1
            if cv is not None:
                yield ck, cv
        if i < n and changes[i][0] == k:
            cv = changes[i][1]
            i += 1
            if cv is not None:
                yield k, cv
            continue
        yield k, v
    for ck, cv in changes[i:]:
        if cv is not None:
            yield ck, cv


def _read(backend: Backend, scans: list[StoreScan], max_bytes: int | None) -> list[list[tuple[bytes, bytes]]]:
    """``scans`` read in one snapshot (nothing to read: no call)."""
    return backend.store_snapshot(scans, max_bytes) if scans else []


class ReadOnlyKeyValueStore:
    """Committed state of a key-value store across the tasks of an application.

    Every query reads ONE snapshot of the engine (:meth:`Backend.store_snapshot`), whatever
    the number of tasks and entries it covers: a commit is in its answer wholly or not at
    all. An answer is at most ``max_bytes`` of keys and values (16 MiB by default and at
    most); a larger one raises :class:`~tstreams_embedded.errors.QueryTooLarge`. Keys are
    ordered by their serialized bytes (``range`` bounds too): with the ``str`` and ``bytes``
    serdes that is the keys' own order; with ``msgpack`` or ``json`` it is not (msgpack puts
    a string's length first). ``replicated`` is true for a global table's store (every
    instance holds all of it)."""

    def __init__(self, backend: Backend, namespaces: list[str], key_serde: Serde, value_serde: Serde,
                 replicated: bool = False, max_bytes: int | None = None) -> None:
        self.backend = backend
        self.namespaces = namespaces
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.replicated = replicated
        self.max_bytes = max_bytes

    def get(self, key: Any) -> Any:
        """The value of ``key``, or None."""
        kb = self.key_serde.serialize(key)
        if len(kb) > state.MAX_STORE_KEY:
            return None  # no stored key is longer
        found = _exact(self.backend, self.namespaces, kb, self.max_bytes)
        return None if found is None else self.value_serde.deserialize(found)

    def entries(self, lo: bytes | None, hi: bytes | None, limit: int | None = None) -> list[tuple[bytes, bytes]]:
        """The serialized entries with ``lo <= key < hi`` (None: unbounded) of every task, in
        key order, at most ``limit`` of them: one snapshot."""
        if limit is not None:
            state.check_limit(limit)
        below: bytes | None = None  # a stored key is at most MAX_STORE_KEY bytes long: the keys
        scan_limit = limit  # >= a longer lo are those > its head, and not the head itself
        if lo is not None and len(lo) > state.MAX_STORE_KEY:
            lo = below = lo[:state.MAX_STORE_KEY]
            scan_limit = None if limit is None else min(limit + 1, state.MAX_RANGE)
        if hi is not None and len(hi) > state.MAX_STORE_KEY + 1:
            hi = hi[:state.MAX_STORE_KEY + 1]  # the same keys are below it
        got = _read(self.backend, [StoreScan(ns, lo, hi, scan_limit) for ns in self.namespaces], self.max_bytes)
        return list(itertools.islice((kv for kv in heapq.merge(*got) if kv[0] != below), limit))

    def all(self) -> dict[Any, Any]:
        """Every entry, as a dict."""
        return {_hashable(self.key_serde.deserialize(k)): self.value_serde.deserialize(v)
                for k, v in self.entries(None, None)}

    def range(self, start: Any = None, end: Any = None) -> list[tuple[Any, Any]]:
        """Entries with ``start <= key < end`` (None: unbounded), compared as serialized
        bytes, in that order (see the class docstring)."""
        lo = None if start is None else self.key_serde.serialize(start)
        hi = None if end is None else self.key_serde.serialize(end)
        return self._decoded(self.entries(lo, hi))

    def prefix_bounds(self, prefix: Any) -> tuple[bytes, bytes | None]:
        """``[lo, hi)``, the serialized keys starting with ``prefix``; InvalidArgument unless
        the key serde keeps prefixes (``str``, ``bytes``)."""
        if not isinstance(self.key_serde, PREFIX_SERDES):
            name = getattr(self.key_serde, "name", type(self.key_serde).__name__)
            raise errors.InvalidArgument(
                f"prefix queries need a store whose key serde keeps prefixes (str or bytes); this store's keys "
                f"are {name}, whose serialized keys do not start with their prefixes' serialized bytes: use range")
        if not isinstance(prefix, (str, bytes)):
            raise errors.InvalidArgument(f"a prefix must be a str or bytes, got {type(prefix).__name__}")
        lo = self.key_serde.serialize(prefix)
        return lo, state.prefix_end(lo) if lo else None

    def prefix(self, prefix: Any) -> list[tuple[Any, Any]]:
        """Entries whose key starts with ``prefix``, in key order (keys of the ``str`` or
        ``bytes`` serde; InvalidArgument for other key serdes)."""
        lo, hi = self.prefix_bounds(prefix)
        return self._decoded(self.entries(lo, hi))

    def _decoded(self, raw: list[tuple[bytes, bytes]]) -> list[tuple[Any, Any]]:
        return [(self.key_serde.deserialize(k), self.value_serde.deserialize(v)) for k, v in raw]


#: key serdes whose serialized keys start with their prefixes' serialized bytes
PREFIX_SERDES = (StrSerde, BytesSerde)


def _exact(backend: Backend, namespaces: list[str], kb: bytes, max_bytes: int | None) -> bytes | None:
    """The value of stored key ``kb`` in the first of ``namespaces`` that has it, read in one
    snapshot."""
    if len(namespaces) == 1:
        return backend.store_get(namespaces[0], kb)
    for got in _read(backend, [StoreScan(ns, kb, kb + b"\x00") for ns in namespaces], max_bytes):
        if got:
            return got[0][1]
    return None


class ReadOnlyWindowStore:
    """Committed state of a windowed store across the tasks of an application; each query
    reads one snapshot, at most ``max_bytes`` (as :class:`ReadOnlyKeyValueStore`)."""

    def __init__(self, backend: Backend, namespaces: list[str], key_serde: Serde, value_serde: Serde,
                 replicated: bool = False, max_bytes: int | None = None) -> None:
        self.backend = backend
        self.namespaces = namespaces
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.replicated = replicated
        self.max_bytes = max_bytes

    def fetch(self, key: Any, time_from: int = state.MIN_TIME,
              time_to: int = state.MAX_TIME) -> list[tuple[Windowed, Any]]:
        """Windows of ``key`` whose start is in ``[time_from, time_to]`` (epoch ms), by end then start."""
        kb = self.key_serde.serialize(key)
        if len(kb) > state.MAX_STORE_KEY:
            return []
        return self._scan(kb, time_from, time_to)

    def fetch_all(self, time_from: int = state.MIN_TIME,
                  time_to: int = state.MAX_TIME) -> list[tuple[Windowed, Any]]:
        """Every window whose start is in ``[time_from, time_to]`` (epoch ms)."""
        return self._scan(None, time_from, time_to)

    def all(self) -> dict[Windowed, Any]:
        return {w: v for w, v in self._scan(None, state.MIN_TIME, state.MAX_TIME)}

    def get(self, key: Any, start: int | None = None, end: int | None = None) -> Any:
        """The value of the window ``[start, end)`` (epoch ms) of ``key``, or None."""
        if start is None or end is None:
            raise errors.InvalidArgument("a windowed store's get takes key, start and end (epoch ms) of one window; "
                                         "fetch(key, time_from, time_to) gives every window of a key")
        state.check_time(start, "start")
        state.check_time(end, "end")
        kb = self.key_serde.serialize(key)
        if len(kb) > state.MAX_STORE_KEY:
            return None
        found = _exact(self.backend, self.namespaces, state.window_key(end, start, kb), self.max_bytes)
        return None if found is None else self.value_serde.deserialize(found)

    def _scan(self, kb: bytes | None, time_from: int, time_to: int) -> list[tuple[Windowed, Any]]:
        state.check_time(time_from, "time_from")
        state.check_time(time_to, "time_to")
        scans = [StoreScan(ns, state.window_bound(time_from), None, None, kb, time_from, time_to)
                 for ns in self.namespaces]
        out = []
        for got in _read(self.backend, scans, self.max_bytes):
            for k, v in got:
                end, start, key = state.split_window_key(k)
                out.append((Windowed(_hashable(self.key_serde.deserialize(key)), start, end),
                            self.value_serde.deserialize(v)))
        out.sort(key=lambda wv: (wv[0].end, wv[0].start))
        return out


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in key.items()))
    return key
