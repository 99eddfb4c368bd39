"""State stores of a task, and read-only views of an application's stores.

A task's store lives in the engine (the ``state`` database, namespace
``application/partition/store``). Inside a task, :class:`KeyValueStore` keeps the values it
read or wrote in memory (deserialized) and remembers what changed since the last commit;
:meth:`KeyValueStore.changes` turns that into ONE :class:`~..engine.ops.StoreWrite` record
that goes into the task's commit batch. Nothing reaches the engine record by record.

:class:`ReadOnlyKeyValueStore` and :class:`ReadOnlyWindowStore` read committed state of
every task through the Backend (``app.store(name)``, ``TestDriver.store(name)``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import errors
from ..engine import ops as O
from ..engine import state
from ..engine.backend import Backend
from .serdes import Serde
from .windows import Windowed


def time_key(t: int) -> bytes:
    """``t`` (epoch ms, may be negative) as 8 bytes that sort in time order: the prefix of
    the keys of the time indexes that joins and dedup keep in a store."""
    return (t + (1 << 63)).to_bytes(8, "big")


def time_of(key: bytes) -> int:
    """The time a :func:`time_key`-prefixed key starts with."""
    return int.from_bytes(key[:8], "big") - (1 << 63)


_ABSENT = object()
MAX_CACHED = 200_000
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
    """A task's key-value store: ``get``, ``put``, ``delete``, ``range``, ``all``."""

    def __init__(self, backend: Backend, namespace: str, name: str, key_serde: Serde, value_serde: Serde) -> None:
        self.backend = backend
        self.namespace = namespace
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._cache: dict[bytes, Any] = {}  # key bytes -> value, or _ABSENT for a known missing/deleted key
        self._dirty: set[bytes] = set()
        self._ranges: list[list[bytes | None]] = []

    # -- raw (key bytes) interface used by the processors ----------------------------------
    def get_raw(self, kb: bytes) -> Any:
        v = self._cache.get(kb, None)
        if v is None:
            if len(kb) > state.MAX_STORE_KEY:
                return None  # cannot be stored, so it is not there (a put raises StoreKeyTooLong)
            data = self.backend.store_get(self.namespace, kb)
            v = _ABSENT if data is None else self.value_serde.deserialize(data)
            self._cache[kb] = v
        return None if v is _ABSENT else v

    def put_raw(self, kb: bytes, value: Any) -> None:
        if len(kb) > state.MAX_STORE_KEY:
            raise errors.StoreKeyTooLong(f"store {self.name!r}: a key is at most {state.MAX_STORE_KEY} bytes "
                                         f"serialized (16 fewer in a windowed store), got {len(kb)} "
                                         "(App(on_record_error='skip') skips such records)")
        self._cache[kb] = _ABSENT if value is None else value
        self._dirty.add(kb)

    def delete_range_raw(self, lo: bytes, hi: bytes | None) -> None:
        """Delete every key in ``[lo, hi)`` (committed with the next commit)."""
        self._ranges.append([lo, hi])
        for kb in [k for k in self._cache if k >= lo and (hi is None or k < hi)]:
            self._cache[kb] = _ABSENT
            self._dirty.discard(kb)

    def scan_raw(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, Any]]:
        """Entries in ``[lo, hi)`` in key order, this commit's changes included."""
        stored: dict[bytes, Any] = {}
        for k, v in pages(self.backend, self.namespace, lo, hi):
            if not self._deleted_by_range(k):
                stored[k] = v
        merged: dict[bytes, Any] = {k: _RAW(v) for k, v in stored.items()}
        for k, v in self._cache.items():
            if (lo is None or k >= lo) and (hi is None or k < hi) and (k in self._dirty or k in merged):
                merged[k] = v
        for k in sorted(merged):
            v = merged[k]
            if v is _ABSENT:
                continue
            yield k, (self.value_serde.deserialize(v.data) if isinstance(v, _RAW) else v)

    def _deleted_by_range(self, k: bytes) -> bool:
        return any(k >= lo and (hi is None or k < hi) for lo, hi in self._ranges)  # type: ignore[operator]

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
        if not self._dirty and not self._ranges:
            return None
        puts: list[list[bytes]] = []
        deletes: list[bytes] = []
        ser = self.value_serde.serialize
        for kb in self._dirty:
            v = self._cache[kb]
            if v is _ABSENT:
                deletes.append(kb)
            else:
                puts.append([kb, ser(v)])
        return O.StoreWrite(self.namespace, puts, deletes or None, self._ranges or None)

    def committed(self) -> None:
        self._dirty.clear()
        self._ranges = []
        if len(self._cache) > MAX_CACHED:
            self._cache.clear()


class _RAW:
    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class ReadOnlyKeyValueStore:
    """Committed state of a key-value store across the tasks of an application."""

    def __init__(self, backend: Backend, namespaces: list[str], key_serde: Serde, value_serde: Serde) -> None:
        self.backend = backend
        self.namespaces = namespaces
        self.key_serde = key_serde
        self.value_serde = value_serde

    def get(self, key: Any) -> Any:
        kb = self.key_serde.serialize(key)
        for ns in self.namespaces:
            data = self.backend.store_get(ns, kb)
            if data is not None:
                return self.value_serde.deserialize(data)
        return None

    def all(self) -> dict[Any, Any]:
        """Every entry, as a dict."""
        out: dict[Any, Any] = {}
        for ns in self.namespaces:
            for k, v in pages(self.backend, ns, None, None):
                out[_hashable(self.key_serde.deserialize(k))] = self.value_serde.deserialize(v)
        return out

    def range(self, start: Any = None, end: Any = None) -> list[tuple[Any, Any]]:
        lo = None if start is None else self.key_serde.serialize(start)
        hi = None if end is None else self.key_serde.serialize(end)
        out: list[tuple[bytes, bytes]] = []
        for ns in self.namespaces:
            out.extend(pages(self.backend, ns, lo, hi))
        return [(self.key_serde.deserialize(k), self.value_serde.deserialize(v)) for k, v in sorted(out)]

    def prefix(self, prefix: Any) -> list[tuple[Any, Any]]:
        """Entries whose serialized key starts with ``prefix`` serialized (for ``str`` and
        ``bytes`` keys: keys starting with it), in key order."""
        lo = self.key_serde.serialize(prefix)
        hi = state.prefix_end(lo) if lo else None
        out: list[tuple[bytes, bytes]] = []
        for ns in self.namespaces:
            out.extend(pages(self.backend, ns, lo, hi))
        return [(self.key_serde.deserialize(k), self.value_serde.deserialize(v)) for k, v in sorted(out)]


class ReadOnlyWindowStore:
    """Committed state of a windowed store across the tasks of an application."""

    def __init__(self, backend: Backend, namespaces: list[str], key_serde: Serde, value_serde: Serde) -> None:
        self.backend = backend
        self.namespaces = namespaces
        self.key_serde = key_serde
        self.value_serde = value_serde

    def fetch(self, key: Any, time_from: int = state.MIN_TIME,
              time_to: int = state.MAX_TIME) -> list[tuple[Windowed, Any]]:
        """Windows of ``key`` whose start is in ``[time_from, time_to]``, by end then start."""
        kb = self.key_serde.serialize(key)
        return [(w, v) for w, v in self._scan(kb, time_from) if w.start <= time_to]

    def fetch_all(self, time_from: int = state.MIN_TIME,
                  time_to: int = state.MAX_TIME) -> list[tuple[Windowed, Any]]:
        """Every window whose start is in ``[time_from, time_to]``."""
        return [(w, v) for w, v in self._scan(None, time_from) if w.start <= time_to]

    def all(self) -> dict[Windowed, Any]:
        return {w: v for w, v in self._scan(None, state.MIN_TIME)}

    def get(self, key: Any, start: int, end: int) -> Any:
        """The value of the window ``[start, end)`` of ``key``, or None."""
        kb = state.window_key(end, start, self.key_serde.serialize(key))
        for ns in self.namespaces:
            data = self.backend.store_get(ns, kb)
            if data is not None:
                return self.value_serde.deserialize(data)
        return None

    def _scan(self, kb: bytes | None, time_from: int) -> list[tuple[Windowed, Any]]:
        out = []
        for ns in self.namespaces:
            for k, v in pages(self.backend, ns, state.window_bound(time_from), None):
                end, start, key = state.split_window_key(k)
                if start >= time_from and (kb is None or key == kb):
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
