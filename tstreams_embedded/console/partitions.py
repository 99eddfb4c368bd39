"""A stream's partitions as the console's stream and consumer pages show them, at a bounded cost.

:meth:`~tstreams_embedded.engine.protocol.backend.Backend.describe_partitions` (``tstreams streams
describe``) reads every transaction record and data key of a partition: its cost grows
with the partition. The engine keeps no per-partition counts, so :func:`describe_bounded`
reads a partition from its newest end, at most ``cap`` transaction records and ``cap``
data keys:

* ``last_id`` and the open transactions among the newest ``cap`` records are exact (an
  open transaction older than that is not seen: open transactions live for their TTL, so
  they are among the newest);
* ``head`` (the newest visible checkpointed transaction) is exact when it is among the
  newest ``cap`` records, else looked for ``cap`` records further, and ``first`` (the
  oldest visible one) by a seek to the TTL floor and at most ``cap`` steps; each is 0 when
  not found within its steps;
* the counts (``checkpointed``, ``items``, ``expired``, ``open_count``) are those of the
  records read: exact when the partition has fewer than ``cap`` records, else "at least"
  (``counts_capped``); ``bytes`` likewise (``bytes_capped``).
"""

from __future__ import annotations

from dataclasses import dataclass

import lmdb

from ..engine.protocol.backend import MAX_OPEN_LISTED, OpenTxn, PartitionInfo, StreamInfo
from ..engine.protocol.ops import TxnState
from ..engine.protocol.validate import check_partition
from ..engine.storage import keys
from ..engine.storage.reads import ttl_floor
from ..engine.storage.store import Store, as_bytes

#: records read per partition (transaction records, and data keys)
PARTITION_READ_CAP = 10_000

_CHECKPOINTED = int(TxnState.CHECKPOINTED)
_OPENED = int(TxnState.OPENED)
_AFTER = b"\xff" * 16  # after every key of a partition (its keys are the prefix and 8 or 12 bytes)


@dataclass(frozen=True)
class BoundedPartition:
    """A partition's figures and whether its counts and bytes stopped at the cap."""

    info: PartitionInfo
    counts_capped: bool
    bytes_capped: bool


def describe_bounded(store: Store, info: StreamInfo, partitions: list[int], now: int,
                     cap: int = PARTITION_READ_CAP) -> list[BoundedPartition]:
    """The partitions' figures from one snapshot, each read at most ``cap`` records deep."""
    for p in partitions:
        check_partition(info, p)
    with store.read(buffers=True) as txn:
        return [_describe(txn, store, info, p, now, cap) for p in partitions]


def _newest_first(cur: lmdb.Cursor, prefix: bytes) -> bool:
    """Put ``cur`` on the newest key starting with ``prefix`` (false: none)."""
    if cur.set_range(prefix + _AFTER):
        if not cur.prev():
            return False
    elif not cur.last():
        return False
    return bytes(cur.key()[: len(prefix)]) == prefix


def _describe(txn: lmdb.Transaction, store: Store, info: StreamInfo, partition: int, now: int,
              cap: int) -> BoundedPartition:
    prefix = keys.part_key(info.id, partition)
    raw = store.get(txn, "parts", prefix)
    last_id = keys.U64.unpack(bytes(raw))[0] if raw is not None else 0
    floor = ttl_floor(info, now)
    first = head = checkpointed = items = expired = open_count = size = 0
    open_txns: list[OpenTxn] = []
    read = 0
    counts_capped = False
    cur = txn.cursor(db=store.txns)
    more = _newest_first(cur, prefix)
    while more:
        key = bytes(cur.key())
        if key[: keys.PART_LEN] != prefix:
            break
        if read == cap:
            counts_capped = True
            break
        read += 1
        value = cur.value()
        size += len(key) + len(value)
        record = store.unseal("txns", key, as_bytes(value))
        state, deadline, _, n = keys.STATE.unpack_from(record)
        tid = keys.txn_id_of(key)
        if state == _CHECKPOINTED and tid >= floor:
            head = head or tid
            first = tid
            checkpointed += 1
            items += n
        elif state == _CHECKPOINTED or (state == _OPENED and deadline <= now):
            expired += 1
        elif state == _OPENED:
            open_count += 1
            open_txns.append(OpenTxn(tid, deadline, n, keys.producer_of(record)))
        more = cur.prev()
    if counts_capped:
        head = head or _newest_visible(cur, store, prefix, floor, cap)
        first = _first_visible(txn, store, prefix, floor, cap)
    size, bytes_capped = _data_bytes(txn, store, prefix, cap, size)
    open_txns.sort(key=lambda t: t.id)
    return BoundedPartition(PartitionInfo(partition, last_id, first, head, checkpointed, items, expired,
                                          open_txns[:MAX_OPEN_LISTED], open_count, size),
                            counts_capped, bytes_capped)


def _newest_visible(cur: lmdb.Cursor, store: Store, prefix: bytes, floor: int, cap: int) -> int:
    """From where ``cur`` stands, backwards: the newest checkpointed transaction at or above
    ``floor``, within ``cap`` steps (else 0)."""
    for _ in range(cap):
        key = bytes(cur.key())
        if key[: keys.PART_LEN] != prefix:
            return 0
        tid = keys.txn_id_of(key)
        if tid < floor:
            return 0
        if keys.STATE.unpack_from(store.unseal("txns", key, as_bytes(cur.value())))[0] == _CHECKPOINTED:
            return tid
        if not cur.prev():
            return 0
    return 0


def _first_visible(txn: lmdb.Transaction, store: Store, prefix: bytes, floor: int, cap: int) -> int:
    """The oldest checkpointed transaction at or above ``floor``, within ``cap`` steps (else 0)."""
    cur = txn.cursor(db=store.txns)
    if not cur.set_range(prefix + keys.U64.pack(max(0, floor))):
        return 0
    for _ in range(cap):
        key = bytes(cur.key())
        if key[: keys.PART_LEN] != prefix:
            return 0
        state = keys.STATE.unpack_from(store.unseal("txns", key, as_bytes(cur.value())))[0]
        if state == _CHECKPOINTED:
            return keys.txn_id_of(key)
        if not cur.next():
            return 0
    return 0


def _data_bytes(txn: lmdb.Transaction, store: Store, prefix: bytes, cap: int, size: int) -> tuple[int, bool]:
    """``size`` plus the bytes of the partition's newest ``cap`` data keys and values, and
    whether there were more."""
    cur = txn.cursor(db=store.data)
    more = _newest_first(cur, prefix)
    read = 0
    while more:
        key = cur.key()
        if bytes(key[: len(prefix)]) != prefix:
            break
        if read == cap:
            return size, True
        read += 1
        size += len(key) + len(cur.value())
        more = cur.prev()
    return size, False
