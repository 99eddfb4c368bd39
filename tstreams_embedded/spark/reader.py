"""Batch reads: ``spark.read.format("tstreams")``.

Guarantees:

* the end of every partition is fixed when the read is planned (``partitions()`` on the
  driver): transactions checkpointed later are not part of this DataFrame;
* only checkpointed transactions are read; the scan of a partition stops at the first open
  transaction, exactly like a consumer, so the end is a point no consumer has to go back
  behind;
* a transaction is never cut: each input partition (Spark task) covers whole transactions
  ``after < id <= last`` of one or more stream partitions, about ``rowsPerSplit`` rows, so
  a large partition is read by several tasks in parallel and small ones share a task.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..engine.protocol.iteration import iter_transactions
from ..engine.storage.core import Core
from ..errors import StreamNotFound
from .connection import engine_for
from .decoding import Decoding
from .local_read import local_batches
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


Segment = tuple[int, int, int, int]  # (stream partition, after, last, rows)


class ChunkPartition(InputPartition):
    """One Spark task: whole transactions ``after < id <= last`` of one or more stream
    partitions (``segments``), about ``rowsPerSplit`` rows in all."""

    def __init__(self, segments: list[Segment]) -> None:
        super().__init__(segments)
        self.segments = segments

    @property
    def rows(self) -> int:
        return sum(s[3] for s in self.segments)

    def __repr__(self) -> str:
        return f"ChunkPartition({self.segments})"


def pack_segments(segments: list[Segment], rows_per_split: int) -> list[ChunkPartition]:
    """Group segments (each already at most about ``rows_per_split`` rows) into tasks of about
    ``rows_per_split`` rows, so small partitions share a task instead of each paying a task's
    overhead."""
    tasks: list[ChunkPartition] = []
    current: list[Segment] = []
    rows = 0
    for seg in segments:
        if current and rows + seg[3] > rows_per_split:
            tasks.append(ChunkPartition(current))
            current, rows = [], 0
        current.append(seg)
        rows += seg[3]
    if current:
        tasks.append(ChunkPartition(current))
    return tasks


def stream_info(backend: Any, target: Target) -> Any:
    """The stream's metadata, with a not-found error that names the option."""
    try:
        return backend.get_stream(target.stream)
    except StreamNotFound:
        raise StreamNotFound(f"option 'stream': {target.describe()} does not exist") from None


def read_chunk(target: Target, value_format: str | Decoding, chunk: ChunkPartition) -> Iterator[pa.RecordBatch]:
    """Yield the rows of ``chunk`` as Arrow record batches (runs on an executor)."""
    segments = [s for s in chunk.segments if s[2] > s[1]]
    if not segments:
        return
    backend = engine_for(target).backend
    for partition, after, last, _ in segments:
        if isinstance(backend, Core):  # embedded: undecoded chunk payloads straight from LMDB
            yield from local_batches(backend, target.stream, partition, after, last, value_format)
        else:
            yield from record_batches(iter_transactions(backend, target.stream, partition, after, last, FETCH_TXNS),
                                      target.stream, partition, value_format)


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
        segments: list[Segment] = []
        for p in parts:
            after = resolve_position(backend, target.stream, p, spec_for(opts.starting, p), "startingOffsets")
            end_spec = spec_for(opts.ending, p)
            upto = None if end_spec == "newest" else resolve_position(
                backend, target.stream, p, end_spec, "endingOffsets")
            if upto is not None and upto <= after:
                continue
            scan = scan_partition(backend, target.stream, p, after, upto)
            segments.extend((p, lo, hi, rows) for lo, hi, rows in
                            split_chunks(scan.txns, after, scan.position, opts.rows_per_split))
        return list(pack_segments(segments, opts.rows_per_split)) or [ChunkPartition([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChunkPartition)
        return read_chunk(self.options.target, self.options.decoding, partition)
