"""Batch reads: ``spark.read.format("tstreams")``.

Guarantees:

* the end of every partition is fixed when the read is planned (``partitions()`` on the
  driver): transactions checkpointed later are not part of this DataFrame;
* only checkpointed transactions are read; the scan of a partition stops at the first open
  transaction, exactly like a consumer, so the end is a point no consumer has to go back
  behind;
* a transaction is never cut: each input partition covers whole transactions
  ``after < id <= last`` of one stream partition, about ``rowsPerSplit`` rows, so large
  partitions are read by several tasks in parallel.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..errors import StreamNotFound
from .connection import engine_for
from .options import ReadOptions, Target
from .rows import record_batches
from .scan import (
    check_spec_partitions,
    resolve_position,
    scan_partition,
    select_partitions,
    spec_for,
    split_chunks,
)

FETCH_TXNS = 256


class ChunkPartition(InputPartition):
    """Transactions ``after < id <= last`` of stream partition ``partition`` (``rows`` items)."""

    def __init__(self, partition: int, after: int, last: int, rows: int) -> None:
        super().__init__((partition, after, last))
        self.partition = partition
        self.after = after
        self.last = last
        self.rows = rows

    def __repr__(self) -> str:
        return f"ChunkPartition(p={self.partition}, after={self.after}, last={self.last}, rows={self.rows})"


def stream_info(backend: Any, target: Target) -> Any:
    """The stream's metadata, with a not-found error that names the option."""
    try:
        return backend.get_stream(target.stream)
    except StreamNotFound:
        raise StreamNotFound(f"option 'stream': {target.describe()} does not exist") from None


def read_chunk(target: Target, value_format: str, chunk: ChunkPartition) -> Iterator[pa.RecordBatch]:
    """Yield the rows of ``chunk`` as Arrow record batches (runs on an executor)."""
    if chunk.partition < 0 or chunk.last <= chunk.after:
        return iter(())
    backend = engine_for(target).backend
    return record_batches(_txns(backend, target.stream, chunk), target.stream, chunk.partition, value_format)


def _txns(backend: Any, stream: str, chunk: ChunkPartition) -> Iterator[Any]:
    pos = chunk.after
    while pos < chunk.last:
        fetched = backend.fetch(stream, chunk.partition, pos, FETCH_TXNS)
        for txn in fetched.txns:
            if txn.id > chunk.last:
                return
            yield txn
            pos = txn.id
        if not fetched.txns or fetched.blocked:
            # Everything up to ``last`` was resolved at planning time; an empty answer means
            # the rest has expired (stream TTL) or been deleted since.
            return


class TStreamsBatchReader(DataSourceReader):
    """Plans and reads one batch DataFrame (see the module docstring for guarantees)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        opts = self.options
        target = opts.target
        backend = engine_for(target).backend
        info = stream_info(backend, target)
        parts = select_partitions(info, opts.partitions)
        check_spec_partitions(opts.starting, "startingOffsets", info)
        check_spec_partitions(opts.ending, "endingOffsets", info)
        out: list[InputPartition] = []
        for p in parts:
            after = resolve_position(backend, target.stream, p, spec_for(opts.starting, p), "startingOffsets")
            end_spec = spec_for(opts.ending, p)
            upto = None if end_spec == "newest" else resolve_position(
                backend, target.stream, p, end_spec, "endingOffsets")
            if upto is not None and upto <= after:
                continue
            scan = scan_partition(backend, target.stream, p, after, upto)
            for lo, hi, rows in split_chunks(scan.txns, after, scan.position, opts.rows_per_split):
                out.append(ChunkPartition(p, lo, hi, rows))
        if not out:
            out.append(ChunkPartition(-1, 0, 0, 0))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChunkPartition)
        return read_chunk(self.options.target, self.options.value_format, partition)
