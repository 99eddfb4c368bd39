"""Reads of work queue state (:mod:`..protocol.queuestate`): :func:`status`, behind
``Backend.queue_status`` and ``tstreams queues describe``."""

from __future__ import annotations

import lmdb

from ...ids import ID_MULTIPLIER
from ..protocol import queuestate as Q
from ..protocol.backend import QueueStatus
from ..protocol.validate import check_name
from .catalog import lookup_stream
from .reads import scan
from .store import Store, entries

_STEP = 1024


def status(txn: lmdb.Transaction, store: Store, stream: str, group: str, now: int, full: bool) -> QueueStatus:
    info = lookup_stream(txn, store, check_name(stream))
    check_name(group, "group name")
    raw = store.get(txn, "queues", Q.group_key(info.id, group)) if store.queues is not None else None
    config = Q.check_not_declared(Q.GroupConfig.unpack(raw) if raw else None, stream, group)
    in_flight = waiting = 0
    oldest: int | None = None
    prefix = Q.entry_prefix(info.id, group)
    cur = txn.cursor(db=store.queues)
    if store.seek(cur, "queues", prefix):
        for k, v in entries(cur.iternext()):
            if not k.startswith(prefix):
                break
            entry = Q.Entry.unpack(store.unseal("queues", k, v))
            if entry.state is Q.EntryState.IN_FLIGHT:
                in_flight += entry.count
            else:
                waiting += entry.count
            _, txn_id, _ = Q.parse_entry_key(k, len(prefix))
            born = txn_id // ID_MULTIPLIER
            oldest = born if oldest is None else min(oldest, born)
    dprefix = Q.due_prefix(info.id, group)
    next_due: int | None = None
    cur = txn.cursor(db=store.queues)
    if store.seek(cur, "queues", dprefix):
        k = bytes(cur.key())
        if k.startswith(dprefix):
            next_due = Q.parse_due_key(k, len(dprefix))[0]
    ready = next_due is not None and next_due <= now
    pending: dict[int, int] | None = {} if full else None
    for partition in range(info.partitions):
        if ready and not full:
            break
        cursor = Q.Cursor.unpack(store.get(txn, "queues", Q.cursor_key(info.id, group, partition)))
        count, first = _pending(txn, store, stream, partition, cursor, now, full)
        if count and in_flight < config.max_in_flight:
            ready = True
        if pending is not None:
            pending[partition] = count
        if first is not None:
            oldest = first if oldest is None else min(oldest, first)
    settings = {"ack_timeout_ms": config.ack_timeout_ms, "max_deliveries": config.max_deliveries,
                "dead_letter": config.dead_letter, "backoff_ms": config.backoff_ms,
                "max_in_flight": config.max_in_flight}
    counters = {name: config.counters.get(name, 0) for name in Q.COUNTERS}
    return QueueStatus(stream, group, settings, counters, in_flight, waiting, ready, next_due, pending,
                       oldest if full else None)


def _pending(txn: lmdb.Transaction, store: Store, stream: str, partition: int, cursor: Q.Cursor, now: int,
             full: bool) -> tuple[int, int | None]:
    """Items of ``partition`` not handed out yet (with ``full``; else 1 if there is any), and
    the ID time of the first such transaction."""
    count = 0
    first: int | None = None
    position = cursor.position
    while True:
        # without full, the first transaction with items left answers: read few at a time
        s = scan(txn, store, stream, partition, position, 2**63 - 1, _STEP if full else 2, now, load=False)
        for txn_id, items in s.index:
            left = items - (cursor.index if txn_id == cursor.partial else 0)
            if left > 0:
                count += left
                if first is None:
                    first = txn_id // ID_MULTIPLIER
                if not full:
                    return count, first
        position = max(position, s.position)
        if not s.full:
            return count, first

