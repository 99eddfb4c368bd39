"""The engine's commit log on disk: its entries, their retention, and their size.

**Pieces.** An entry (``[now_ms, [resolved records]]``, msgpack) small enough to sit in a
page is stored under its sequence number (u64 key). A larger one (a state-store write of
thousands of keys) is cut into pieces of at most :data:`PIECE` bytes under keys
``seq | piece u32``, which sort right after ``seq``: LMDB would store it as one run of
contiguous *overflow* pages, and such runs, freed by trimming while single pages are
allocated around them, fragment the free list: LMDB then cannot find a run long enough for
the next large entry and grows the file although it has free pages (issue 19, item 22:
disk kept growing at a steady workload after the log reached its bound). Pieces are
single-page allocations like every other key, and are reused at once.

The log (database ``log``, see :mod:`.keys`) is a bounded history of resolved batches. It is
trimmed to ``log_retention`` entries and ``log_retention_bytes`` bytes at every compaction
(``Core.trim_log_to_retention``), and, as a last resort, by half when the map is full at
``max_map_size`` (:meth:`~.committer.GroupCommitter` does it before refusing a write).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import lmdb

from ..protocol import ops as O
from . import keys, reads, seals
from .store import Store

#: most entries one trimming write transaction deletes
TRIM_SLICE = 10_000
#: about the most bytes of entries one trimming write transaction deletes. Pages freed in
#: one commit are listed in one free-list record; a large one takes a run of overflow pages
#: that a fragmented free list may not have, and LMDB then grows the file (see above):
#: trims and compactions free space in small steps.
TRIM_BYTES = 256 * 1024
#: largest log value stored as one key: less than LMDB's largest inline value (2,018 bytes
#: with a 12-byte key on 4 KiB pages), so that no entry takes overflow pages
PIECE = 1984
_PIECE_NO = struct.Struct(">I")


def seq_of(key: bytes | memoryview) -> int:
    """The sequence number of a log key (a whole entry's or a piece's)."""
    seq: int = keys.U64.unpack_from(key)[0]
    return seq


def put_entry(txn: lmdb.Transaction, store: Store, seq: int, payload: bytes) -> None:
    """Store the log entry ``seq``, sealed as a whole under its u64 key (:mod:`.seals`),
    then cut in pieces when it is larger than :data:`PIECE`."""
    key = keys.U64.pack(seq)
    value = seals.seal(key, payload)
    if len(value) <= PIECE:
        txn.put(key, value, db=store.log)
        return
    view = memoryview(value)
    for n, start in enumerate(range(0, len(value), PIECE)):
        txn.put(key + _PIECE_NO.pack(n), view[start : start + PIECE], db=store.log)


def iter_entries(cursor_iter: Iterable[tuple[Any, Any]], store: Store) -> Iterator[tuple[int, bytes]]:
    """``(seq, payload)`` of the entries a log cursor iteration yields, pieces joined and
    seals verified (:class:`~tstreams_embedded.errors.DataCorrupted` if damaged)."""
    for seq, raw in iter_sealed_entries(cursor_iter):
        yield seq, store.unseal("log", keys.U64.pack(seq), raw)


def iter_sealed_entries(cursor_iter: Iterable[tuple[Any, Any]]) -> Iterator[tuple[int, bytes]]:
    """``(seq, sealed value)`` of the entries a log cursor iteration yields, pieces joined
    (an iteration that starts in the middle of an entry's pieces skips that entry)."""
    seq = -1
    parts: list[bytes] = []
    for k, v in cursor_iter:
        key = bytes(k)
        if len(key) == 8:
            if parts:
                yield seq, b"".join(parts)
                parts = []
            yield keys.U64.unpack(key)[0], bytes(v)
            continue
        s, n = seq_of(key), _PIECE_NO.unpack_from(key, 8)[0]
        if s != seq or n != len(parts):
            if parts and s != seq:
                yield seq, b"".join(parts)
            parts = []
            seq = s
            if n != 0:
                continue  # a partial entry (its first pieces were trimmed)
        parts.append(bytes(v))
    if parts:
        yield seq, b"".join(parts)


class Footprint(NamedTuple):
    """The log's oldest sequence number (0 when empty), entries, and the bytes of its pages."""

    first: int
    entries: int
    bytes: int


def footprint(txn: lmdb.Transaction, store: Store) -> Footprint:
    """What the commit log holds and takes in the data file, in ``txn`` (entries are
    numbered without gaps from the oldest kept to the newest)."""
    st = txn.stat(store.log)
    cur = txn.cursor(db=store.log)
    if not cur.first():
        return Footprint(0, 0, 0)
    first = seq_of(cur.key())
    cur.last()
    pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
    return Footprint(first, seq_of(cur.key()) - first + 1, pages * st["psize"])


def trim_slice(txn: lmdb.Transaction, store: Store, upto_seq: int, limit: int = TRIM_SLICE,
               max_bytes: int = TRIM_BYTES) -> tuple[int, bool]:
    """Delete the oldest entries with ``seq <= upto_seq``, whole entries only, up to
    ``limit`` entries and about ``max_bytes`` of values; return ``(entries deleted,
    whether some with seq <= upto_seq are left)``."""
    # the sequence lives in the log's last key: keep it in meta before that key may go
    store.put(txn, "meta", reads.LOG_SEQ, keys.U64.pack(reads.log_seq(txn, store)))
    cur = txn.cursor(db=store.log)
    removed = 0
    freed = 0
    last = -1
    if not cur.first():
        return 0, False
    while cur.key():
        seq = seq_of(cur.key())
        if seq > upto_seq:
            return removed, False
        if seq != last and (removed >= limit or freed >= max_bytes):
            return removed, True
        if seq != last:
            removed += 1
            last = seq
        freed += len(cur.value()) + 16
        if not cur.delete():
            break
    return removed, False


def entries_over(size: Footprint, bound: int) -> int:
    """How many of the oldest entries to trim so that the log takes at most ``bound``
    bytes (down to about 7/8 of it, so that trims come in steps, not one per commit)."""
    if size.bytes <= bound or not size.entries:
        return 0
    per_entry = max(1, size.bytes // size.entries)
    return min(size.entries, max(1, (size.bytes - bound * 7 // 8) // per_entry))


def log_entries(txn: lmdb.Transaction, store: Store, from_seq: int, limit: int
                ) -> list[tuple[int, int, list[O.Operation]]]:
    """Commit-log entries with ``seq >= from_seq`` as ``(seq, now_ms, records)``, oldest
    first, chunks read from where they are stored (``Core.read_log``)."""
    out = []
    cur = txn.cursor(db=store.log)
    if cur.set_range(keys.U64.pack(from_seq)):
        for seq, v in iter_entries(cur.iternext(), store):
            now_ms, ops = O.unpack_batch(v)
            out.append((seq, now_ms, reads.resolve_chunks(txn, store, ops)))
            if len(out) >= limit:
                break
    return out
