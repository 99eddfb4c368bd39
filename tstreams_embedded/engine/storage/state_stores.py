"""State stores of stream applications: the ``state`` database.

A *store* is a namespace of the ``state`` database, named by a string (the streams layer
uses ``application/task/store``). Its entries are keyed ``store name (UTF-8) · 0x00 · key``,
so a store is one contiguous key range, and its keys sort by bytes.

Windowed stores (:mod:`tstreams_embedded.streams`) encode their keys with
:func:`window_key`: window end, window start (both i64 offset to sort numerically), then the
user key. Ordering by end lets the streams layer close windows and drop expired ones with
range operations, and :func:`windows` serves the windowed fetch.

Only :mod:`.apply` writes here (the ``StoreWrite`` record); :mod:`.core` reads.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import lmdb
import msgpack
from crc32c import crc32c

from ... import errors
from ..protocol.backend import StoreScan
from ..protocol.validate import check_int, check_name, utf8
from .seals import RESIDUE, SEAL_LEN, damaged
from .store import Store, as_bytes, entries

#: LMDB keys are at most 511 bytes: store name (at most 255) + NUL + key (at most 255).
MAX_STORE_KEY = 255
#: the most entries one range read returns
MAX_RANGE = 1 << 20
#: a range read stops once its keys and values reach this many bytes (after at least one
#: entry), embedded and remote alike, so that no server reply grows without bound; callers
#: page by continuing after the last key until a read returns nothing
MAX_READ_BYTES = 16 << 20
#: the most ranges one :func:`read_scans` (``Backend.store_snapshot``) reads
MAX_SCANS = 4096
_WINDOW = struct.Struct(">QQ")
_OFFSET = 1 << 63
MIN_TIME = -(1 << 63)
MAX_TIME = (1 << 63) - 1


def check_store(name: Any) -> str:
    return check_name(name, "store name")


def check_key(key: Any, what: str = "store key") -> bytes:
    if not isinstance(key, bytes):
        raise errors.InvalidArgument(f"{what} must be bytes, got {type(key).__name__}")
    if len(key) > MAX_STORE_KEY:
        raise errors.InvalidArgument(f"{what} must be at most {MAX_STORE_KEY} bytes, got {len(key)}")
    return key


def check_value(value: Any, max_size: int) -> bytes:
    if not isinstance(value, bytes):
        raise errors.InvalidArgument(f"store value must be bytes, got {type(value).__name__}")
    if len(value) > max_size:
        raise errors.ItemTooLarge(f"store value of {len(value)} bytes exceeds max_item_size={max_size}")
    return value


def check_limit(limit: Any) -> int:
    return check_int(limit, "limit", 1, MAX_RANGE)


def prefix(store: str) -> bytes:
    """The first bytes of every key of ``store``."""
    return utf8(check_store(store), "store name") + b"\x00"


def window_key(end: int, start: int, key: bytes) -> bytes:
    """A windowed store's key: window end, window start (epoch ms), user key."""
    return _WINDOW.pack(end + _OFFSET, start + _OFFSET) + key


def split_window_key(stored: bytes) -> tuple[int, int, bytes]:
    """``(end, start, key)`` of a :func:`window_key`."""
    end, start = _WINDOW.unpack_from(stored)
    return end - _OFFSET, start - _OFFSET, stored[_WINDOW.size:]


def window_bound(end: int) -> bytes:
    """The smallest windowed key with window end ``end``."""
    return _WINDOW.pack(end + _OFFSET, 0)


class LeaseRecord(NamedTuple):
    """A lease as stored: the value of its key in a state store, written by the
    :class:`~..protocol.ops.Lease` operation (msgpack ``[owner, epoch, deadline_ms]``)."""

    owner: str  # "" once released
    epoch: int  # moved on by every take; a holder is fenced by it
    deadline: int  # epoch ms of the engine's clock until which it is held (0 once released)

    def held_by(self, owner: str, epoch: int) -> bool:
        """Whether ``owner`` holds it at ``epoch`` (whatever its deadline)."""
        return (self.owner, self.epoch) == (owner, epoch)

    def live_at(self, now_ms: int) -> bool:
        """Whether someone holds it at ``now_ms`` (not released, deadline not passed)."""
        return bool(self.owner) and self.deadline > now_ms

    def pack(self) -> bytes:
        packed: bytes = msgpack.packb(list(self), use_bin_type=True)
        return packed

    @classmethod
    def unpack(cls, value: bytes | memoryview | None) -> LeaseRecord | None:
        """The stored lease ``value``, or None; DataCorrupted if it is not a lease."""
        if value is None:
            return None
        try:
            owner, epoch, deadline = msgpack.unpackb(value, raw=False)
        except (ValueError, TypeError, msgpack.ExtraData) as exc:
            raise errors.DataCorrupted(f"a stored lease is not [owner, epoch, deadline]: {exc}") from None
        if not isinstance(owner, str) or type(epoch) is not int or type(deadline) is not int:
            raise errors.DataCorrupted(f"a stored lease is not [owner, epoch, deadline]: {value!r:.60}")
        return cls(owner, epoch, deadline)


def pack_lease(owner: str, epoch: int, deadline: int) -> bytes:
    """The stored value of a lease (:class:`LeaseRecord`)."""
    return LeaseRecord(owner, epoch, deadline).pack()


def unpack_lease(value: bytes | memoryview | None) -> LeaseRecord | None:
    """The :class:`LeaseRecord` of a stored lease value, or None; DataCorrupted if the
    value is not a lease."""
    return LeaseRecord.unpack(value)


def check_time(value: Any, what: str) -> int:
    return check_int(value, what, MIN_TIME, MAX_TIME)


def get(txn: lmdb.Transaction, store: Store, name: str, key: bytes) -> bytes | None:
    if store.state is None:
        return None
    return store.get(txn, "state", prefix(name) + check_key(key))


def scan(txn: lmdb.Transaction, store: Store, name: str, start: bytes | None, end: bytes | None,
         limit: int) -> list[tuple[bytes, bytes]]:
    """Entries of ``name`` with ``start <= key < end`` (None: unbounded), in key order."""
    pfx = prefix(name)
    if store.state is None:
        return []
    lo = pfx + (check_key(start, "start") if start is not None else b"")
    hi = pfx + check_key(end, "end") if end is not None else None
    out: list[tuple[bytes, bytes]] = []
    cur = txn.cursor(db=store.state)
    if not store.seek(cur, "state", lo):
        return out
    n = len(pfx)
    size = 0
    sealed = store.sealed
    for k, v in entries(cur.iternext()):
        # verified, also the entry that ends the scan (not one moved there by damage): seals.unseal, inlined
        if sealed:
            if crc32c(v, crc32c(k)) != RESIDUE:
                raise damaged("state", k, v)
            v = v[:-SEAL_LEN]
        if k[:n] != pfx or (hi is not None and k >= hi) or len(out) >= limit or size >= MAX_READ_BYTES:
            break
        out.append((k[n:], v))
        size += len(k) + len(v)
    return out


def prefix_end(p: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``p`` (None: no such key)."""
    stripped = p.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def windows(txn: lmdb.Transaction, store: Store, name: str, key: bytes | None, end_from: int, end_to: int,
            limit: int) -> list[tuple[bytes, bytes]]:
    """Windowed entries of ``name`` with window end in ``[end_from, end_to]`` (and user key
    ``key`` unless None), in (end, start, key) order."""
    check_time(end_from, "end_from")
    check_time(end_to, "end_to")
    if key is not None:
        check_key(key)
    pfx = prefix(name)
    out: list[tuple[bytes, bytes]] = []
    if store.state is None or end_to < end_from:
        return out
    hi = pfx + window_bound(end_to + 1) if end_to < MAX_TIME else None
    cur = txn.cursor(db=store.state)
    unseal = store.unseal
    if not store.seek(cur, "state", pfx + window_bound(end_from)):
        return out
    n = len(pfx)
    head = n + _WINDOW.size
    size = 0
    for k, v in entries(cur.iternext()):
        value = unseal("state", k, v)  # also the entry that ends the scan
        if k[:n] != pfx or (hi is not None and k >= hi) or len(out) >= limit or size >= MAX_READ_BYTES:
            break
        if key is None or k[head:] == key:
            out.append((k[n:], value))
            size += len(k) + len(value)
    return out


def check_scans(scans: Any, max_bytes: Any) -> int:
    """Validate the arguments of ``Backend.store_snapshot``; the byte bound to apply."""
    if not isinstance(scans, (list, tuple)):
        raise errors.InvalidArgument(f"scans must be a list of StoreScan, got {type(scans).__name__}")
    if len(scans) > MAX_SCANS:
        raise errors.InvalidArgument(f"at most {MAX_SCANS} scans per snapshot read, got {len(scans)}")
    for s in scans:
        if not isinstance(s, StoreScan):
            raise errors.InvalidArgument(f"scans must be StoreScan records, got {type(s).__name__}")
        check_store(s.store)
        if s.start is not None:
            check_key(s.start, "start")
        if s.end is not None:
            if not isinstance(s.end, bytes) or len(s.end) > MAX_STORE_KEY + 1:
                raise errors.InvalidArgument(f"end must be bytes of at most {MAX_STORE_KEY + 1}, got {s.end!r:.60}")
        if s.limit is not None:
            check_limit(s.limit)
        if s.window_key is not None:
            check_key(s.window_key, "window_key")
        if s.window_start_from is not None:
            check_time(s.window_start_from, "window_start_from")
        if s.window_start_to is not None:
            check_time(s.window_start_to, "window_start_to")
    return MAX_READ_BYTES if max_bytes is None else check_int(max_bytes, "max_bytes", 1, MAX_READ_BYTES)


def read_scans(txn: lmdb.Transaction, store: Store, scans: Sequence[StoreScan],
               max_bytes: int) -> list[list[tuple[bytes, bytes]]]:
    """Every scan's entries, read in the snapshot ``txn`` (arguments checked by
    :func:`check_scans`); :class:`~..errors.QueryTooLarge` once their keys and values exceed
    ``max_bytes`` in total."""
    out: list[list[tuple[bytes, bytes]]] = []
    size = 0
    cur = None if store.state is None else txn.cursor(db=store.state)
    unseal = store.unseal
    for s in scans:
        got: list[tuple[bytes, bytes]] = []
        out.append(got)
        pfx = prefix(s.store)
        if cur is None or not store.seek(cur, "state", pfx + (s.start or b"")):
            continue
        hi = None if s.end is None else pfx + s.end
        n = len(pfx)
        head = n + _WINDOW.size
        windowed = s.window_key is not None or s.window_start_from is not None or s.window_start_to is not None
        found = _key_windows(cur, pfx, s) if s.window_key is not None else entries(cur.iternext())
        limit = s.limit
        for k, v in found:
            v = unseal("state", k, v)  # also the entry that ends the scan
            if k[:n] != pfx or (hi is not None and k >= hi) or (limit is not None and len(got) >= limit):
                break
            if windowed:
                if len(k) < head or (s.window_key is not None and k[head:] != s.window_key):
                    continue
                start = _WINDOW.unpack_from(k, n)[1] - _OFFSET
                if (s.window_start_from is not None and start < s.window_start_from) or \
                        (s.window_start_to is not None and start > s.window_start_to):
                    continue
            size += len(k) - n + len(v)
            if size > max_bytes:
                raise errors.QueryTooLarge(
                    f"the query's answer exceeds {max_bytes} bytes, the most one consistent read returns: "
                    f"narrow it (a smaller key range, prefix or time range, or a limit)")
            got.append((k[n:], v))
    return out


def _key_windows(cur: lmdb.Cursor, pfx: bytes, s: StoreScan) -> Iterator[tuple[bytes, bytes]]:
    """From the cursor's position on, the windows of user key ``s.window_key`` (and, at the
    end, one entry past them or past ``pfx``, for the caller's bounds check), found by
    seeking: one seek per window slot ``(end, start)`` instead of a read of every key of
    every window. Slots whose start is outside ``[window_start_from, window_start_to]`` are
    jumped over. Cost: about two seeks per distinct window in the range, however many keys
    each holds."""
    kb = s.window_key
    assert kb is not None
    stop = None if s.end is None else pfx + s.end
    n = len(pfx)
    head = n + _WINDOW.size
    lo = s.window_start_from
    hi = s.window_start_to
    while True:
        k = as_bytes(cur.key())
        if k[:n] != pfx or (stop is not None and k >= stop):
            yield k, as_bytes(cur.value())  # past the scan: the caller stops
            return
        if len(k) < head:  # not a window key: skipped
            if not cur.next():
                return
            continue
        end, start = _WINDOW.unpack_from(k, n)
        end -= _OFFSET
        start -= _OFFSET
        target: bytes | None
        if lo is not None and start < lo:
            target = pfx + window_key(end, lo, kb)  # this end's slots from the first start wanted
        elif hi is not None and start > hi:
            target = None if end == MAX_TIME else pfx + window_bound(end + 1)  # the next end
        elif k[head:] == kb:
            yield k, as_bytes(cur.value())
            target = prefix_end(k[:head])  # the next slot
        elif k[head:] < kb:
            target = k[:head] + kb  # this slot's entry of the key, if any
        else:
            target = prefix_end(k[:head])  # the key is not in this slot
        if target is None or not cur.set_range(target):
            return
