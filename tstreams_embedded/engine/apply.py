"""Applying operation records to an LMDB write transaction.

:func:`apply_batch` is the single place where stored state changes. It validates every
operation, resolves clock-dependent values (new transaction IDs, deadlines) and returns the
resolved operations for the commit log. Any error raises before the caller commits, so a
failed batch leaves no partial write.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import lmdb
import msgpack

from .. import errors
from ..ids import ID_MULTIPLIER
from . import keys
from . import ops as O
from .backend import StreamInfo
from .store import Store

MAX_NAME_BYTES = 255
MAX_PARTITIONS = 1_000_000
MAX_TXN_TTL_MS = 7 * 24 * 3600 * 1000
MAX_STREAM_TTL = 100 * 365 * 24 * 3600


# --------------------------------------------------------------------------- validation
def check_name(value: Any, what: str = "stream name") -> str:
    if not isinstance(value, str) or not value:
        raise errors.InvalidArgument(f"{what} must be a non-empty string, got {value!r}")
    if "\x00" in value or len(value.encode("utf-8")) > MAX_NAME_BYTES:
        raise errors.InvalidArgument(f"{what} must be at most {MAX_NAME_BYTES} UTF-8 bytes without NUL")
    return value


def check_int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.InvalidArgument(f"{what} must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise errors.InvalidArgument(f"{what} must be in [{lo}, {hi}], got {value}")
    return value


def decode_stream(name: str, raw: bytes) -> StreamInfo:
    sid, partitions, ttl, description, created = msgpack.unpackb(raw)
    return StreamInfo(name, sid, partitions, ttl, description, created)


def lookup_stream(txn: lmdb.Transaction, store: Store, name: Any) -> StreamInfo:
    if not isinstance(name, str):
        raise errors.InvalidArgument(f"stream name must be a string, got {type(name).__name__}")
    raw = txn.get(name.encode("utf-8"), db=store.streams) if name else None
    if raw is None:
        raise errors.StreamNotFound(f"stream {name!r} does not exist")
    return decode_stream(name, raw)


def check_partition(info: StreamInfo, partition: Any) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise errors.InvalidArgument(f"partition must be an integer, got {type(partition).__name__}")
    if not 0 <= partition < info.partitions:
        raise errors.PartitionOutOfRange(
            f"partition {partition} is out of range for stream {info.name!r} with {info.partitions} partitions"
        )
    return partition


def chunk_count(chunk: Any, max_item_size: int) -> int:
    """Validate a packed chunk of items and return how many it holds."""
    if not isinstance(chunk, (bytes, bytearray, memoryview)):
        raise errors.InvalidArgument(f"items chunk must be bytes, got {type(chunk).__name__}")
    try:
        items = msgpack.unpackb(chunk)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is bad input
        raise errors.InvalidArgument(f"items chunk is not a msgpack array: {exc}") from None
    if not isinstance(items, list):
        raise errors.InvalidArgument("items chunk must be a msgpack array of binary items")
    if items:
        kinds = set(map(type, items))
        if kinds != {bytes}:
            bad = next(k for k in kinds if k is not bytes)
            raise errors.InvalidArgument(f"items must be bytes, got {bad.__name__}")
        biggest = max(map(len, items))
        if biggest > max_item_size:
            raise errors.ItemTooLarge(f"item of {biggest} bytes exceeds max_item_size={max_item_size}")
    return len(items)


# --------------------------------------------------------------------------- applier
class Applier:
    """Applies operation batches against a :class:`Store` (one instance per engine)."""

    def __init__(self, store: Store, max_item_size: int) -> None:
        self.store = store
        self.max_item_size = max_item_size

    def apply_batch(self, txn: lmdb.Transaction, now: int, batch: Sequence[Any]) -> tuple[list, list]:
        """Apply ``batch`` in ``txn``; return ``(results, resolved ops)``. Raises on any error."""
        if not isinstance(batch, (list, tuple)):
            raise errors.InvalidArgument("a batch must be a list of operations")
        results: list = []
        resolved: list = []
        streams: dict[str, StreamInfo] = {}
        for op in batch:
            if not isinstance(op, (list, tuple)) or not op:
                raise errors.InvalidArgument(f"an operation must be a non-empty tuple, got {op!r:.80}")
            handler = self._handlers.get(op[0]) if isinstance(op[0], int) else None
            if handler is None:
                raise errors.InvalidArgument(f"unknown operation code {op[0]!r}")
            try:
                result, done = handler(self, txn, now, streams, *op[1:])
            except errors.TStreamsError:
                raise
            except (TypeError, ValueError, struct.error) as exc:
                raise errors.InvalidArgument(f"bad arguments for {O.describe(op)}: {exc}") from None
            results.append(result)
            resolved.append(done)
        return results, resolved

    # -- helpers ---------------------------------------------------------------------
    def _stream(self, txn: lmdb.Transaction, streams: dict, name: Any) -> StreamInfo:
        info = streams.get(name) if isinstance(name, str) else None
        if info is None:
            info = lookup_stream(txn, self.store, name)
            streams[name] = info
        return info

    def _open_state(self, txn, info: StreamInfo, partition: int, txn_id: Any, now: int):
        """Return (key, state tuple) of an open, unexpired transaction or raise."""
        check_int(txn_id, "transaction id", 0, 2**63 - 1)
        key = keys.txn_key(info.id, partition, txn_id)
        raw = txn.get(key, db=self.store.txns)
        if raw is None:
            raise errors.TransactionNotFound(
                f"transaction {txn_id} does not exist in {info.name!r} partition {partition}"
            )
        state = keys.STATE.unpack(raw)
        if state[0] == O.INVALID:  # expired, and a reader already passed over it
            raise errors.TransactionExpired(
                f"transaction {txn_id} in {info.name!r} partition {partition} expired "
                "(its producer stopped keeping it alive)"
            )
        if state[0] != O.OPENED:
            raise errors.TransactionFinished(
                f"transaction {txn_id} in {info.name!r} partition {partition} is already "
                f"{_STATE_NAMES.get(state[0], state[0])}"
            )
        if state[1] <= now:
            raise errors.TransactionExpired(
                f"transaction {txn_id} in {info.name!r} partition {partition} expired "
                f"{now - state[1]} ms ago (its producer stopped keeping it alive)"
            )
        return key, state

    def _delete_chunks(self, txn, info: StreamInfo, partition: int, txn_id: int, chunks: int) -> None:
        for c in range(chunks):
            txn.delete(keys.chunk_key(info.id, partition, txn_id, c), db=self.store.data)

    def _allocate(self, txn, info: StreamInfo, partition: int, now: int, given: Any) -> int:
        pkey = keys.part_key(info.id, partition)
        raw = txn.get(pkey, db=self.store.parts)
        last = keys.U64.unpack(raw)[0] if raw else 0
        if given is None:
            txn_id = max(now * ID_MULTIPLIER, last + 1)
        else:  # replaying a resolved op
            txn_id = check_int(given, "transaction id", 1, 2**63 - 1)
        if txn_id > last:
            txn.put(pkey, keys.U64.pack(txn_id), db=self.store.parts)
        return txn_id

    # -- operations ------------------------------------------------------------------
    def _create_stream(self, txn, now, streams, name, partitions, ttl, description=""):
        check_name(name)
        check_int(partitions, "partitions", 1, MAX_PARTITIONS)
        check_int(ttl, "ttl (seconds)", 1, MAX_STREAM_TTL)
        if not isinstance(description, str) or len(description) > 4096:
            raise errors.InvalidArgument("description must be a string of at most 4096 characters")
        kname = name.encode("utf-8")
        if txn.get(kname, db=self.store.streams) is not None:
            raise errors.StreamExists(f"stream {name!r} already exists")
        raw = txn.get(b"next_stream_id", db=self.store.meta)
        sid = keys.U64.unpack(raw)[0] if raw else 1
        txn.put(b"next_stream_id", keys.U64.pack(sid + 1), db=self.store.meta)
        txn.put(kname, msgpack.packb([sid, partitions, ttl, description, now]), db=self.store.streams)
        info = StreamInfo(name, sid, partitions, ttl, description, now)
        streams[name] = info
        return info.to_wire(), (O.CREATE_STREAM, name, partitions, ttl, description)

    def _delete_stream(self, txn, now, streams, name):
        info = self._stream(txn, streams, name)
        txn.delete(name.encode("utf-8"), db=self.store.streams)
        prefix = keys.stream_prefix(info.id)
        for db in (self.store.parts, self.store.txns, self.store.data, self.store.offsets):
            cur = txn.cursor(db=db)
            if cur.set_range(prefix):
                while cur.key()[: len(prefix)] == prefix:
                    if not cur.delete():
                        break
        streams.pop(name, None)
        return None, (O.DELETE_STREAM, name)

    def _open(self, txn, now, streams, stream, partition, ttl_ms, txn_id=None, deadline=None, chunk=None):
        info = self._stream(txn, streams, stream)
        check_partition(info, partition)
        check_int(ttl_ms, "transaction ttl (ms)", 1, MAX_TXN_TTL_MS)
        n = chunk_count(chunk, self.max_item_size) if chunk is not None else 0
        txn_id = self._allocate(txn, info, partition, now, txn_id)
        deadline = now + ttl_ms if deadline is None else deadline
        if n:
            txn.put(keys.chunk_key(info.id, partition, txn_id, 0), bytes(chunk), db=self.store.data)
        txn.put(keys.txn_key(info.id, partition, txn_id), keys.STATE.pack(O.OPENED, deadline, 1 if n else 0, n),
                db=self.store.txns)
        return txn_id, (O.OPEN, stream, partition, ttl_ms, txn_id, deadline, chunk)

    def _data(self, txn, now, streams, stream, partition, txn_id, chunk):
        info = self._stream(txn, streams, stream)
        check_partition(info, partition)
        key, (_, deadline, chunks, items) = self._open_state(txn, info, partition, txn_id, now)
        n = chunk_count(chunk, self.max_item_size)
        if n:
            txn.put(keys.chunk_key(info.id, partition, txn_id, chunks), bytes(chunk), db=self.store.data)
            txn.put(key, keys.STATE.pack(O.OPENED, deadline, chunks + 1, items + n), db=self.store.txns)
        return items + n, (O.DATA, stream, partition, txn_id, chunk)

    def _checkpoint(self, txn, now, streams, stream, partition, txn_id, chunk=None):
        info = self._stream(txn, streams, stream)
        check_partition(info, partition)
        key, (_, _, chunks, items) = self._open_state(txn, info, partition, txn_id, now)
        if chunk is not None:
            n = chunk_count(chunk, self.max_item_size)
            if n:
                txn.put(keys.chunk_key(info.id, partition, txn_id, chunks), bytes(chunk), db=self.store.data)
                chunks += 1
                items += n
        if items == 0:  # checkpointing an empty transaction cancels it
            txn.put(key, keys.STATE.pack(O.CANCELLED, 0, 0, 0), db=self.store.txns)
        else:
            txn.put(key, keys.STATE.pack(O.CHECKPOINTED, 0, chunks, items), db=self.store.txns)
        return items, (O.CHECKPOINT, stream, partition, txn_id, chunk)

    def _cancel(self, txn, now, streams, stream, partition, txn_id, *, strict=True):
        info = self._stream(txn, streams, stream)
        check_partition(info, partition)
        check_int(txn_id, "transaction id", 0, 2**63 - 1)
        key = keys.txn_key(info.id, partition, txn_id)
        raw = txn.get(key, db=self.store.txns)
        if raw is None:
            if strict:
                raise errors.TransactionNotFound(
                    f"transaction {txn_id} does not exist in {info.name!r} partition {partition}"
                )
            return False
        state, deadline, chunks, _ = keys.STATE.unpack(raw)
        if state != O.OPENED:
            if strict:
                raise errors.TransactionFinished(
                    f"transaction {txn_id} in {info.name!r} partition {partition} is already "
                    f"{_STATE_NAMES.get(state, state)}"
                )
            return False
        self._delete_chunks(txn, info, partition, txn_id, chunks)
        final = O.CANCELLED if deadline > now else O.INVALID
        txn.put(key, keys.STATE.pack(final, 0, 0, 0), db=self.store.txns)
        return True

    def _cancel_op(self, txn, now, streams, stream, partition, txn_id):
        self._cancel(txn, now, streams, stream, partition, txn_id)
        return None, (O.CANCEL, stream, partition, txn_id)

    def _cancel_if_open(self, txn, now, streams, stream, partition, txn_id):
        done = self._cancel(txn, now, streams, stream, partition, txn_id, strict=False)
        return done, (O.CANCEL_IF_OPEN, stream, partition, txn_id)

    def _instant(self, txn, now, streams, stream, partition, chunk, txn_id=None):
        info = self._stream(txn, streams, stream)
        check_partition(info, partition)
        n = chunk_count(chunk, self.max_item_size)
        if n == 0:
            raise errors.InvalidArgument("an instant transaction needs at least one item")
        txn_id = self._allocate(txn, info, partition, now, txn_id)
        txn.put(keys.txn_key(info.id, partition, txn_id), keys.STATE.pack(O.CHECKPOINTED, 0, 1, n),
                db=self.store.txns)
        txn.put(keys.chunk_key(info.id, partition, txn_id, 0), bytes(chunk), db=self.store.data)
        return txn_id, (O.INSTANT, stream, partition, chunk, txn_id)

    def _keepalive(self, txn, now, streams, targets, ttl_ms, deadline=None):
        check_int(ttl_ms, "transaction ttl (ms)", 1, MAX_TXN_TTL_MS)
        if not isinstance(targets, (list, tuple)):
            raise errors.InvalidArgument("keep-alive targets must be a list of (stream, partition, txn id)")
        deadline = now + ttl_ms if deadline is None else deadline
        alive = 0
        for target in targets:
            stream, partition, txn_id = target
            try:
                info = self._stream(txn, streams, stream)
            except errors.StreamNotFound:
                continue
            if not isinstance(partition, int) or not 0 <= partition < info.partitions:
                continue
            key = keys.txn_key(info.id, partition, txn_id)
            raw = txn.get(key, db=self.store.txns)
            if raw is None:
                continue
            state, old, chunks, items = keys.STATE.unpack(raw)
            if state == O.OPENED and old > now:
                txn.put(key, keys.STATE.pack(O.OPENED, max(old, deadline), chunks, items), db=self.store.txns)
                alive += 1
        return alive, (O.KEEPALIVE, [list(t) for t in targets], ttl_ms, deadline)

    def _invalidate(self, txn, now, streams, stream, partition, txn_id):
        info = self._stream(txn, streams, stream)
        check_partition(info, partition)
        check_int(txn_id, "transaction id", 0, 2**63 - 1)
        key = keys.txn_key(info.id, partition, txn_id)
        raw = txn.get(key, db=self.store.txns)
        done = False
        if raw is not None:
            state, deadline, chunks, _ = keys.STATE.unpack(raw)
            if state == O.OPENED and deadline <= now:
                self._delete_chunks(txn, info, partition, txn_id, chunks)
                txn.put(key, keys.STATE.pack(O.INVALID, 0, 0, 0), db=self.store.txns)
                done = True
        return done, (O.INVALIDATE, stream, partition, txn_id)

    def _set_offsets(self, txn, now, streams, stream, consumer, offsets):
        info = self._stream(txn, streams, stream)
        check_name(consumer, "consumer name")
        if not isinstance(offsets, dict):
            raise errors.InvalidArgument("offsets must be a mapping of partition to transaction id")
        puts = []
        for partition, txn_id in offsets.items():
            check_partition(info, partition)
            check_int(txn_id, "offset", 0, 2**63 - 1)
            puts.append((keys.offset_key(info.id, consumer, partition), keys.U64.pack(txn_id)))
        for k, v in puts:
            txn.put(k, v, db=self.store.offsets)
        return None, (O.SET_OFFSETS, stream, consumer, dict(offsets))

    def _compact(self, txn, now, streams, stream, partition, before_id):
        info = self._stream(txn, streams, stream)
        check_partition(info, partition)
        check_int(before_id, "before_id", 0, 2**63 - 1)
        prefix = keys.part_key(info.id, partition)
        end = keys.txn_key(info.id, partition, before_id)
        removed = 0
        cur = txn.cursor(db=self.store.txns)
        if cur.set_range(prefix):
            while True:
                k = cur.key()
                if k[: keys.PART_LEN] != prefix or k >= end:
                    break
                _, _, chunks, _ = keys.STATE.unpack(cur.value())
                self._delete_chunks(txn, info, partition, keys.txn_id_of(k), chunks)
                removed += 1
                if not cur.delete():
                    break
        return removed, (O.COMPACT, stream, partition, before_id)

    def _set_marker(self, txn, now, streams, key, value, guard=False):
        check_name(key, "marker name")
        check_int(value, "marker value", -(2**63), 2**63 - 1)
        kb = key.encode("utf-8")
        raw = txn.get(kb, db=self.store.markers)
        if guard and raw is not None and keys.I64.unpack(raw)[0] >= value:
            raise errors.MarkerConflict(f"marker {key!r} is already at {keys.I64.unpack(raw)[0]} >= {value}")
        txn.put(kb, keys.I64.pack(value), db=self.store.markers)
        return None, (O.SET_MARKER, key, value, bool(guard))

    _handlers = {
        O.CREATE_STREAM: _create_stream,
        O.DELETE_STREAM: _delete_stream,
        O.OPEN: _open,
        O.DATA: _data,
        O.CHECKPOINT: _checkpoint,
        O.CANCEL: _cancel_op,
        O.CANCEL_IF_OPEN: _cancel_if_open,
        O.INSTANT: _instant,
        O.KEEPALIVE: _keepalive,
        O.INVALIDATE: _invalidate,
        O.SET_OFFSETS: _set_offsets,
        O.COMPACT: _compact,
        O.SET_MARKER: _set_marker,
    }


_STATE_NAMES = {O.OPENED: "open", O.CANCELLED: "cancelled", O.INVALID: "invalid", O.CHECKPOINTED: "checkpointed"}
