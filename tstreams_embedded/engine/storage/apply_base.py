"""The frame of applying operation records (see :mod:`.apply`): :class:`Applier` with
:meth:`Applier.apply_batch`, the one place where stored state changes, the per-batch
:class:`BatchScope`, the registry of handlers (:func:`handles`, :data:`HANDLERS`) and the
helpers the handlers share. The handlers themselves are in :mod:`.apply` (the core records)
and :mod:`.queue_apply` (work queues), which both register here."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import lmdb

from ... import errors
from ...ids import ID_MULTIPLIER
from ..protocol import ops as O
from ..protocol.backend import StreamInfo
from ..protocol.ops import TxnState
from ..protocol.validate import MAX_ID, check_int, check_partition, check_txn_id, chunk_count
from . import keys
from .catalog import lookup_stream
from .chunks import seal
from .store import Store

R = TypeVar("R")
#: ``meta`` key: the highest transaction ID of any deleted stream; the first ID of a partition
#: is allocated above it, so IDs never repeat in a partition of the same name.
ID_FLOOR = b"id_floor"
#: ``meta`` key: the id of the next stream created
NEXT_STREAM_ID = b"next_stream_id"
#: ``meta`` key: the id of the next schedule (:mod:`..protocol.schedules`)
NEXT_SCHEDULE_ID = b"next_schedule_id"
#: the state namespace of the schedules, written only by the schedule records
Handler = Callable[["Applier", "BatchScope", Any], tuple[Any, Any]]
HANDLERS: dict[type, Handler] = {}
new_record = tuple.__new__  # a record with every field given, without its Python-level __new__


def handles(record: type) -> Callable[[Callable[[Applier, BatchScope, R], tuple[Any, R]]],
                                      Callable[[Applier, BatchScope, R], tuple[Any, R]]]:
    """Register the apply handler of an operation record type (one handler per type)."""

    def register(fn: Callable[[Applier, BatchScope, R], tuple[Any, R]]) -> Callable[[Applier, BatchScope, R],
                                                                                   tuple[Any, R]]:
        if record in HANDLERS:
            raise TypeError(f"{record.__name__} already has an apply handler")
        HANDLERS[record] = fn
        return fn

    return register


class BatchScope:
    """What the handlers of one batch share: the write transaction, the batch's clock, a
    cache of the streams it touched, and whether it is a replay."""

    __slots__ = ("txn", "now", "streams", "replay", "last_ids", "unwritten")

    def __init__(self, txn: lmdb.Transaction, now: int, replay: bool) -> None:
        self.txn = txn
        self.now = now
        self.replay = replay
        self.streams: dict[str, StreamInfo] = {}
        #: (stream id, partition) -> the partition's last allocated transaction ID in this
        #: batch (saves reading it back for every record).
        self.last_ids: dict[tuple[int, int], int] = {}
        #: the partitions of ``last_ids`` whose ID is not written to ``parts`` yet: written
        #: once per batch (:meth:`Applier.write_last_ids`), not once per record.
        self.unwritten: set[tuple[int, int]] = set()


class Applier:
    """Applies operation batches against a :class:`Store` (one instance per engine)."""

    def __init__(self, store: Store, max_item_size: int) -> None:
        self.store = store
        self.max_item_size = max_item_size

    def apply_batch(self, txn: lmdb.Transaction, now: int, batch: Sequence[Any], replay: bool = False
                    ) -> tuple[list[Any], list[Any]]:
        """Apply ``batch`` in ``txn``; return ``(results, resolved records)``. Raises on any error."""
        scope = BatchScope(txn, now, replay)
        results: list[Any] = []
        resolved: list[Any] = []
        for op in batch:
            handler = HANDLERS.get(type(op))
            if handler is None:
                O.spec(op)  # raises the clear error for a non-record
                raise errors.InvalidArgument(f"no apply handler for {type(op).__name__}")
            try:
                result, done = handler(self, scope, op)
            except errors.TStreamsError:
                raise
            except (TypeError, ValueError, AttributeError, struct.error) as exc:
                raise errors.InvalidArgument(f"bad arguments for {O.describe(op)}: {exc}") from None
            results.append(result)
            resolved.append(done)
        if scope.unwritten:
            self.write_last_ids(scope)
        return results, resolved

    def write_last_ids(self, scope: BatchScope) -> None:
        """Write the last transaction IDs the batch allocated to ``parts`` (before anything
        reads ``parts`` in the batch's transaction, and at its end)."""
        put, pack, last_ids = self.store.put, keys.U64.pack, scope.last_ids
        for cached in scope.unwritten:
            put(scope.txn, "parts", keys.part_key(*cached), pack(last_ids[cached]))
        scope.unwritten.clear()

    # -- what the handlers use -------------------------------------------------------
    def stream_info(self, scope: BatchScope, name: Any, stream_id: Any = None) -> StreamInfo:
        """The stream ``name``; with ``stream_id``, only that incarnation of it (a record of a
        handle made before the stream was deleted and created again gets StreamNotFound)."""
        info = scope.streams.get(name) if isinstance(name, str) else None
        if info is None:
            info = lookup_stream(scope.txn, self.store, name)
            scope.streams[name] = info
        if stream_id is not None and check_int(stream_id, "stream id", 1, MAX_ID) != info.id:
            raise errors.StreamNotFound(
                f"stream {info.name!r} (id {stream_id}) was deleted; a new stream of that name (id {info.id}) "
                "exists: open a new producer or consumer on it"
            )
        return info

    def partition_info(self, scope: BatchScope, stream: Any, partition: Any, stream_id: Any = None) -> StreamInfo:
        info = self.stream_info(scope, stream, stream_id)
        check_partition(info, partition)
        return info

    def open_state(self, scope: BatchScope, info: StreamInfo, partition: int, txn_id: Any
                    ) -> tuple[bytes, tuple[int, int, int, int], bytes]:
        """Return (key, state tuple, producer name as stored: UTF-8, b"" if not known) of an
        open, unexpired transaction or raise."""
        check_txn_id(txn_id)
        key = keys.txn_key(info.id, partition, txn_id)
        raw = self.store.get(scope.txn, "txns", key)
        where = f"transaction {txn_id} in {info.name!r} partition {partition}"
        if raw is None:
            raise errors.TransactionNotFound(f"{where} does not exist")
        state = keys.STATE.unpack_from(raw)
        if state[0] == TxnState.INVALID:  # expired, and a reader already passed over it
            raise errors.TransactionExpired(f"{where} expired (its producer stopped keeping it alive)")
        if state[0] != TxnState.OPENED:
            raise errors.TransactionFinished(f"{where} is already {TxnState(state[0]).label}")
        if state[1] <= scope.now:
            raise errors.TransactionExpired(
                f"{where} expired {scope.now - state[1]} ms ago (its producer stopped keeping it alive)"
            )
        return key, state, bytes(raw[keys.STATE_LEN:])

    def delete_chunks(self, txn: lmdb.Transaction, info: StreamInfo, partition: int, txn_id: int,
                       chunks: int) -> None:
        for c in range(chunks):
            txn.delete(keys.chunk_key(info.id, partition, txn_id, c), db=self.store.data)

    def allocate(self, scope: BatchScope, info: StreamInfo, partition: int, given: Any) -> int:
        """A new transaction ID, or the resolved one when replaying (written to ``parts`` at
        the end of the batch)."""
        cached = (info.id, partition)
        last = scope.last_ids.get(cached)
        if last is None:
            raw = self.store.get(scope.txn, "parts", keys.part_key(info.id, partition))
            if raw:
                last = keys.U64.unpack(raw)[0]
            else:  # first ID of the partition: above every ID of a deleted stream (same name or not)
                floor = self.store.get(scope.txn, "meta", ID_FLOOR)
                last = keys.U64.unpack(floor)[0] if floor else 0
        if scope.replay and given is not None:
            txn_id = check_int(given, "transaction id", 1, 2**63 - 1)
        else:
            txn_id = max(scope.now * ID_MULTIPLIER, last + 1)
        if txn_id > last:
            scope.unwritten.add(cached)
            last = txn_id
        scope.last_ids[cached] = last
        return txn_id

    def deadline(self, scope: BatchScope, ttl_ms: int, given: Any) -> int:
        if scope.replay and given is not None:
            return check_int(given, "deadline", 0, 2**63 - 1)
        return scope.now + ttl_ms

    def count_items(self, scope: BatchScope, chunk: Any) -> int:
        """Items in a record's chunk (validated); a replayed :class:`~..protocol.ops.GoneChunk` counts
        its items without data."""
        if scope.replay and type(chunk) is O.GoneChunk:
            return chunk.items
        return chunk_count(chunk, self.max_item_size)

    def put_chunk(self, scope: BatchScope, info: StreamInfo, partition: int, txn_id: int, index: int,
                   chunk: Any, items: int) -> O.ChunkRef:
        """Store a chunk (sealed with its checksum); return the reference the log keeps."""
        if type(chunk) is not O.GoneChunk:
            payload = chunk if type(chunk) is bytes else bytes(chunk)
            scope.txn.put(keys.chunk_key(info.id, partition, txn_id, index), seal(payload), db=self.store.data)
        return O.ChunkRef(info.id, partition, txn_id, index, items)

    def put_state(self, scope: BatchScope, key: bytes, state: TxnState, deadline: int, chunks: int,
                   items: int, producer: bytes = b"") -> None:
        """Write a transaction's state record; an open one keeps its ``producer`` name (UTF-8)."""
        record = keys.STATE.pack(state, deadline, chunks, items)
        self.store.put(scope.txn, "txns", key, record + producer if producer else record)

    def cancel(self, scope: BatchScope, stream: Any, partition: Any, txn_id: Any, *, strict: bool,
               stream_id: Any = None) -> bool:
        info = self.partition_info(scope, stream, partition, stream_id)
        check_txn_id(txn_id)
        key = keys.txn_key(info.id, partition, txn_id)
        raw = self.store.get(scope.txn, "txns", key)
        if raw is None:
            if strict:
                raise errors.TransactionNotFound(
                    f"transaction {txn_id} does not exist in {info.name!r} partition {partition}"
                )
            return False
        state, deadline, chunks, _ = keys.STATE.unpack_from(raw)
        if state != TxnState.OPENED:
            if strict:
                raise errors.TransactionFinished(
                    f"transaction {txn_id} in {info.name!r} partition {partition} is already "
                    f"{TxnState(state).label}"
                )
            return False
        self.delete_chunks(scope.txn, info, partition, txn_id, chunks)
        final = TxnState.CANCELLED if deadline > scope.now else TxnState.INVALID
        self.put_state(scope, key, final, 0, 0, 0)
        return True


# ------------------------------------------------------------------------------ handlers
