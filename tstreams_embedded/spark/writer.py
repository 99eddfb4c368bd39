"""The sinks: ``df.write.format("tstreams")`` and ``df.writeStream.format("tstreams")``.

Both check at planning that the output stream exists (:func:`check_output_stream`), so a
missing stream fails the query before any upstream work runs.

Batch write: every task stages its rows (:mod:`.staging`); the job's ``commit`` checkpoints
all staged transactions in one atomic engine write, so the whole DataFrame becomes visible
at once; ``abort`` cancels them, so a failed job leaves nothing visible.

Streaming write, exactly-once. Per micro-batch ``batchId``:

* ``write()`` (executors) stages the rows as open transactions;
* ``commit(messages, batchId)`` (driver) does ONE atomic ``submit``::

      [(SET_MARKER, key, batchId, guard=True), (CHECKPOINT, ...), ...]

  The guarded marker fails the whole write with ``MarkerConflict`` when the marker is
  already at ``batchId`` or beyond, i.e. when Spark replays a batch that was committed
  before a crash (Spark records its own commit only after the sink's commit returns). The
  replay's staged transactions are then cancelled instead, so the batch appears once;
* ``abort`` cancels only staged transactions (``CANCEL_IF_OPEN``): a committed batch is
  never undone.

``key`` is derived from the output stream and the producer id, which is bound to the
query's ``checkpointLocation`` (or given as option ``producerId``). A marker *ahead* of the
batch being committed means the checkpoint was reset while the marker was kept; that is
reported as an error instead of silently skipping batches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from ..engine.protocol import ops as O
from ..errors import InvalidArgument, MarkerConflict, StreamNotFound, TransactionExpired
from .connection import engine_for
from .options import Target, WriteOptions
from .staging import cancel_staged, checkpoint_ops, stage_rows, staged_txns


def sink_marker_key(stream: str, producer_id: str) -> str:
    """The engine marker that records the last committed batch of a streaming sink."""
    digest = hashlib.sha256(f"{stream}\x00{producer_id}".encode()).hexdigest()[:32]
    return f"spark-sink/{digest}"


def check_output_stream(target: Target) -> None:
    """At planning, before any upstream work: the output stream must exist
    (StreamNotFound naming the option otherwise), as reads check theirs."""
    try:
        engine_for(target).backend.get_stream(target.stream)
    except StreamNotFound:
        raise StreamNotFound(
            f"option 'stream': {target.describe()} does not exist; create it first "
            f"(engine.create_stream({target.stream!r}, partitions=...) or tstreams streams create)"
        ) from None


def _commit(backend: Any, ops: list[O.Operation], opts: WriteOptions) -> None:
    try:
        backend.submit(ops, durable=True)
    except TransactionExpired as exc:
        raise TransactionExpired(
            f"{exc}; the staged rows waited longer than option 'stagingTtl' "
            f"({opts.staging_ttl_ms // 1000} s) for the job to commit: raise it"
        ) from None


class TStreamsBatchWriter(DataSourceWriter):
    """All-or-nothing batch write (see the module docstring)."""

    def __init__(self, options: WriteOptions, schema: Any) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return stage_rows(self.options, iterator, self.schema)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        txns = staged_txns(messages)
        if txns:
            _commit(engine_for(self.options.target).backend, checkpoint_ops(txns), self.options)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        cancel_staged(engine_for(self.options.target).backend, staged_txns(messages))


class TStreamsStreamWriter(DataSourceStreamWriter):
    """Exactly-once micro-batch sink (see the module docstring)."""

    def __init__(self, options: WriteOptions, schema: Any) -> None:
        assert options.producer_id is not None
        self.options = options
        self.schema = schema
        self.marker = sink_marker_key(options.target.stream, options.producer_id)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return stage_rows(self.options, iterator, self.schema)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        backend = engine_for(self.options.target).backend
        txns = staged_txns(messages)
        try:
            _commit(backend, [O.SetMarker(self.marker, int(batchId), True), *checkpoint_ops(txns)], self.options)
        except MarkerConflict:
            stored = backend.get_marker(self.marker)
            cancel_staged(backend, txns)
            if stored is not None and stored > batchId:
                raise InvalidArgument(
                    f"tstreams sink {self.options.target.stream!r}: batch {batchId} is older than the last "
                    f"committed batch {stored} of producer {self.options.producer_id!r}; the "
                    "checkpointLocation was reset or reused. Use a new checkpointLocation or a new "
                    "option 'producerId'"
                ) from None
            # stored == batchId: a replay of a batch committed before a crash -> skipped.

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        cancel_staged(engine_for(self.options.target).backend, staged_txns(messages))
