"""Staging rows as open transactions (executor side) and resolving them (driver side).

Both Spark sinks write in two phases:

1. **stage** (in each task's ``write()``, on an executor): rows become *open* transactions of
   at most ``txnSize`` items, opened with the long ``stagingTtl`` and kept alive until the
   task ends. Open transactions are invisible to every reader. The task returns their
   ``(partition, txn_id)`` list in its commit message. If the task fails, it cancels what it
   staged before re-raising; if its process is killed, the transactions expire after
   ``stagingTtl`` and are never visible.
2. **resolve** (in ``commit``/``abort`` on the driver): one atomic ``submit`` checkpoints all
   staged transactions of the job (they become visible together), or cancels them with
   ``CANCEL_IF_OPEN``, which never touches a transaction that was already checkpointed.

While staged transactions are open, consumers of those partitions wait at them (T-streams
order is never broken); they move on as soon as the job commits or aborts, or at the latest
when ``stagingTtl`` passes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from ..engine.protocol import ops as O
from ..errors import InvalidArgument, PartitionOutOfRange, StreamNotFound
from .connection import engine_for
from .options import WriteOptions

#: Items per DATA operation (one LMDB value each).
FLUSH_ITEMS = 2_000
FLUSH_BYTES = 4 * 1024 * 1024


@dataclass
class StagedMessage(WriterCommitMessage):
    """A task's commit message: the open transactions it staged, and their row count."""

    stream: str
    txns: list[tuple[int, int]] = field(default_factory=list)  # (partition, txn_id)
    rows: int = 0


def staged_txns(messages: Iterable[Any]) -> list[tuple[str, int, int]]:
    """``(stream, partition, txn_id)`` of every staged transaction in ``messages``."""
    out: list[tuple[str, int, int]] = []
    for m in messages:
        if isinstance(m, StagedMessage):
            out.extend((m.stream, p, t) for p, t in m.txns)
    return out


def cancel_staged(backend: Any, txns: list[tuple[str, int, int]]) -> int:
    """Cancel still-open staged transactions; checkpointed ones are left alone. Returns the
    number actually cancelled."""
    if not txns:
        return 0
    results = backend.submit([O.CancelIfOpen(s, p, t) for s, p, t in txns], durable=True)
    return sum(1 for r in results if r)


def checkpoint_ops(txns: list[tuple[str, int, int]]) -> list[O.Operation]:
    """The records that make staged transactions ``(stream, partition, txn_id)`` visible."""
    return [O.Checkpoint(s, p, t) for s, p, t in txns]


def input_columns(schema: Any) -> tuple[int, int | None]:
    """Validate the DataFrame schema of a write: a ``value`` column (binary or string) and an
    optional integer ``partition`` column. Other columns are ignored. Returns their indexes."""
    from pyspark.sql.types import BinaryType, ByteType, IntegerType, LongType, ShortType, StringType

    names = [f.name.lower() for f in schema.fields]
    if "value" not in names:
        raise InvalidArgument(
            f"writing to tstreams needs a column 'value' (binary or string); the DataFrame has {names}"
        )
    vi = names.index("value")
    if not isinstance(schema.fields[vi].dataType, (BinaryType, StringType)):
        raise InvalidArgument(
            f"column 'value' must be binary or string, got {schema.fields[vi].dataType.simpleString()}"
        )
    pi = names.index("partition") if "partition" in names else None
    if pi is not None and not isinstance(schema.fields[pi].dataType, (ByteType, ShortType, IntegerType, LongType)):
        raise InvalidArgument(
            f"column 'partition' must be an integer type, got {schema.fields[pi].dataType.simpleString()}"
        )
    return vi, pi


class _Stager:
    def __init__(self, backend: Any, opts: WriteOptions, partitions: int) -> None:
        self.backend = backend
        self.opts = opts
        self.stream = opts.target.stream
        self.partitions = partitions
        self.staged: list[tuple[int, int]] = []
        self.open: dict[int, tuple[int, int]] = {}  # partition -> (txn_id, items in it)
        self.buffers: dict[int, list[bytes]] = {}
        self.buffer_bytes: dict[int, int] = {}
        self.rows = 0

    def add(self, partition: int, value: bytes) -> None:
        buf = self.buffers.get(partition)
        if buf is None:
            buf = self.buffers[partition] = []
            self.buffer_bytes[partition] = 0
        buf.append(value)
        self.buffer_bytes[partition] += len(value)
        self.rows += 1
        txn = self.open.get(partition)
        in_txn = (txn[1] if txn else 0) + len(buf)
        if len(buf) >= FLUSH_ITEMS or self.buffer_bytes[partition] >= FLUSH_BYTES or in_txn >= self.opts.txn_size:
            self.flush(partition)

    def flush(self, partition: int) -> None:
        buf = self.buffers.get(partition)
        if not buf:
            return
        txn = self.open.get(partition)
        if txn is None:
            (txn_id,) = self.backend.submit(
                [O.Open(self.stream, partition, self.opts.staging_ttl_ms)], durable=False)
            self.staged.append((partition, txn_id))
            txn = (txn_id, 0)
        self.backend.submit([O.Data(self.stream, partition, txn[0], O.pack_items(buf))], durable=False)
        count = txn[1] + len(buf)
        self.buffers[partition] = []
        self.buffer_bytes[partition] = 0
        if count >= self.opts.txn_size:
            self.open.pop(partition, None)  # full: the next row opens a new transaction
        else:
            self.open[partition] = (txn[0], count)

    def finish(self) -> None:
        for p in list(self.buffers):
            self.flush(p)
        if self.staged:
            # Restart the staging TTL from the end of the task (the driver commits next).
            self.backend.submit(
                [O.KeepAlive([[self.stream, p, t] for p, t in self.staged], self.opts.staging_ttl_ms)],
                durable=False,
            )


def stage_rows(opts: WriteOptions, rows: Iterator[Any], schema: Any) -> StagedMessage:
    """Stage the rows of one Spark task as open transactions (see the module docstring)."""
    backend = engine_for(opts.target).backend
    try:
        info = backend.get_stream(opts.target.stream)
    except StreamNotFound:
        raise StreamNotFound(f"option 'stream': {opts.target.describe()} does not exist") from None
    vi, pi = input_columns(schema)
    stager = _Stager(backend, opts, info.partitions)
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        first = ctx.partitionId() if ctx is not None else 0
    except Exception:  # noqa: BLE001 - outside a task (unit use)
        first = 0
    spread = itertools.cycle(range(info.partitions))
    for _ in range(first % info.partitions):
        next(spread)
    try:
        for row in rows:
            value = row[vi]
            if value is None:
                raise InvalidArgument("column 'value' is null in a row; tstreams items cannot be null")
            if isinstance(value, str):
                value = value.encode("utf-8")
            elif not isinstance(value, bytes):
                value = bytes(value)
            part = row[pi] if pi is not None else None
            if part is None:
                part = next(spread)
            elif not 0 <= part < info.partitions:
                raise PartitionOutOfRange(
                    f"column 'partition': partition {part} is out of range for stream {info.name!r} "
                    f"with {info.partitions} partitions"
                )
            stager.add(part, value)
        stager.finish()
    except BaseException:
        try:
            cancel_staged(backend, [(opts.target.stream, p, t) for p, t in stager.staged])
        except Exception:  # noqa: BLE001 - the original error matters; TTL cleans up
            pass
        raise
    return StagedMessage(opts.target.stream, stager.staged, stager.rows)
