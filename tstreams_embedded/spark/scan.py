"""Turning offset specs into transaction IDs, and scanning partitions for planning.

All of this runs on the driver (in Spark's driver-side Python process). It uses only the
:class:`~tstreams_embedded.engine.protocol.backend.Backend` protocol, so it works the same against an
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

from ..engine.protocol.backend import Backend
from ..engine.protocol.validate import MAX_ID
from ..errors import InvalidArgument, PartitionOutOfRange
from ..ids import txn_id_at

SCAN_BATCH = 4096


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


def scan_partition(backend: Backend, stream: str, partition: int, after: int, upto: int | None = None,
                   max_rows: int | None = None) -> PartitionScan:
    """Scan ``partition`` for checkpointed transactions with ``after < id <= upto``.

    Stops at the first open transaction, at ``upto``, or once ``max_rows`` items have been
    collected (always at least one transaction, so progress is made even when a single
    transaction is larger than ``max_rows``; a transaction is never split).

    Reads only the transaction index (IDs and item counts, :meth:`Backend.scan_index`),
    never the items, embedded and remote alike.
    """
    txns: list[tuple[int, int]] = []
    pos = after
    rows = 0
    end = MAX_ID if upto is None else upto
    while True:
        scan = backend.scan_index(stream, partition, pos, end, SCAN_BATCH)
        for tid, n in scan.entries:
            if max_rows is not None and txns and rows + n > max_rows:
                return PartitionScan(txns, pos, False, True)
            txns.append((tid, n))
            pos = tid
            rows += n
        pos = max(pos, scan.position)
        if not scan.truncated:  # the end, an open transaction, or ``upto``
            return PartitionScan(txns, pos, scan.blocked)


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
