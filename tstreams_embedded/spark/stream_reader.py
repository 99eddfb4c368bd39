"""Structured Streaming reads: ``spark.readStream.format("tstreams")``.

Offsets are JSON maps ``{"<partition>": last_txn_id}`` with sorted string keys (Spark
compares offsets as JSON strings). A micro-batch covers the transactions
``start[p] < id <= end[p]`` of each partition.

Guarantees:

* every end offset is a transaction boundary reached by a consumer-style scan: only
  checkpointed transactions are read, never past an open one, and a transaction is never
  split between micro-batches;
* ``maxRowsPerTrigger`` caps a micro-batch at that many rows, except that a single
  transaction larger than the cap is still read whole (progress is guaranteed); the budget
  is spent on the oldest transactions across all partitions first (IDs are time-based), so
  partitions advance together in time, which keeps event-time watermarks honest;
* ``trigger(availableNow=True)`` reads what had been allocated when the query started and
  then stops;
* new transactions are seen at the next trigger (every ``latestOffset`` call scans).

Spark's checkpoint, not :meth:`commit`, is the resume point: after a restart Spark replays
the planned batch from its offset log, and :meth:`partitions` rescans exactly that range.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ..errors import InvalidArgument
from . import scan as planning
from .connection import engine_for
from .options import ReadOptions
from .reader import ChunkPartition, Segment, pack_segments, read_chunk, stream_info


def make_offset(positions: dict[int, int]) -> dict[str, int]:
    """An offset dict with sorted string keys (stable JSON for Spark's comparisons)."""
    return {str(p): int(positions[p]) for p in sorted(positions, key=str)}


def parse_offset(offset: dict[str, Any]) -> dict[int, int]:
    try:
        return {int(k): int(v) for k, v in offset.items()}
    except (TypeError, ValueError):
        raise InvalidArgument(
            f"the streaming offset {offset!r} is not a tstreams offset map; was this checkpoint written "
            "by another source?"
        ) from None


class TStreamsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader (see the module docstring). Offset methods run in one long-lived
    driver-side process; :meth:`read` runs on executors on a pickled copy."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._parts: list[int] | None = None
        self._target: dict[int, int] | None = None  # availableNow: do not read past these
        self._scans: dict[tuple[int, int], planning.PartitionScan] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_parts": self._parts, "_target": None, "_scans": {}}

    # ------------------------------------------------------------------ driver side
    def _backend(self) -> Any:
        return engine_for(self.options.target).backend

    def _partitions(self) -> list[int]:
        if self._parts is None:
            backend = self._backend()
            info = stream_info(backend, self.options.target)
            planning.check_spec_partitions(self.options.starting, "startingOffsets", info)
            self._parts = planning.select_partitions(info, self.options.partitions)
        return self._parts

    def initialOffset(self) -> dict[str, Any]:
        backend = self._backend()
        stream = self.options.target.stream
        starting = self.options.starting
        return make_offset({
            p: planning.resolve_position(backend, stream, p, planning.spec_for(starting, p), "startingOffsets")
            for p in self._partitions()
        })

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_rows_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        backend = self._backend()
        stream = self.options.target.stream
        self._target = {p: int(backend.last_txn_id(stream, p)) for p in self._partitions()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        positions = parse_offset(start)
        for p in self._partitions():
            positions.setdefault(p, 0)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        backend = self._backend()
        stream = self.options.target.stream
        scans: dict[int, planning.PartitionScan] = {}
        for p, after in positions.items():
            upto = self._target.get(p) if self._target is not None else None
            if upto is not None and upto <= after:
                continue
            scans[p] = planning.scan_partition(backend, stream, p, after, upto, max_rows)
        self._scans = {(p, positions[p]): s for p, s in scans.items()}
        end = dict(positions)
        if max_rows is None:
            for p, s in scans.items():
                end[p] = s.position
            return make_offset(end)
        # Spend the row budget on the oldest transactions first, across partitions.
        heap = [(s.txns[0][0], p, 0) for p, s in scans.items() if s.txns]
        heapq.heapify(heap)
        taken = 0
        count = {p: 0 for p in scans}
        while heap:
            tid, p, i = heap[0]
            n = scans[p].txns[i][1]
            if taken and taken + n > max_rows:
                break
            heapq.heappop(heap)
            taken += n
            count[p] = i + 1
            end[p] = tid
            if i + 1 < len(scans[p].txns):
                heapq.heappush(heap, (scans[p].txns[i + 1][0], p, i + 1))
        for p, s in scans.items():
            if count[p] == len(s.txns) and not s.truncated:
                # All of this partition's candidates were taken: also pass the cancelled or
                # invalid records after them.
                end[p] = max(end[p], s.position)
        return make_offset(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        starts = parse_offset(start)
        ends = parse_offset(end)
        backend = self._backend()
        stream = self.options.target.stream
        segments: list[Segment] = []
        for p in sorted(ends):
            after = starts.get(p, 0)
            last = ends[p]
            if last <= after:
                continue
            cached = self._scans.get((p, after))
            if cached is not None and (cached.position >= last):
                txns = [t for t in cached.txns if t[0] <= last]
            else:
                txns = planning.scan_partition(backend, stream, p, after, last).txns
            segments.extend((p, lo, hi, rows) for lo, hi, rows in
                            planning.split_chunks(txns, after, last, self.options.rows_per_split))
        return list(pack_segments(segments, self.options.rows_per_split))

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: Spark's checkpoint is the resume point."""

    def stop(self) -> None:
        self._scans = {}

    # ------------------------------------------------------------------ executor side
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChunkPartition)
        return read_chunk(self.options.target, self.options.decoding, partition)

