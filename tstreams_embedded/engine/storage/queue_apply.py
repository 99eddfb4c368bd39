"""Apply handlers of the work queue records (:class:`~..protocol.ops.QueueDeclare`,
:class:`~..protocol.ops.QueueReceive`, :class:`~..protocol.ops.QueueSettle`); the layout they write is
described in :mod:`..protocol.queuestate`.

Everything a handler decides depends only on the stored state, the record and the batch's
clock (``scope.now``), so a replica replaying the commit log reaches the same state. A
receive's deliveries are logged (resolved) anyway: a replay recomputes them and refuses to
go on if they differ (:class:`~tstreams_embedded.errors.DataCorrupted`), which would mean
the replica's state is not the leader's.
"""

from __future__ import annotations

from typing import Any

import msgpack

from ... import errors
from ..protocol import ops as O
from ..protocol import queuestate as Q
from ..protocol.backend import StreamInfo
from ..protocol.ops import TxnState
from ..protocol.validate import check_int, check_name, check_partition, check_txn_id
from . import keys
from .apply_base import Applier, BatchScope, handles
from .reads import load_items, scan, ttl_floor
from .store import as_bytes, entries

#: the most items one receive hands out
MAX_RECEIVE_ITEMS = 10_000
#: transactions read per step of a receive's scan of one partition
_SCAN_STEP = 64


def load_config(a: Applier, scope: BatchScope, info: StreamInfo, group: str) -> Q.GroupConfig:
    raw = a.store.get(scope.txn, "queues", Q.group_key(info.id, group))
    return Q.check_not_declared(Q.GroupConfig.unpack(raw) if raw else None, info.name, group)


def _save_config(a: Applier, scope: BatchScope, info: StreamInfo, group: str, config: Q.GroupConfig) -> None:
    a.store.put(scope.txn, "queues", Q.group_key(info.id, group), config.pack())


# --------------------------------------------------------------------------- declare
@handles(O.QueueDeclare)
def _declare(a: Applier, scope: BatchScope, op: O.QueueDeclare) -> tuple[bool, O.QueueDeclare]:
    info = a.stream_info(scope, op.stream, op.stream_id)
    check_name(op.group, "group name")
    check_int(op.ack_timeout_ms, "ack_timeout_ms", 1, 7 * 86_400_000)
    check_int(op.max_deliveries, "max_deliveries", 1, 1_000_000)
    check_int(op.max_in_flight, "max_in_flight", 1, 10_000_000)
    if op.dead_letter is not None:
        check_name(op.dead_letter, "dead_letter stream name")
        if op.dead_letter == op.stream:
            raise errors.InvalidArgument("dead_letter must be another stream than the queue's own")
        a.stream_info(scope, op.dead_letter)  # StreamNotFound now, not at the first poison item
    if not isinstance(op.backoff_ms, (list, tuple)) or len(op.backoff_ms) > 100:
        raise errors.InvalidArgument("backoff_ms must be a list of at most 100 delays (ms)")
    backoff = [check_int(d, "backoff delay (ms)", 0, 7 * 86_400_000) for d in op.backoff_ms]
    raw = a.store.get(scope.txn, "queues", Q.group_key(info.id, op.group))
    old = Q.GroupConfig.unpack(raw) if raw else None
    config = Q.GroupConfig(op.ack_timeout_ms, op.max_deliveries, op.dead_letter, backoff, op.max_in_flight)
    if old is not None:
        config.rotation, config.counters = old.rotation, old.counters
    _save_config(a, scope, info, op.group, config)
    return old is None, op._replace(backoff_ms=backoff)


# --------------------------------------------------------------------------- receive
class _Receive:
    """One receive's work: what it hands out, dead-letters and counts."""

    def __init__(self, a: Applier, scope: BatchScope, info: StreamInfo, op: O.QueueReceive,
                 config: Q.GroupConfig) -> None:
        self.a, self.scope, self.info, self.op, self.config = a, scope, info, op, config
        self.out: list[list[Any]] = []
        self.bytes = 0
        self.in_flight = config.counters.get("in_flight", 0)
        self.prefix = Q.group_prefix(info.id, op.group)

    @property
    def full(self) -> bool:
        return len(self.out) >= self.op.max_items or (bool(self.out) and self.bytes >= self.op.max_bytes)

    def hand_out(self, partition: int, txn_id: int, index: int, deliveries: int, item: bytes) -> None:
        now, cfg = self.scope.now, self.config
        lock = now + cfg.ack_timeout_ms
        due = lock + cfg.backoff_for(deliveries)
        entry = Q.Entry(Q.EntryState.IN_FLIGHT, deliveries, lock, due, self.op.consumer)
        self.a.store.put(self.scope.txn, "queues", Q.entry_key_in(self.prefix, partition, txn_id, index),
                         entry.pack())
        self.a.store.put(self.scope.txn, "queues", Q.due_key_in(self.prefix, due, partition, txn_id, index), b"")
        self.out.append(Q.delivery_row(partition, txn_id, index, deliveries, lock, item))
        self.bytes += len(item)
        self.config.count("delivered")
        if deliveries > 1:
            self.config.count("redelivered")

    def redeliveries(self) -> None:
        """Items whose redelivery time has come, oldest first."""
        a, txn, sid, group = self.a, self.scope.txn, self.info.id, self.op.group
        prefix = Q.due_prefix(sid, group)
        cur = txn.cursor(db=a.store.queues)
        due: list[tuple[bytes, int, int, int]] = []
        if a.store.seek(cur, "queues", prefix):
            for k, _ in entries(cur.iternext()):
                if not k.startswith(prefix):
                    break
                at, partition, txn_id, index = Q.parse_due_key(k, len(prefix))
                if at > self.scope.now or len(due) >= self.op.max_items:
                    break
                due.append((as_bytes(k), partition, txn_id, index))
        for dkey, partition, txn_id, index in due:
            if self.full:
                break
            txn.delete(dkey, db=a.store.queues)
            ekey = Q.entry_key_in(self.prefix, partition, txn_id, index)
            raw = a.store.get(txn, "queues", ekey)
            if raw is None:  # pragma: no cover - the index and the entries change together
                raise errors.DataCorrupted(f"work queue {group!r}: redelivery index names a missing item")
            entry = Q.Entry.unpack(raw)
            if entry.state is Q.EntryState.IN_FLIGHT:
                self.in_flight -= 1  # its lock ran out
            item = _item(a, self.scope, self.info, partition, txn_id, index)
            if item is None:  # the transaction expired (stream TTL) or was deleted meanwhile
                txn.delete(ekey, db=a.store.queues)
                self.config.count("gone")
                continue
            if entry.deliveries >= self.config.max_deliveries:
                txn.delete(ekey, db=a.store.queues)
                _dead_letter(a, self.scope, self.info, self.op.group, self.config, partition, txn_id, index,
                             entry.deliveries, entry.error or "the ack timeout ran out", "max_deliveries", item)
                continue
            self.hand_out(partition, txn_id, index, entry.deliveries + 1, item)
            self.in_flight += 1

    def new_items(self) -> None:
        """Items never delivered, partition by partition from the group's rotation."""
        parts = self.info.partitions
        start = self.config.rotation % parts
        for step in range(parts):
            if self.full or self.in_flight >= self.config.max_in_flight:
                break
            self._from_partition((start + step) % parts)
        self.config.rotation = (start + 1) % parts

    def _stopped(self) -> bool:
        return self.full or self.in_flight >= self.config.max_in_flight

    def _from_partition(self, partition: int) -> None:
        a, scope, info, group = self.a, self.scope, self.info, self.op.group
        ckey = Q.cursor_key(info.id, group, partition)
        cursor = Q.Cursor.unpack(a.store.get(scope.txn, "queues", ckey))
        before = Q.Cursor(cursor.position, cursor.partial, cursor.index)
        while not self._stopped():
            s = scan(scope.txn, a.store, info.name, partition, cursor.position, 2**63 - 1, _SCAN_STEP, scope.now)
            for t in s.txns:
                index = cursor.index if t.id == cursor.partial else 0
                while index < len(t.items) and not self._stopped():
                    self.hand_out(partition, t.id, index, 1, t.items[index])
                    self.in_flight += 1
                    index += 1
                if index < len(t.items):  # stopped inside the transaction (or before it)
                    cursor.partial, cursor.index = t.id, index
                    break
                cursor.position, cursor.partial, cursor.index = t.id, 0, 0
            else:
                # also past the cancelled, invalid or TTL-expired transactions the scan passed
                cursor.position = max(cursor.position, s.position)
                if s.expired is not None:  # an open transaction past its deadline: invalidate it, go on
                    a.cancel(scope, info.name, partition, s.expired, strict=False, stream_id=info.id)
                    continue
                if not s.blocked and s.full:
                    continue
            break
        if cursor != before:
            a.store.put(scope.txn, "queues", ckey, cursor.pack())


@handles(O.QueueReceive)
def _receive(a: Applier, scope: BatchScope, op: O.QueueReceive) -> tuple[list[Any], O.QueueReceive]:
    info = a.stream_info(scope, op.stream, op.stream_id)
    check_name(op.group, "group name")
    check_name(op.consumer, "consumer name")
    check_int(op.max_items, "max_items", 1, MAX_RECEIVE_ITEMS)
    check_int(op.max_bytes, "max_bytes", 1, 2**40)
    config = load_config(a, scope, info, op.group)
    work = _Receive(a, scope, info, op, config)
    work.redeliveries()
    work.new_items()
    config.counters["in_flight"] = work.in_flight
    _save_config(a, scope, info, op.group, config)
    resolved = [row[:4] for row in work.out]
    if scope.replay and op.deliveries is not None and [list(r) for r in op.deliveries] != resolved:
        raise errors.DataCorrupted(
            f"replaying a receive of work queue {op.group!r} on {op.stream!r} handed out other items than the "
            f"logged ones: this copy's state differs from the one that wrote the log")
    return work.out, op._replace(deliveries=resolved)


# --------------------------------------------------------------------------- settle
@handles(O.QueueSettle)
def _settle(a: Applier, scope: BatchScope, op: O.QueueSettle) -> tuple[None, O.QueueSettle]:
    info = a.stream_info(scope, op.stream, op.stream_id)
    check_name(op.group, "group name")
    check_name(op.consumer, "consumer name")
    try:
        action = Q.Settle(op.action)
    except ValueError:
        raise errors.InvalidArgument(f"action must be one of {[s.name.lower() for s in Q.Settle]}, "
                                     f"got {op.action!r}") from None
    if op.delay_ms is not None:
        check_int(op.delay_ms, "delay_ms", 0, 7 * 86_400_000)
    if op.error is not None and (not isinstance(op.error, str) or len(op.error) > 4096):
        raise errors.InvalidArgument("error must be a string of at most 4096 characters")
    if not isinstance(op.deliveries, (list, tuple)) or not 1 <= len(op.deliveries) <= MAX_RECEIVE_ITEMS:
        raise errors.InvalidArgument(f"deliveries must be a list of 1 to {MAX_RECEIVE_ITEMS} "
                                     "[partition, txn id, index, delivery] entries")
    config = load_config(a, scope, info, op.group)
    settle = _Settle(a, scope, info, op, action, config)
    for target in op.deliveries:
        if not isinstance(target, (list, tuple)) or len(target) != 4:
            raise errors.InvalidArgument(f"each delivery must be [partition, txn id, index, delivery], "
                                         f"got {target!r:.80}")
        partition, txn_id, index, delivery = target
        check_partition(info, partition)
        check_txn_id(txn_id)
        check_int(index, "index", 0, 2**32 - 1)
        check_int(delivery, "delivery", 1, 2**31)
        settle.one(partition, txn_id, index, delivery)
    _save_config(a, scope, info, op.group, config)
    return None, op


class _Settle:
    """One settle record's work, delivery by delivery."""

    def __init__(self, a: Applier, scope: BatchScope, info: StreamInfo, op: O.QueueSettle, action: Q.Settle,
                 config: Q.GroupConfig) -> None:
        self.a, self.scope, self.info, self.op, self.action, self.config = a, scope, info, op, action, config
        self.prefix = Q.group_prefix(info.id, op.group)

    def _put(self, key: bytes, value: bytes) -> None:
        self.a.store.put(self.scope.txn, "queues", key, value)

    def one(self, partition: int, txn_id: int, index: int, delivery: int) -> None:
        a, txn, op, action, config = self.a, self.scope.txn, self.op, self.action, self.config
        ekey = Q.entry_key_in(self.prefix, partition, txn_id, index)
        raw = a.store.get(txn, "queues", ekey)
        entry = Q.Entry.unpack(raw) if raw else None
        if entry is None or entry.state is not Q.EntryState.IN_FLIGHT or entry.deliveries != delivery \
                or entry.consumer != op.consumer:
            now = "settled" if entry is None else (
                f"at delivery {entry.deliveries} to {entry.consumer!r}" if entry.state is Q.EntryState.IN_FLIGHT
                else f"waiting for delivery {entry.deliveries + 1}")
            raise errors.DeliveryExpired(
                f"item {index} of transaction {txn_id} (partition {partition}) of work queue {op.group!r}: "
                f"delivery {delivery} to {op.consumer!r} is no longer current (the item is {now}); its "
                f"{action.name.lower()} was refused and nothing was written")
        txn.delete(Q.due_key_in(self.prefix, entry.redeliver_at, partition, txn_id, index), db=a.store.queues)
        if action is Q.Settle.PROGRESS:
            entry.lock_deadline = self.scope.now + config.ack_timeout_ms
            entry.redeliver_at = entry.lock_deadline + config.backoff_for(entry.deliveries)
            self._put(ekey, entry.pack())
            self._put(Q.due_key_in(self.prefix, entry.redeliver_at, partition, txn_id, index), b"")
            return
        config.counters["in_flight"] = config.counters.get("in_flight", 0) - 1
        if action is Q.Settle.ACK:
            txn.delete(ekey, db=a.store.queues)
            config.count("acked")
        elif action is Q.Settle.NAK and entry.deliveries < config.max_deliveries:
            delay = config.backoff_for(entry.deliveries) if op.delay_ms is None else op.delay_ms
            entry.state, entry.error = Q.EntryState.WAITING, op.error
            entry.redeliver_at = self.scope.now + delay
            self._put(ekey, entry.pack())
            self._put(Q.due_key_in(self.prefix, entry.redeliver_at, partition, txn_id, index), b"")
            config.count("nacked")
        else:  # a term, or a nak of the last delivery allowed
            txn.delete(ekey, db=a.store.queues)
            if action is Q.Settle.NAK:
                config.count("nacked")
            item = _item(a, self.scope, self.info, partition, txn_id, index)
            if item is None:
                config.count("gone")
            else:
                reason = "terminated" if action is Q.Settle.TERM else "max_deliveries"
                _dead_letter(a, self.scope, self.info, op.group, config, partition, txn_id, index,
                             entry.deliveries, op.error, reason, item)


# --------------------------------------------------------------------------- helpers
def _item(a: Applier, scope: BatchScope, info: StreamInfo, partition: int, txn_id: int, index: int
          ) -> bytes | None:
    """Item ``index`` of a checkpointed transaction, or None if it is gone (TTL, deletion)."""
    raw = a.store.get(scope.txn, "txns", keys.txn_key(info.id, partition, txn_id))
    if raw is None or txn_id < ttl_floor(info, scope.now):
        return None
    state, _, chunks, _ = keys.STATE.unpack(raw)
    if state != TxnState.CHECKPOINTED:
        return None
    items = load_items(scope.txn, a.store, info, partition, txn_id, chunks)
    return items[index] if index < len(items) else None


def _dead_letter(a: Applier, scope: BatchScope, info: StreamInfo, group: str, config: Q.GroupConfig,
                 partition: int, txn_id: int, index: int, deliveries: int, error: str | None, reason: str,
                 item: bytes) -> None:
    """Settle an item for good: into the group's dead-letter stream (one checkpointed
    transaction with one record, :func:`dead_letter_record`), or only counted."""
    if reason == "terminated":
        config.count("terminated")
    if config.dead_letter is None:
        if reason != "terminated":
            config.count("exhausted")
        return
    target = a.stream_info(scope, config.dead_letter)
    record = dead_letter_record(info.name, group, partition, txn_id, index, deliveries, error, reason, item)
    chunk = O.pack_items([record])
    target_partition = partition % target.partitions
    new_id = a.allocate(scope, target, target_partition, None)
    a.put_state(scope, keys.txn_key(target.id, target_partition, new_id), TxnState.CHECKPOINTED, scope.now, 1, 1)
    a.put_chunk(scope, target, target_partition, new_id, 0, chunk, 1)
    config.count("dead_lettered")


def dead_letter_record(stream: str, group: str, partition: int, txn_id: int, index: int, deliveries: int,
                       error: str | None, reason: str, item: bytes) -> bytes:
    """The dead-letter item of a settled-for-good item: a msgpack map with its source
    (``stream``, ``group``, ``partition``, ``txn_id``, ``index``), ``deliveries``, the last
    ``error``, the ``reason`` (``max_deliveries`` or ``terminated``) and the ``item``."""
    return bytes(msgpack.packb({"stream": stream, "group": group, "partition": partition, "txn_id": txn_id,
                                "index": index, "deliveries": deliveries, "error": error, "reason": reason,
                                "item": item}, use_bin_type=True))
