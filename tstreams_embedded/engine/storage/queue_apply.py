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

import dataclasses
from typing import Any

import msgpack

from ... import errors
from ..protocol import ops as O
from ..protocol import queuestate as Q
from ..protocol.backend import StreamInfo
from ..protocol.ops import TxnState
from ..protocol.validate import MAX_ID, check_int, check_name, check_partition, check_txn_id
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
    """One receive's work: what it hands out, dead-letters and counts. Consecutive items of
    one transaction handed out together are stored as one run (:class:`~..protocol.queuestate.Entry`)."""

    def __init__(self, a: Applier, scope: BatchScope, info: StreamInfo, op: O.QueueReceive,
                 config: Q.GroupConfig) -> None:
        self.a, self.scope, self.info, self.op, self.config = a, scope, info, op, config
        self.out: list[list[Any]] = []
        self.bytes = 0
        self.in_flight = config.counters.get("in_flight", 0)
        self.prefix = Q.group_prefix(info.id, op.group)
        #: the run being handed out: [partition, txn id, first index, count, deliveries]
        self.run: list[int] | None = None
        #: due items a receive looks at: at most max_items (handed out, dead-lettered or gone)
        self.due_budget = op.max_items

    @property
    def full(self) -> bool:
        return len(self.out) >= self.op.max_items or (bool(self.out) and self.bytes >= self.op.max_bytes)

    def hand_out(self, partition: int, txn_id: int, index: int, deliveries: int, item: bytes) -> None:
        run = self.run
        if run is not None and run[0] == partition and run[1] == txn_id and run[2] + run[3] == index \
                and run[4] == deliveries:
            run[3] += 1
        else:
            self.flush()
            self.run = [partition, txn_id, index, 1, deliveries]
        lock = self.scope.now + self.config.ack_timeout_ms
        self.out.append(Q.delivery_row(partition, txn_id, index, deliveries, lock, item))
        self.bytes += len(item)
        self.config.count("delivered")
        if deliveries > 1:
            self.config.count("redelivered")

    def flush(self) -> None:
        """Store the run handed out so far (one entry and its redelivery index key)."""
        if self.run is None:
            return
        partition, txn_id, first, count, deliveries = self.run
        self.run = None
        cfg = self.config
        lock = self.scope.now + cfg.ack_timeout_ms
        due = lock + cfg.backoff_for(deliveries)
        entry = Q.Entry(Q.EntryState.IN_FLIGHT, deliveries, lock, due, self.op.consumer, None, count)
        store, txn = self.a.store, self.scope.txn
        store.put(txn, "queues", Q.entry_key_in(self.prefix, partition, txn_id, first), entry.pack())
        store.put(txn, "queues", Q.due_key_in(self.prefix, due, partition, txn_id, first), b"")

    def redeliveries(self) -> None:
        """Items whose redelivery time has come, oldest first (a run's items in order), at
        most ``max_items`` of them looked at."""
        a, txn, sid, group = self.a, self.scope.txn, self.info.id, self.op.group
        prefix = Q.due_prefix(sid, group)
        cur = txn.cursor(db=a.store.queues)
        due: list[tuple[bytes, int, int, int, int]] = []
        if a.store.seek(cur, "queues", prefix):
            for k, _ in entries(cur.iternext()):
                if not k.startswith(prefix):
                    break
                at, partition, txn_id, first = Q.parse_due_key(k, len(prefix))
                if at > self.scope.now or len(due) >= self.op.max_items:
                    break
                due.append((as_bytes(k), at, partition, txn_id, first))
        for dkey, at, partition, txn_id, first in due:
            if self.full or self.due_budget <= 0:
                break
            self._redeliver(dkey, at, partition, txn_id, first)

    def _redeliver(self, dkey: bytes, at: int, partition: int, txn_id: int, first: int) -> None:
        """Hand out the items of a run that came due, while there is room; the rest stays due."""
        a, txn, group = self.a, self.scope.txn, self.op.group
        ekey = Q.entry_key_in(self.prefix, partition, txn_id, first)
        raw = a.store.get(txn, "queues", ekey)
        if raw is None:  # pragma: no cover - the index and the entries change together
            raise errors.DataCorrupted(f"work queue {group!r}: redelivery index names a missing item")
        entry = Q.Entry.unpack(raw)
        txn.delete(dkey, db=a.store.queues)
        txn.delete(ekey, db=a.store.queues)
        items = _items(a, self.scope, self.info, partition, txn_id)
        end = first + entry.count
        index = first
        while index < end and not self.full and self.due_budget > 0:
            self.due_budget -= 1
            if entry.state is Q.EntryState.IN_FLIGHT:
                self.in_flight -= 1  # its lock ran out
            item = items[index] if items is not None and index < len(items) else None
            if item is None:  # the transaction expired (stream TTL) or was deleted meanwhile
                self.config.count("gone")
            elif entry.deliveries >= self.config.max_deliveries:
                _dead_letter(a, self.scope, self.info, group, self.config, partition, txn_id, index,
                             entry.deliveries, entry.error or "the ack timeout ran out", "max_deliveries", item)
            else:
                self.hand_out(partition, txn_id, index, entry.deliveries + 1, item)
                self.in_flight += 1
            index += 1
        if index < end:  # no room for the rest: it stays as it was
            entry.count = end - index
            a.store.put(txn, "queues", Q.entry_key_in(self.prefix, partition, txn_id, index), entry.pack())
            a.store.put(txn, "queues", Q.due_key_in(self.prefix, at, partition, txn_id, index), b"")

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
            # an index-only scan: only the transactions items are handed out of are read
            s = scan(scope.txn, a.store, info.name, partition, cursor.position, 2**63 - 1, _SCAN_STEP, scope.now,
                     load=False)
            for txn_id, count in s.index:
                index = cursor.index if txn_id == cursor.partial else 0
                if index < count and not self._stopped():
                    items = _items(a, scope, info, partition, txn_id)
                    if items is None:  # pragma: no cover - the scan just found it checkpointed and alive
                        raise errors.DataCorrupted(f"work queue {group!r}: transaction {txn_id} vanished")
                    while index < count and not self._stopped():
                        self.hand_out(partition, txn_id, index, 1, items[index])
                        self.in_flight += 1
                        index += 1
                if index < count:  # stopped inside the transaction (or before it)
                    cursor.partial, cursor.index = txn_id, index
                    break
                cursor.position, cursor.partial, cursor.index = txn_id, 0, 0
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
    work.flush()
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
    parts = info.partitions
    for target in op.deliveries:
        if not isinstance(target, (list, tuple)) or len(target) != 4:
            raise errors.InvalidArgument(f"each delivery must be [partition, txn id, index, delivery], "
                                         f"got {target!r:.80}")
        partition, txn_id, index, delivery = target
        if not (type(partition) is int and type(txn_id) is int and type(index) is int and type(delivery) is int
                and 0 <= partition < parts and 0 <= txn_id <= MAX_ID and 0 <= index < 2**32
                and 1 <= delivery <= 2**31):  # the common case at a glance; else the specific error
            check_partition(info, partition)
            check_txn_id(txn_id)
            check_int(index, "index", 0, 2**32 - 1)
            check_int(delivery, "delivery", 1, 2**31)
        settle.one(partition, txn_id, index, delivery)
    settle.flush()
    _save_config(a, scope, info, op.group, config)
    return None, op


class _Run:
    """A stored run (:class:`~..protocol.queuestate.Entry`) a settle record changes: the new fate of
    some of its items (None: settled), written back by :meth:`_Settle.flush`."""

    __slots__ = ("key", "partition", "txn_id", "first", "entry", "fates")

    def __init__(self, key: bytes, partition: int, txn_id: int, first: int, entry: Q.Entry) -> None:
        self.key, self.partition, self.txn_id, self.first, self.entry = key, partition, txn_id, first, entry
        self.fates: dict[int, Q.Entry | None] = {}

    def covers(self, partition: int, txn_id: int, index: int) -> bool:
        return self.partition == partition and self.txn_id == txn_id \
            and self.first <= index < self.first + self.entry.count


class _Settle:
    """One settle record's work, delivery by delivery; the runs it changes are written
    back once, at the end (:meth:`flush`)."""

    def __init__(self, a: Applier, scope: BatchScope, info: StreamInfo, op: O.QueueSettle, action: Q.Settle,
                 config: Q.GroupConfig) -> None:
        self.a, self.scope, self.info, self.op, self.action, self.config = a, scope, info, op, action, config
        self.prefix = Q.group_prefix(info.id, op.group)
        self.runs: dict[bytes, _Run] = {}
        self.last: _Run | None = None

    def _run_of(self, partition: int, txn_id: int, index: int) -> _Run | None:
        """The stored run holding an item (None: the item is settled or was never handed out)."""
        if self.last is not None and self.last.covers(partition, txn_id, index):
            return self.last
        store, txn = self.a.store, self.scope.txn
        key = Q.entry_key_in(self.prefix, partition, txn_id, index)
        run_prefix = key[:-4]
        cur = txn.cursor(db=store.queues)
        found = store.seek(cur, "queues", key)
        if not (found and bytes(cur.key()) == key):
            if not (cur.prev() if found else cur.last()):
                return None
        k = bytes(cur.key())
        if not k.startswith(run_prefix) or len(k) != len(key):
            return None
        run = self.runs.get(k)
        if run is None:
            first = Q.parse_entry_key(k, len(self.prefix) + 1)[2]
            run = _Run(k, partition, txn_id, first, Q.Entry.unpack(store.unseal("queues", k, as_bytes(cur.value()))))
            if not run.covers(partition, txn_id, index):
                return None
            self.runs[k] = run
        elif not run.covers(partition, txn_id, index):
            return None
        self.last = run
        return run

    def one(self, partition: int, txn_id: int, index: int, delivery: int) -> None:
        op, action, config = self.op, self.action, self.config
        run = self._run_of(partition, txn_id, index)
        entry = None if run is None else run.fates.get(index, run.entry)
        if run is None or entry is None or entry.state is not Q.EntryState.IN_FLIGHT \
                or entry.deliveries != delivery or entry.consumer != op.consumer:
            now = "settled" if entry is None else (
                f"at delivery {entry.deliveries} to {entry.consumer!r}" if entry.state is Q.EntryState.IN_FLIGHT
                else f"waiting for delivery {entry.deliveries + 1}")
            raise errors.DeliveryExpired(
                f"item {index} of transaction {txn_id} (partition {partition}) of work queue {op.group!r}: "
                f"delivery {delivery} to {op.consumer!r} is no longer current (the item is {now}); its "
                f"{action.name.lower()} was refused and nothing was written")
        if action is Q.Settle.PROGRESS:
            lock = self.scope.now + config.ack_timeout_ms
            run.fates[index] = Q.Entry(entry.state, entry.deliveries, lock,
                                       lock + config.backoff_for(entry.deliveries), entry.consumer, entry.error)
            return
        config.counters["in_flight"] = config.counters.get("in_flight", 0) - 1
        if action is Q.Settle.ACK:
            run.fates[index] = None
            config.count("acked")
        elif action is Q.Settle.NAK and entry.deliveries < config.max_deliveries:
            delay = config.backoff_for(entry.deliveries) if op.delay_ms is None else op.delay_ms
            run.fates[index] = Q.Entry(Q.EntryState.WAITING, entry.deliveries, entry.lock_deadline,
                                       self.scope.now + delay, entry.consumer, op.error)
            config.count("nacked")
        else:  # a term, or a nak of the last delivery allowed
            run.fates[index] = None
            if action is Q.Settle.NAK:
                config.count("nacked")
            item = _item(self.a, self.scope, self.info, partition, txn_id, index)
            if item is None:
                config.count("gone")
            else:
                reason = "terminated" if action is Q.Settle.TERM else "max_deliveries"
                _dead_letter(self.a, self.scope, self.info, op.group, config, partition, txn_id, index,
                             entry.deliveries, op.error, reason, item)

    def flush(self) -> None:
        """Write the changed runs back: each split into the runs of its items' new fates."""
        store, txn, db = self.a.store, self.scope.txn, self.a.store.queues
        for run in self.runs.values():
            old = run.entry
            txn.delete(run.key, db=db)
            txn.delete(Q.due_key_in(self.prefix, old.redeliver_at, run.partition, run.txn_id, run.first), db=db)
            pieces: list[tuple[int, Q.Entry]] = []  # (first index, entry) of the runs left
            for index in range(run.first, run.first + old.count):
                entry = run.fates.get(index, old)
                if entry is None:
                    continue
                if pieces and pieces[-1][0] + pieces[-1][1].count == index and pieces[-1][1].fate == entry.fate:
                    pieces[-1][1].count += 1
                else:
                    pieces.append((index, dataclasses.replace(entry, count=1)))
            for first, entry in pieces:
                store.put(txn, "queues", Q.entry_key_in(self.prefix, run.partition, run.txn_id, first), entry.pack())
                store.put(txn, "queues",
                          Q.due_key_in(self.prefix, entry.redeliver_at, run.partition, run.txn_id, first), b"")


# --------------------------------------------------------------------------- helpers
def _items(a: Applier, scope: BatchScope, info: StreamInfo, partition: int, txn_id: int) -> list[bytes] | None:
    """The items of a checkpointed transaction, or None if it is gone (TTL, deletion)."""
    raw = a.store.get(scope.txn, "txns", keys.txn_key(info.id, partition, txn_id))
    if raw is None or txn_id < ttl_floor(info, scope.now):
        return None
    state, _, chunks, _ = keys.STATE.unpack_from(raw)
    if state != TxnState.CHECKPOINTED:
        return None
    return load_items(scope.txn, a.store, info, partition, txn_id, chunks)


def _item(a: Applier, scope: BatchScope, info: StreamInfo, partition: int, txn_id: int, index: int
          ) -> bytes | None:
    """Item ``index`` of a checkpointed transaction, or None if it is gone (TTL, deletion)."""
    items = _items(a, scope, info, partition, txn_id)
    return items[index] if items is not None and index < len(items) else None


def _dead_letter(a: Applier, scope: BatchScope, info: StreamInfo, group: str, config: Q.GroupConfig,
                 partition: int, txn_id: int, index: int, deliveries: int, error: str | None, reason: str,
                 item: bytes) -> None:
    """Settle an item for good: into the group's dead-letter stream (one checkpointed
    transaction with one record, :func:`dead_letter_record`), or only counted (no
    dead-letter stream, or it was deleted: a deleted one must not wedge the queue)."""
    if reason == "terminated":
        config.count("terminated")
    if config.dead_letter is None:
        if reason != "terminated":
            config.count("exhausted")
        return
    try:
        target = a.stream_info(scope, config.dead_letter)
    except errors.StreamNotFound:  # the dead-letter stream was deleted: as if the group had none
        if reason != "terminated":
            config.count("exhausted")
        return
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
