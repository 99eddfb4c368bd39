"""Paged read replies: no reply built on the server loop is larger than a byte cap.

``get_transaction``, ``last_transaction``, ``transactions_range`` and ``fetch`` answer at
most ``cap`` bytes of items per reply (at least one item, so one item larger than the cap
still travels alone). A reply that stops early carries a *cursor*; the client sends the
same request again with the cursor and joins the pages (``client.py``), so the Backend
results are the same as unpaged. Items are loaded one stored chunk at a time, so a
transaction of any size is read with memory bounded by the cap plus one chunk.

Cursor: ``[stream_id, txn_id, chunk, item]``. ``chunk >= 0``: the last transaction of the
previous page is partial; continue it at that chunk and item, then go on after it.
``chunk == -1``: continue after ``txn_id``. ``stream_id`` is the stream's numeric ID: if
the stream was deleted (and maybe re-created) meanwhile, the read fails ``StreamNotFound``.

Each page reads its own snapshot, as the engine's own ``transactions_range`` does for
every 4,096 transactions. A partial transaction that disappears between pages (expired
past the stream's TTL, or compacted) is reported ``dropped``: the client discards its
partial items, as if the transaction had expired just before the read.

The chunk and index reads use the storage layout (:mod:`.keys`, :mod:`.reads`);
visibility (checkpointed, not past TTL, the stop at an open transaction and the
invalidation of expired ones) is decided by ``scan_index``. :class:`~.core.Core` serves
these pages through its ``page_*`` methods; the network server answers its read requests
with them, so no reply built on its loop exceeds the cap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ... import errors
from ..protocol.backend import IndexScan
from ..protocol.ops import TxnState
from ..protocol.validate import check_int, check_partition
from . import keys, reads
from .catalog import lookup_stream
from .store import Store, as_bytes

Cursor = list[int]


ScanPage = tuple["Page", int, bool]
"""``(page, position, blocked)`` of :func:`scan`."""


class PagedSource(Protocol):
    """What the page readers need: the store, the clock and the index scan (a Core)."""

    store: Store
    clock: Callable[[], int]

    def scan_index(self, stream: str, partition: int, after: int, upto: int = ...,
                   max_txns: int = ...) -> IndexScan: ...

MAX_ID = 2**63 - 1
_CHECKPOINTED = int(TxnState.CHECKPOINTED)


class Page:
    """Transactions (wire form ``[stream, partition, id, items, stream_id]``) read into one reply."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.size = 0
        self.txns: list[list[Any]] = []
        self.cursor: Cursor | None = None
        self.dropped = False
        #: the incarnation of the stream read (StreamInfo.id)
        self.stream_id: int | None = None

    @property
    def full(self) -> bool:
        return self.size >= self.cap


def _check_cursor(cursor: Any) -> Cursor | None:
    if cursor is None:
        return None
    if (type(cursor) is not list or len(cursor) != 4
            or not all(type(v) is int for v in cursor) or cursor[2] < -1 or cursor[3] < 0):
        raise errors.InvalidArgument(f"bad page cursor {cursor!r:.100}")
    return cursor


def _stream_id(core: PagedSource, stream: str, partition: int) -> int:
    with core.store.read() as txn:
        info = lookup_stream(txn, core.store, stream)
        check_partition(info, partition)
        return int(info.id)


def _check_same_stream(core: PagedSource, stream: str, partition: int, sid: int) -> None:
    if _stream_id(core, stream, partition) != sid:
        raise errors.StreamNotFound(f"stream {stream!r} was deleted while it was being read")


def _load(core: PagedSource, stream: str, partition: int, sid: int, tid: int, chunk: int, item: int,
          page: Page) -> bool:
    """Append the items of checkpointed transaction ``tid`` from ``(chunk, item)`` to the
    page (a new entry when ``chunk == item == 0``, else the last entry continues it) until
    the page is full. Return False if the transaction is not there (any more)."""
    store = core.store
    with store.read() as txn:
        info = lookup_stream(txn, store, stream)
        if info.id != sid:
            raise errors.StreamNotFound(f"stream {stream!r} was deleted while it was being read")
        raw = store.get(txn, "txns", keys.txn_key(sid, partition, tid))
        if raw is None:
            return False
        state, _, chunks, _ = keys.STATE.unpack_from(raw)
        if state != _CHECKPOINTED:
            return False
        if chunk == 0 and item == 0:
            page.txns.append([stream, partition, tid, [], sid])
        items: list[bytes] = page.txns[-1][3]
        for c in range(chunk, chunks):
            got = reads.chunk_items(txn, store, info, partition, tid, c)
            start = item if c == chunk else 0
            for i in range(start, len(got)):
                if page.full:
                    page.cursor = [sid, tid, c, i]
                    return True
                items.append(got[i])
                page.size += len(got[i]) + 16
    return True


def one(core: PagedSource, stream: str, partition: int, txn_id: int, cursor: Any, cap: int) -> list[Any]:
    """``get_transaction`` paged: ``[txn or None, cursor or None]``."""
    check_int(txn_id, "transaction id", 0, MAX_ID)
    cur = _check_cursor(cursor)
    page = Page(cap)
    if cur is None:
        if txn_id == 0:
            return [None, None]
        sid = _stream_id(core, stream, partition)
        if not _visible(core, stream, partition, txn_id):
            return [None, None]
        chunk, item = 0, 0
    else:
        sid, tid, chunk, item = cur
        if tid != txn_id or chunk < 0:
            raise errors.InvalidArgument("page cursor does not belong to this transaction")
        _check_same_stream(core, stream, partition, sid)
        page.txns.append([stream, partition, txn_id, [], sid])
    if not _load(core, stream, partition, sid, txn_id, chunk, item, page):
        return [None, None]
    return [page.txns[0], page.cursor]


def _visible(core: PagedSource, stream: str, partition: int, txn_id: int) -> bool:
    """Whether ``txn_id`` is a visible checkpointed transaction (index only)."""
    s = core.scan_index(stream, partition, txn_id - 1, txn_id, 1)
    return bool(s.entries) and s.entries[0][0] == txn_id


def last(core: PagedSource, stream: str, partition: int, cursor: Any, cap: int) -> list[Any]:
    """``last_transaction`` paged: ``[txn or None, cursor or None]``."""
    cur = _check_cursor(cursor)
    if cur is not None:
        return one(core, stream, partition, cur[1], cur, cap)
    store = core.store
    with store.read() as txn:  # reads.last_checkpointed without loading the items
        info = lookup_stream(txn, store, stream)
        check_partition(info, partition)
        prefix = keys.part_key(info.id, partition)
        floor = reads.ttl_floor(info, core.clock())
        c = txn.cursor(db=store.txns)
        found = None
        if store.seek(c, "txns", keys.part_key(info.id, partition + 1)):
            ok = c.prev()
        else:
            ok = c.last()
        while ok:
            k = as_bytes(c.key())
            state = keys.STATE.unpack_from(store.unseal("txns", k, as_bytes(c.value())))[0]  # also the last one
            if k[: keys.PART_LEN] != prefix:
                break
            tid = keys.txn_id_of(k)
            if tid < floor:
                break
            if state == _CHECKPOINTED:
                found = tid
                break
            ok = c.prev()
    if found is None:
        return [None, None]
    page = Page(cap)
    if not _load(core, stream, partition, int(info.id), found, 0, 0, page):
        return [None, None]
    return [page.txns[0], page.cursor]


def scan(core: PagedSource, stream: str, partition: int, after: int, upto: int, max_txns: int, cursor: Any,
         cap: int) -> ScanPage:
    """Transactions ``after < id <= upto`` (at most ``max_txns`` whole ones), stopping at an
    open one, into one page: ``(page, position, blocked)``. ``page.cursor`` is set when
    more may follow (the page is full, or ``max_txns`` index entries were read)."""
    check_int(after, "after", 0, MAX_ID)
    check_int(upto, "upto", 0, MAX_ID)
    cur = _check_cursor(cursor)
    page = Page(cap)
    if cur is None:
        sid = _stream_id(core, stream, partition)
        page.stream_id = sid
    else:
        sid, tid, chunk, item = cur
        _check_same_stream(core, stream, partition, sid)
        page.stream_id = sid
        if chunk >= 0:
            page.txns.append([stream, partition, tid, [], sid])
            if not _load(core, stream, partition, sid, tid, chunk, item, page):
                page.txns.pop()
                page.dropped = True
            if page.cursor is not None:
                return page, tid, False
        after = max(after, tid)
    position = after
    if after >= upto or max_txns <= 0:
        return page, position, False
    s = core.scan_index(stream, partition, after, upto, max(1, min(max_txns, 1024)))
    for tid, _ in s.entries:
        if page.full:
            page.cursor = [sid, position, -1, 0]
            return page, position, False
        if _load(core, stream, partition, sid, tid, 0, 0, page):
            if page.cursor is not None:
                return page, position, False
        position = tid
    if s.truncated and len(s.entries) < max_txns:
        page.cursor = [sid, s.position, -1, 0]
    return page, s.position, s.blocked
