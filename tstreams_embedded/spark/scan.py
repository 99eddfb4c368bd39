"""Turning offset specs into transaction IDs, and scanning partitions for planning.

All of this runs on the driver (in Spark's driver-side Python process). It uses only the
:class:`~tstreams_embedded.engine.backend.Backend` protocol, so it works the same against an
embedded directory and a remote ``tstreams serve``.

A *scan* walks a partition from an offset in ID order exactly like a consumer: it returns
checkpointed transactions, passes cancelled/invalid ones, and stops at the first open one.
An end offset produced by a scan is therefore always a transaction boundary that no
consumer would have to go back behind.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument, PartitionOutOfRange
from ..ids import txn_id_at

SCAN_BATCH = 512


@dataclass
class PartitionScan:
    """What a scan of one partition found: ``(txn_id, item_count)`` pairs in ID order, the
    position passed (the offset to store after processing all of them), and whether the
    scan stopped at an open transaction."""

    txns: list[tuple[int, int]]
    position: int
    blocked: bool
    truncated: bool = False  # stopped because of ``max_rows``: more may follow


def select_partitions(info: Any, wanted: tuple[int, ...] | None) -> list[int]:
    """The stream partitions a read covers (validated against the stream)."""
    if wanted is None:
        return list(range(info.partitions))
    for p in wanted:
        if p >= info.partitions:
            raise PartitionOutOfRange(
                f"option 'partitions': partition {p} is out of range for stream {info.name!r} "
                f"with {info.partitions} partitions"
            )
    return list(wanted)


def resolve_position(backend: Any, stream: str, partition: int, spec: Any, option: str,
                     newest_cache: dict[int, int] | None = None) -> int:
    """The offset (last processed txn ID) that ``spec`` denotes for ``partition``.

    * ``"oldest"`` -> 0 (before everything);
    * ``"newest"`` -> the highest ID allocated so far (only later transactions are read);
    * ``("time", dt)`` -> just before the first transaction opened at or after ``dt``
      (as an *ending* offset: the last transaction opened before ``dt``);
    * an ``int`` -> that transaction ID.
    """
    if spec == "oldest":
        return 0
    if spec == "newest":
        if newest_cache is not None and partition in newest_cache:
            return newest_cache[partition]
        return int(backend.last_txn_id(stream, partition))
    if isinstance(spec, tuple) and spec[0] == "time":
        when: _dt.datetime = spec[1]
        return max(0, txn_id_at(when) - 1)
    if isinstance(spec, int):
        return spec
    raise InvalidArgument(f"option {option!r}: cannot interpret {spec!r}")


def spec_for(specs: dict[str, Any], partition: int) -> Any:
    return specs.get(str(partition), specs["*"])


def check_spec_partitions(specs: dict[str, Any], option: str, info: Any) -> None:
    for key in specs:
        if key != "*" and int(key) >= info.partitions:
            raise PartitionOutOfRange(
                f"option {option!r}: partition {key} is out of range for stream {info.name!r} "
                f"with {info.partitions} partitions"
            )


def scan_partition(backend: Any, stream: str, partition: int, after: int, upto: int | None = None,
                   max_rows: int | None = None) -> PartitionScan:
    """Scan ``partition`` for checkpointed transactions with ``after < id <= upto``.

    Stops at the first open transaction, at ``upto``, or once ``max_rows`` items have been
    collected (always at least one transaction, so progress is made even when a single
    transaction is larger than ``max_rows``; a transaction is never split).

    Against the embedded engine the scan reads only the transaction records (ID, state,
    item count), not the items (:func:`_embedded_index_scan`); any other backend is scanned
    through ``Backend.fetch``.
    """
    fast = _embedded_index_scan(backend, stream, partition, after, upto, max_rows)
    if fast is not None:
        return fast
    txns: list[tuple[int, int]] = []
    pos = after
    rows = 0
    while True:
        fetched = backend.fetch(stream, partition, pos, SCAN_BATCH)
        for txn in fetched.txns:
            if upto is not None and txn.id > upto:
                return PartitionScan(txns, max(pos, upto), False)
            n = len(txn.items)
            if max_rows is not None and txns and rows + n > max_rows:
                return PartitionScan(txns, pos, False, True)
            txns.append((txn.id, n))
            pos = txn.id
            rows += n
        if fetched.blocked and fetched.txns:
            continue  # ask again from here: a blocker whose TTL passed is invalidated at the head
        if fetched.blocked or len(fetched.txns) < SCAN_BATCH:
            # The end of the partition, or an open transaction: everything up to the fetch
            # position (including cancelled/invalid records after the last txn) is passed.
            end = max(pos, int(fetched.position))
            if upto is not None and end > upto:
                return PartitionScan(txns, max(pos, upto), False)
            return PartitionScan(txns, end, bool(fetched.blocked))
        if max_rows is not None and rows >= max_rows:
            return PartitionScan(txns, pos, False, True)


def split_chunks(txns: list[tuple[int, int]], after: int, end: int, rows_per_split: int) -> list[tuple[int, int, int]]:
    """Cut a partition's ``(id, count)`` list into ``(after, last, rows)`` chunks of about
    ``rows_per_split`` rows, only at transaction boundaries. Chunks without rows are left
    out (they would only hold passed-over records)."""
    chunks: list[tuple[int, int, int]] = []
    lo = after
    rows = 0
    for tid, n in txns:
        rows += n
        if rows >= rows_per_split:
            chunks.append((lo, tid, rows))
            lo = tid
            rows = 0
    if rows:
        chunks.append((lo, max(end, lo), rows))
    return chunks


def _embedded_index_scan(backend: Any, stream: str, partition: int, after: int, upto: int | None,
                         max_rows: int | None) -> PartitionScan | None:
    """:func:`scan_partition` on an embedded ``Core`` from its transaction records alone.

    Follows the engine's read rule exactly (``engine/reads.py``: checkpointed and within the
    stream TTL -> returned; cancelled/invalid/past TTL -> passed; open -> stop). Returns None
    (the caller then uses ``fetch``) for other backends, and when it meets an open
    transaction whose TTL has passed, which only the engine's write path may invalidate.
    """
    try:
        from ..engine import keys, reads
        from ..engine import ops as O
        from ..engine.core import Core
    except ImportError:  # pragma: no cover - engine layout changed
        return None
    if not isinstance(backend, Core):
        return None
    backend._check()
    now = backend.clock()
    store = backend.store
    txns: list[tuple[int, int]] = []
    pos = after  # the last transaction taken
    passed = after  # the last record examined and passed (any state)
    rows = 0
    with store.read() as txn:
        info = reads.lookup_stream(txn, store, stream)
        reads.check_partition(info, partition)
        floor = reads.ttl_floor(info, now)
        prefix = keys.part_key(info.id, partition)
        cur = txn.cursor(db=store.txns)
        if after >= 2**63 - 1 or not cur.set_range(keys.txn_key(info.id, partition, after + 1)):
            return PartitionScan(txns, pos, False)
        unpack = keys.STATE.unpack
        for k, v in cur.iternext():
            if k[: keys.PART_LEN] != prefix:
                break
            tid = keys.txn_id_of(k)
            if upto is not None and tid > upto:
                return PartitionScan(txns, max(pos, upto), False)
            state, deadline, _, items = unpack(v)
            if state == O.CHECKPOINTED and tid >= floor:
                if max_rows is not None and txns and rows + items > max_rows:
                    return PartitionScan(txns, pos, False, True)
                txns.append((tid, items))
                rows += items
                pos = passed = tid
            elif state == O.OPENED:
                if deadline <= now:
                    return None  # expired: let fetch invalidate it through the write path
                return PartitionScan(txns, max(pos, passed), True)
            else:
                passed = tid
    return PartitionScan(txns, max(pos, passed), False)
