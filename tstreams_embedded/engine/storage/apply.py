"""Applying operation records to an LMDB write transaction.

:meth:`Applier.apply_batch` is the single place where stored state changes. It dispatches
each record to the handler registered for its type with ``@handles(Record)``, which
validates it, applies it, and returns ``(result, resolved record)``: the record with every
clock- or state-dependent value (a new transaction ID, a deadline) written in, for the
commit log. Any error raises before the caller commits, so a failed batch leaves no partial
write.

Two origins of batches:

* **submitted** (``replay=False``): clients and the engine itself. Resolved fields must be
  ``None`` (:func:`..protocol.ops.check_client_batch` enforces it at the client entry point); the
  handlers compute them.
* **replayed** (``replay=True``): resolved records from a commit log (a replica catching
  up, see ``Core.apply_log``). The handlers take the resolved values as given, so the
  replica reaches the same state.
"""

from __future__ import annotations

from typing import Any

from crc32c import crc32c

from ... import errors
from ..protocol import ops as O
from ..protocol import queuestate, schedules
from ..protocol.backend import StreamInfo
from ..protocol.ops import TxnState
from ..protocol.validate import (
    check_int,
    check_name,
    check_partition,
    check_producer_name,
    check_stream_shape,
    check_txn_id,
    check_txn_ttl_ms,
)
from . import expiry, keys, seals
from . import state_stores as state
from .apply_base import HANDLERS, ID_FLOOR, NEXT_SCHEDULE_ID, NEXT_STREAM_ID, Applier, BatchScope, handles, new_record
from .catalog import encode_stream
from .store import as_bytes

_SCHEDULES = state.prefix(schedules.NAMESPACE)


@handles(O.CreateStream)
def _create_stream(a: Applier, scope: BatchScope, op: O.CreateStream) -> tuple[Any, O.CreateStream]:
    check_name(op.name)
    check_stream_shape(op.partitions, op.ttl, op.description)
    txn = scope.txn
    kname = op.name.encode("utf-8")
    if txn.get(kname, db=a.store.streams) is not None:
        raise errors.StreamExists(f"stream {op.name!r} already exists")
    raw = a.store.get(txn, "meta", NEXT_STREAM_ID)
    sid = keys.U64.unpack(raw)[0] if raw else 1
    a.store.put(txn, "meta", NEXT_STREAM_ID, keys.U64.pack(sid + 1))
    info = StreamInfo(op.name, sid, op.partitions, op.ttl, op.description, scope.now)
    a.store.put(txn, "streams", kname, encode_stream(info))
    scope.streams[op.name] = info
    return info.to_wire(), op


@handles(O.DeleteStream)
def _delete_stream(a: Applier, scope: BatchScope, op: O.DeleteStream) -> tuple[None, O.DeleteStream]:
    info = a.stream_info(scope, op.name)
    txn = scope.txn
    if scope.unwritten:
        a.write_last_ids(scope)  # the scan below reads `parts` (the ID floor)
    txn.delete(op.name.encode("utf-8"), db=a.store.streams)
    prefix = keys.stream_prefix(info.id)
    raw = a.store.get(txn, "meta", ID_FLOOR)
    floor = high = keys.U64.unpack(raw)[0] if raw else 0
    for db in (a.store.parts, a.store.txns, a.store.data, a.store.offsets):
        cur = txn.cursor(db=db)
        if cur.set_range(prefix):
            while cur.key()[: len(prefix)] == prefix:
                if db is a.store.parts:
                    high = max(high, keys.U64.unpack(a.store.unseal("parts", as_bytes(cur.key()),
                                                                    as_bytes(cur.value())))[0])
                if not cur.delete():
                    break
    if high > floor:  # IDs never repeat in a partition, even if the name is created again
        a.store.put(txn, "meta", ID_FLOOR, keys.U64.pack(high))
    if a.store.queues is not None:  # its work queue groups
        cur = txn.cursor(db=a.store.queues)
        for qprefix in queuestate.stream_prefixes(info.id):
            if cur.set_range(qprefix):
                while cur.key()[: len(qprefix)] == qprefix:
                    if not cur.delete():
                        break
    expiry.forget(txn, a.store, info.id)
    scope.streams.pop(op.name, None)
    scope.last_ids.clear()  # its partitions' entries are gone from `parts`
    return None, op


@handles(O.Open)
def _open(a: Applier, scope: BatchScope, op: O.Open) -> tuple[int, O.Open]:
    info = a.partition_info(scope, op.stream, op.partition, op.stream_id)
    check_txn_ttl_ms(op.ttl_ms)
    n = a.count_items(scope, op.chunk) if op.chunk is not None else 0
    txn_id = a.allocate(scope, info, op.partition, op.txn_id)
    deadline = a.deadline(scope, op.ttl_ms, op.deadline)
    producer = check_producer_name(op.producer) if op.producer is not None else b""
    logged = a.put_chunk(scope, info, op.partition, txn_id, 0, op.chunk, n) if n else None
    a.put_state(scope, keys.txn_key(info.id, op.partition, txn_id), TxnState.OPENED, deadline, 1 if n else 0, n,
                producer)
    return txn_id, O.Open(op.stream, op.partition, op.ttl_ms, txn_id, deadline, logged, op.stream_id, op.producer)


@handles(O.Data)
def _data(a: Applier, scope: BatchScope, op: O.Data) -> tuple[int, O.Data]:
    info = a.partition_info(scope, op.stream, op.partition, op.stream_id)
    key, (_, deadline, chunks, items), producer = a.open_state(scope, info, op.partition, op.txn_id)
    n = a.count_items(scope, op.chunk)
    if not n:
        return items, op
    logged = a.put_chunk(scope, info, op.partition, op.txn_id, chunks, op.chunk, n)
    a.put_state(scope, key, TxnState.OPENED, deadline, chunks + 1, items + n, producer)
    return items + n, O.Data(op.stream, op.partition, op.txn_id, logged, op.stream_id)


@handles(O.Checkpoint)
def _checkpoint(a: Applier, scope: BatchScope, op: O.Checkpoint) -> tuple[int, O.Checkpoint]:
    info = a.partition_info(scope, op.stream, op.partition, op.stream_id)
    key, (_, _, chunks, items), _ = a.open_state(scope, info, op.partition, op.txn_id)
    logged = None
    if op.chunk is not None:
        n = a.count_items(scope, op.chunk)
        if n:
            logged = a.put_chunk(scope, info, op.partition, op.txn_id, chunks, op.chunk, n)
            chunks += 1
            items += n
    if items == 0:  # checkpointing an empty transaction cancels it
        a.put_state(scope, key, TxnState.CANCELLED, 0, 0, 0)
    else:
        a.put_state(scope, key, TxnState.CHECKPOINTED, scope.now, chunks, items)  # stamped: when checkpointed
    return items, O.Checkpoint(op.stream, op.partition, op.txn_id, logged, op.stream_id)


@handles(O.Cancel)
def _cancel(a: Applier, scope: BatchScope, op: O.Cancel) -> tuple[None, O.Cancel]:
    a.cancel(scope, op.stream, op.partition, op.txn_id, strict=True, stream_id=op.stream_id)
    return None, op


@handles(O.CancelIfOpen)
def _cancel_if_open(a: Applier, scope: BatchScope, op: O.CancelIfOpen) -> tuple[bool, O.CancelIfOpen]:
    return a.cancel(scope, op.stream, op.partition, op.txn_id, strict=False, stream_id=op.stream_id), op


@handles(O.Instant)
def _instant(a: Applier, scope: BatchScope, op: O.Instant) -> tuple[int, O.Instant]:
    info = a.partition_info(scope, op.stream, op.partition, op.stream_id)
    n = a.count_items(scope, op.chunk)
    if n == 0:
        raise errors.InvalidArgument("an instant transaction needs at least one item")
    txn_id = a.allocate(scope, info, op.partition, op.txn_id)
    a.put_state(scope, keys.txn_key(info.id, op.partition, txn_id), TxnState.CHECKPOINTED, scope.now, 1, n)
    logged = a.put_chunk(scope, info, op.partition, txn_id, 0, op.chunk, n)
    # (every field given: tuple.__new__ skips the record's Python-level __new__ and its defaults)
    return txn_id, new_record(O.Instant, (op.stream, op.partition, logged, txn_id, op.stream_id))


@handles(O.KeepAlive)
def _keepalive(a: Applier, scope: BatchScope, op: O.KeepAlive) -> tuple[int, O.KeepAlive]:
    check_txn_ttl_ms(op.ttl_ms)
    if not isinstance(op.targets, (list, tuple)):
        raise errors.InvalidArgument("keep-alive targets must be a list of (stream, partition, txn id)")
    deadline = a.deadline(scope, op.ttl_ms, op.deadline)
    alive = 0
    txn = scope.txn
    for target in op.targets:
        if not isinstance(target, (list, tuple)) or len(target) not in (3, 4):
            raise errors.InvalidArgument("a keep-alive target is (stream, partition, txn id[, stream id])")
        stream, partition, txn_id = target[:3]
        check_name(stream, "keep-alive target stream name")  # an unknown stream is skipped, a bad name is not
        check_txn_id(txn_id)
        try:
            info = a.stream_info(scope, stream, target[3] if len(target) == 4 else None)
        except errors.StreamNotFound:
            continue
        if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < info.partitions:
            continue
        key = keys.txn_key(info.id, partition, txn_id)
        raw = a.store.get(txn, "txns", key)
        if raw is None:
            continue
        state, old, chunks, items = keys.STATE.unpack_from(raw)
        if state == TxnState.OPENED and old > scope.now:
            a.put_state(scope, key, TxnState.OPENED, max(old, deadline), chunks, items, bytes(raw[keys.STATE_LEN:]))
            alive += 1
    return alive, op._replace(targets=[list(t) for t in op.targets], deadline=deadline)


@handles(O.Invalidate)
def _invalidate(a: Applier, scope: BatchScope, op: O.Invalidate) -> tuple[bool, O.Invalidate]:
    info = a.partition_info(scope, op.stream, op.partition, op.stream_id)
    check_txn_id(op.txn_id)
    key = keys.txn_key(info.id, op.partition, op.txn_id)
    raw = a.store.get(scope.txn, "txns", key)
    done = False
    if raw is not None:
        state, deadline, chunks, _ = keys.STATE.unpack_from(raw)
        if state == TxnState.OPENED and deadline <= scope.now:
            a.delete_chunks(scope.txn, info, op.partition, op.txn_id, chunks)
            a.put_state(scope, key, TxnState.INVALID, 0, 0, 0)
            done = True
    return done, op


@handles(O.SetOffsets)
def _set_offsets(a: Applier, scope: BatchScope, op: O.SetOffsets) -> tuple[None, O.SetOffsets]:
    info = a.stream_info(scope, op.stream, op.stream_id)
    check_name(op.consumer, "consumer name")
    if not isinstance(op.offsets, dict):
        raise errors.InvalidArgument("offsets must be a mapping of partition to transaction id")
    puts = []
    for partition, txn_id in op.offsets.items():
        check_partition(info, partition)
        check_txn_id(txn_id, "offset")
        puts.append((keys.offset_key(info.id, op.consumer, partition), keys.U64.pack(txn_id)))
    for k, v in puts:
        a.store.put(scope.txn, "offsets", k, v)
    return None, op._replace(offsets=dict(op.offsets))


def _stored_offsets(a: Applier, scope: BatchScope, info: StreamInfo, consumer: str) -> dict[bytes, int]:
    """A consumer's stored offsets in the write transaction: offset key -> txn id."""
    prefix = keys.offsets_prefix(info.id, consumer)
    out: dict[bytes, int] = {}
    cur = scope.txn.cursor(db=a.store.offsets)
    if cur.set_range(prefix):
        while True:
            k = as_bytes(cur.key())
            if not k.startswith(prefix) or len(k) != len(prefix) + 4:
                break
            out[k] = keys.U64.unpack(a.store.unseal("offsets", k, as_bytes(cur.value())))[0]
            if not cur.next():
                break
    return out


@handles(O.DeleteConsumer)
def _delete_consumer(a: Applier, scope: BatchScope, op: O.DeleteConsumer) -> tuple[int, O.DeleteConsumer]:
    info = a.stream_info(scope, op.stream, op.stream_id)
    check_name(op.consumer, "consumer name")
    stored = _stored_offsets(a, scope, info, op.consumer)
    for k in stored:
        scope.txn.delete(k, db=a.store.offsets)
    if stored:
        expiry.forget(scope.txn, a.store, info.id, op.consumer)
    return len(stored), op


@handles(O.ResetOffsets)
def _reset_offsets(a: Applier, scope: BatchScope, op: O.ResetOffsets) -> tuple[None, O.ResetOffsets]:
    info = a.stream_info(scope, op.stream, op.stream_id)
    check_name(op.consumer, "consumer name")
    wanted: dict[str, dict[int, int]] = {}
    for what, given in (("expected", op.expected), ("offsets", op.offsets)):
        if not isinstance(given, dict):
            raise errors.InvalidArgument(f"{what} must be a mapping of partition to transaction id")
        for partition, txn_id in given.items():
            check_partition(info, partition)
            check_txn_id(txn_id, "offset")
        wanted[what] = dict(given)
    stored = {keys.partition_of_offset_key(k): v for k, v in _stored_offsets(a, scope, info, op.consumer).items()}
    if stored != wanted["expected"]:
        raise errors.OffsetsConflict(
            f"the offsets of consumer {op.consumer!r} on {op.stream!r} changed since they were read "
            f"(expected {wanted['expected']}, stored {stored}); stop the consumer and try again"
        )
    for partition, txn_id in wanted["offsets"].items():
        a.store.put(scope.txn, "offsets", keys.offset_key(info.id, op.consumer, partition), keys.U64.pack(txn_id))
    return None, op._replace(expected=wanted["expected"], offsets=wanted["offsets"])


@handles(O.Compact)
def _compact(a: Applier, scope: BatchScope, op: O.Compact) -> tuple[int, O.Compact]:
    info = a.partition_info(scope, op.stream, op.partition, op.stream_id)
    check_txn_id(op.before_id, "before_id")
    prefix = keys.part_key(info.id, op.partition)
    end = keys.txn_key(info.id, op.partition, op.before_id)
    removed = 0
    readers = expiry.readers(scope.txn, a.store, info, op.partition)
    unread = dict.fromkeys(readers, 0)
    cur = scope.txn.cursor(db=a.store.txns)
    if cur.set_range(prefix):
        while True:
            k = as_bytes(cur.key())
            if k[: keys.PART_LEN] != prefix or k >= end:
                break
            txn_state, _, chunks, items = keys.STATE.unpack_from(a.store.unseal("txns", k, as_bytes(cur.value())))
            txn_id = keys.txn_id_of(k)
            if txn_state == TxnState.CHECKPOINTED and items:
                for consumer, offset in readers.items():
                    if txn_id > offset:
                        unread[consumer] += items
            a.delete_chunks(scope.txn, info, op.partition, txn_id, chunks)
            removed += 1
            if not cur.delete():
                break
    expiry.count(scope.txn, a.store, info, op.partition, unread)
    return removed, op


@handles(O.SetMarker)
def _set_marker(a: Applier, scope: BatchScope, op: O.SetMarker) -> tuple[None, O.SetMarker]:
    check_name(op.key, "marker name")
    check_int(op.value, "marker value", -(2**63), 2**63 - 1)
    kb = op.key.encode("utf-8")
    raw = a.store.get(scope.txn, "markers", kb)
    if op.guard and raw is not None and keys.I64.unpack(raw)[0] >= op.value:
        raise errors.MarkerConflict(f"marker {op.key!r} is already at {keys.I64.unpack(raw)[0]} >= {op.value}")
    a.store.put(scope.txn, "markers", kb, keys.I64.pack(op.value))
    return None, op._replace(guard=bool(op.guard))


def _not_reserved(store: Any) -> bytes:
    """The key prefix of state store ``store``; InvalidArgument for the schedules' namespace."""
    pfx = state.prefix(store)
    if pfx == _SCHEDULES:
        raise errors.InvalidArgument(f"store {store!r} is reserved for scheduled delivery (engine.schedule)")
    return pfx


@handles(O.StoreWrite)
def _store_write(a: Applier, scope: BatchScope, op: O.StoreWrite) -> tuple[None, O.StoreWrite]:
    pfx = _not_reserved(op.store)
    db = a.store.state
    puts = _pairs(op.puts, "puts")
    deletes = op.deletes if op.deletes is not None else []
    ranges = _pairs(op.delete_ranges if op.delete_ranges is not None else [], "delete_ranges", bounds=True)
    if not isinstance(deletes, (list, tuple)):
        raise errors.InvalidArgument("deletes must be a list of keys")
    for k, v in puts:
        state.check_key(k)
        state.check_value(v, a.max_item_size)
    for k in deletes:
        state.check_key(k)
    for lo, hi in ranges:
        state.check_key(lo, "range start")
        if hi is not None:
            state.check_key(hi, "range end")
    txn = scope.txn
    n = len(pfx)
    for lo, hi in ranges:
        cur = txn.cursor(db=db)
        end = pfx + hi if hi is not None else None
        if cur.set_range(pfx + lo):
            while True:
                k = as_bytes(cur.key())
                if k[:n] != pfx or (end is not None and k >= end):
                    break
                if not cur.delete():
                    break
    for k in deletes:
        txn.delete(pfx + k, db=db)
    sealed = a.store.sealed
    for k, v in puts:
        key = pfx + k
        # seals.seal, inlined (a state-store write is a hot path)
        txn.put(key, v + crc32c(v, crc32c(key)).to_bytes(seals.SEAL_LEN, "little") if sealed else v, db=db)
    return None, O.StoreWrite(op.store, [list(p) for p in puts], list(deletes) or None,
                              [list(r) for r in ranges] or None)


def _lease_args(op: O.Lease | O.CheckLease) -> tuple[bytes, bytes]:
    """Validate a lease record's address and owner; return (LMDB key, key)."""
    key = state.check_key(op.key, "lease key")
    if not isinstance(op.owner, str) or len(op.owner) > 255:
        raise errors.InvalidArgument(f"lease owner must be a str of at most 255 characters, got {op.owner!r:.60}")
    check_int(op.epoch, "lease epoch", 0, 2**62)
    return _not_reserved(op.store) + key, key


@handles(O.Lease)
def _lease(a: Applier, scope: BatchScope, op: O.Lease) -> tuple[int, O.Lease]:
    kb, key = _lease_args(op)
    ttl = check_int(op.ttl_ms, "lease ttl_ms", 0, 2**40)
    if not isinstance(op.force, bool):
        raise errors.InvalidArgument(f"lease force must be a bool, got {type(op.force).__name__}")
    if not op.owner:
        raise errors.InvalidArgument("lease owner must not be empty")
    if scope.replay and op.deadline is not None:
        deadline = check_int(op.deadline, "lease deadline", 0, 2**62)
    else:
        current = state.unpack_lease(a.store.get(scope.txn, "state", kb)) or state.LeaseRecord("", 0, 0)
        owner, epoch, held_until = current
        if current.held_by(op.owner, op.epoch) and op.epoch > 0:
            pass  # renew or release
        elif ttl == 0:
            raise errors.LeaseConflict(f"lease {key!r} of {op.store!r} is not held by {op.owner!r} at epoch "
                                       f"{op.epoch} (it is {owner!r} at {epoch}); nothing to release")
        elif op.epoch != epoch + 1:
            raise errors.LeaseConflict(f"lease {key!r} of {op.store!r} is at epoch {epoch}: taking it needs epoch "
                                       f"{epoch + 1}, got {op.epoch}")
        elif owner and held_until > scope.now and not op.force:
            raise errors.LeaseConflict(f"lease {key!r} of {op.store!r} is held by {owner!r} for another "
                                       f"{held_until - scope.now} ms")
        deadline = scope.now + ttl if ttl else 0
    a.store.put(scope.txn, "state", kb, state.pack_lease(op.owner if ttl else "", op.epoch, deadline))
    return deadline, op._replace(force=bool(op.force), deadline=deadline)


@handles(O.CheckLease)
def _check_lease(a: Applier, scope: BatchScope, op: O.CheckLease) -> tuple[None, O.CheckLease]:
    kb, key = _lease_args(op)
    if not scope.replay:
        current = state.unpack_lease(a.store.get(scope.txn, "state", kb))
        if current is None or not current.held_by(op.owner, op.epoch):
            held = "nobody" if current is None else f"{current.owner or 'nobody (released)'!r} at epoch {current.epoch}"
            raise errors.LeaseConflict(f"lease {key!r} of {op.store!r} is no longer {op.owner!r} at epoch "
                                       f"{op.epoch}: it is {held}; the fenced write was refused")
    return None, op


@handles(O.Schedule)
def _schedule(a: Applier, scope: BatchScope, op: O.Schedule) -> tuple[int, O.Schedule]:
    info = a.partition_info(scope, op.stream, op.partition, op.stream_id)
    if (op.at_ms is None) == (op.delay_ms is None):
        raise errors.InvalidArgument("a schedule needs exactly one of at_ms and delay_ms")
    n = a.count_items(scope, op.chunk)
    if n == 0:
        raise errors.InvalidArgument("a schedule needs at least one item")
    if type(op.chunk) is not bytes:
        raise errors.InvalidArgument("a schedule's items must be a packed chunk (bytes)")
    if scope.replay and op.schedule_id is not None:
        sid = check_int(op.schedule_id, "schedule id", 1, 2**63 - 1)
        due = check_int(op.due_ms, "due_ms", 0, schedules.MAX_DUE_MS)
        created = check_int(op.created_ms, "created_ms", 0, 2**63 - 1)
    else:
        if op.at_ms is not None:
            due = check_int(op.at_ms, "at_ms", 0, schedules.MAX_DUE_MS)
        else:
            due = scope.now + check_int(op.delay_ms, "delay_ms", 0, schedules.MAX_DUE_MS)
            if due > schedules.MAX_DUE_MS:
                raise errors.InvalidArgument(f"the schedule would be due after the year 9999 ({due} ms)")
        raw = a.store.get(scope.txn, "meta", NEXT_SCHEDULE_ID)
        sid = keys.U64.unpack(raw)[0] if raw else 1
        created = scope.now
    a.store.put(scope.txn, "meta", NEXT_SCHEDULE_ID, keys.U64.pack(sid + 1))
    a.store.put(scope.txn, "state", _SCHEDULES + schedules.due_key(due, sid),
                schedules.pack_schedule(info.name, op.partition, info.id, op.chunk, created))
    a.store.put(scope.txn, "state", _SCHEDULES + schedules.id_key(sid), schedules.pack_due(due))
    return sid, op._replace(schedule_id=sid, due_ms=due, created_ms=created, stream_id=info.id)


def _pending(a: Applier, scope: BatchScope, schedule_id: Any) -> tuple[int, bytes, bytes] | None:
    """``(due_ms, due-key, id-key)`` of a pending schedule (None: none with that ID)."""
    sid = schedules.check_schedule_id(schedule_id)
    ikey = _SCHEDULES + schedules.id_key(sid)
    raw = a.store.get(scope.txn, "state", ikey)
    if raw is None:
        return None
    due = schedules.unpack_due(raw)
    return due, _SCHEDULES + schedules.due_key(due, sid), ikey


@handles(O.CancelSchedule)
def _cancel_schedule(a: Applier, scope: BatchScope, op: O.CancelSchedule) -> tuple[bool, O.CancelSchedule]:
    found = _pending(a, scope, op.schedule_id)
    if found is None:
        return False, op
    _, dkey, ikey = found
    scope.txn.delete(dkey, db=a.store.state)
    scope.txn.delete(ikey, db=a.store.state)
    return True, op


@handles(O.FireSchedule)
def _fire_schedule(a: Applier, scope: BatchScope, op: O.FireSchedule) -> tuple[int | None, O.FireSchedule]:
    found = _pending(a, scope, op.schedule_id)
    if found is None or (scope.replay and op.txn_id is None) or (not scope.replay and found[0] > scope.now):
        return None, op._replace(txn_id=None)
    _, dkey, ikey = found
    raw = a.store.get(scope.txn, "state", dkey)
    scope.txn.delete(dkey, db=a.store.state)
    scope.txn.delete(ikey, db=a.store.state)
    if raw is None:
        return None, op._replace(txn_id=None)
    stream, partition, stream_id, chunk, _ = schedules.unpack_schedule(raw)
    try:
        info = a.partition_info(scope, stream, partition, stream_id)
    except errors.StreamNotFound:  # deleted since: the schedule is dropped
        return None, op._replace(txn_id=None)
    txn_id = a.allocate(scope, info, partition, op.txn_id if scope.replay else None)
    n = a.count_items(scope, chunk)
    a.put_state(scope, keys.txn_key(info.id, partition, txn_id), TxnState.CHECKPOINTED, scope.now, 1, n)
    a.put_chunk(scope, info, partition, txn_id, 0, chunk, n)
    return txn_id, op._replace(txn_id=txn_id)


def _pairs(value: Any, what: str, bounds: bool = False) -> list[tuple[Any, Any]]:
    if not isinstance(value, (list, tuple)):
        raise errors.InvalidArgument(f"{what} must be a list of pairs")
    out = []
    for pair in value:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise errors.InvalidArgument(f"each of {what} must be a pair, got {pair!r:.60}")
        out.append((pair[0], pair[1]))
    return out


from . import queue_apply  # noqa: E402,F401  (registers the work queue records' handlers)

_missing = [r.__name__ for r in O.RECORDS if r not in HANDLERS]
if _missing:  # pragma: no cover - a declaration error, caught at import
    raise TypeError(f"operation records without an apply handler: {_missing}")
