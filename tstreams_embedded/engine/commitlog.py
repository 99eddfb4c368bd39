"""Retention of the engine's commit log: trimming its oldest entries, and its size.

The log (database ``log``, see :mod:`.keys`) is a bounded history of resolved batches. It is
trimmed to ``log_retention`` entries and ``log_retention_bytes`` bytes at every compaction
(``Core.trim_log_to_retention``), and, as a last resort, by half when the map is full at
``max_map_size`` (:meth:`~.committer.GroupCommitter` does it before refusing a write).
"""

from __future__ import annotations

from typing import NamedTuple

import lmdb

from . import keys, reads
from .store import Store

#: most entries one trimming write transaction deletes
TRIM_SLICE = 10_000


class Footprint(NamedTuple):
    """The log's oldest sequence number (0 when empty), entries, and the bytes of its pages."""

    first: int
    entries: int
    bytes: int


def footprint(txn: lmdb.Transaction, store: Store) -> Footprint:
    """What the commit log holds and takes in the data file, in ``txn``."""
    st = txn.stat(store.log)
    cur = txn.cursor(db=store.log)
    first = keys.U64.unpack(cur.key())[0] if cur.first() else 0
    pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
    return Footprint(first, st["entries"], pages * st["psize"])


def trim_slice(txn: lmdb.Transaction, store: Store, upto_seq: int, limit: int = TRIM_SLICE) -> int:
    """Delete up to ``limit`` of the oldest entries with ``seq <= upto_seq``; how many."""
    # the sequence lives in the log's last key: keep it in meta before that key may go
    txn.put(reads.LOG_SEQ, keys.U64.pack(reads.log_seq(txn, store)), db=store.meta)
    cur = txn.cursor(db=store.log)
    removed = 0
    if cur.first():
        while removed < limit and cur.key() and keys.U64.unpack(cur.key())[0] <= upto_seq:
            if not cur.delete():
                break
            removed += 1
    return removed


def entries_over(size: Footprint, bound: int) -> int:
    """How many of the oldest entries to trim so that the log takes at most ``bound``
    bytes (down to about 7/8 of it, so that trims come in steps, not one per commit)."""
    if size.bytes <= bound or not size.entries:
        return 0
    per_entry = max(1, size.bytes // size.entries)
    return min(size.entries, max(1, (size.bytes - bound * 7 // 8) // per_entry))
