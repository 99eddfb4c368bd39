"""Read-side queries for operators: what a partition holds and which consumers exist.

Both run on one LMDB snapshot and read keys and transaction records only, never item data
(:func:`describe_partition` takes the length of each stored chunk from the map without
reading it: the snapshot must be opened with ``buffers=True``). They serve
:meth:`~..protocol.backend.Backend.describe_partitions` and :meth:`~..protocol.backend.Backend.list_consumers`.
"""

from __future__ import annotations

import lmdb

from ...ids import ID_MULTIPLIER
from ..protocol.backend import MAX_OPEN_LISTED, ConsumerInfo, OpenTxn, PartitionInfo, StreamInfo
from ..protocol.ops import TxnState
from ..protocol.validate import check_partition
from . import expiry, keys
from .catalog import lookup_stream, stream_of
from .reads import ttl_floor
from .store import Store, as_bytes

CHECKPOINTED = int(TxnState.CHECKPOINTED)
OPENED = int(TxnState.OPENED)


def describe_partition(txn: lmdb.Transaction, store: Store, info: StreamInfo, partition: int,
                       now: int) -> PartitionInfo:
    """One partition's :class:`PartitionInfo` as of ``now`` (epoch ms; decides the TTL floor
    and which open transactions have expired: those are counted in ``expired``, never as open)."""
    check_partition(info, partition)
    prefix = keys.part_key(info.id, partition)
    raw = store.get(txn, "parts", prefix)
    last_id = keys.U64.unpack(bytes(raw))[0] if raw is not None else 0
    floor = ttl_floor(info, now)
    first = head = checkpointed = items = expired = open_count = size = 0
    open_txns: list[OpenTxn] = []
    cur = txn.cursor(db=store.txns)
    if cur.set_range(prefix):
        for k, v in cur.iternext():
            key = bytes(k)
            if key[: keys.PART_LEN] != prefix:
                break
            size += len(k) + len(v)
            record = store.unseal("txns", key, as_bytes(v))
            state, deadline, _, n = keys.STATE.unpack_from(record)
            tid = keys.txn_id_of(key)
            if state == CHECKPOINTED:
                if tid >= floor:
                    first = first or tid
                    head = tid
                    checkpointed += 1
                    items += n
                else:
                    expired += 1
            elif state == OPENED and deadline <= now:  # expired; readers invalidate it when they reach it
                expired += 1
            elif state == OPENED:
                open_count += 1
                if len(open_txns) < MAX_OPEN_LISTED:
                    open_txns.append(OpenTxn(tid, deadline, n, keys.producer_of(record)))
    size += _range_bytes(txn.cursor(db=store.data), prefix)
    return PartitionInfo(partition, last_id, first, head, checkpointed, items, expired, open_txns, open_count, size)


def first_open_at(txn: lmdb.Transaction, store: Store, info: StreamInfo, partition: int, ms: int) -> int:
    """The lowest ID of a transaction of the partition that was open at ``ms`` (epoch ms):
    opened before it (its ID is below ``txn_id_at(ms)``) and not checkpointed before it
    (still open, or checkpointed at or after ``ms``); 0 if none. Cancelled and expired
    transactions never count. Checkpointed records written before the engine kept their
    checkpoint time count as checkpointed when opened. Visits the partition's transaction
    records up to ``ms`` (no item data)."""
    check_partition(info, partition)
    prefix = keys.part_key(info.id, partition)
    below = ms * ID_MULTIPLIER
    cur = txn.cursor(db=store.txns)
    if cur.set_range(prefix):
        for k, v in cur.iternext():
            key = bytes(k)
            if key[: keys.PART_LEN] != prefix:
                break
            tid = keys.txn_id_of(key)
            if tid >= below:
                break
            state, stamp, _, _ = keys.STATE.unpack_from(store.unseal("txns", key, as_bytes(v)))
            if state == OPENED or (state == CHECKPOINTED and stamp >= ms):
                return tid
    return 0


def _range_bytes(cur: lmdb.Cursor, prefix: bytes) -> int:
    """The bytes of the keys and values starting with ``prefix``."""
    size = 0
    if cur.set_range(prefix):
        n = len(prefix)
        for k, v in cur.iternext():
            if bytes(k[:n]) != prefix:
                break
            size += len(k) + len(v)
    return size


def list_consumers(txn: lmdb.Transaction, store: Store, stream: str | None, limit: int | None) -> list[ConsumerInfo]:
    """Consumers with stored offsets, of ``stream`` or of every stream (in stream name order)."""
    if stream is not None:
        streams = [lookup_stream(txn, store, stream)]
    else:
        streams = [stream_of(store, bytes(k), bytes(v)) for k, v in txn.cursor(db=store.streams)]
    out: list[ConsumerInfo] = []
    cur = txn.cursor(db=store.offsets)
    for info in streams:
        prefix = keys.stream_prefix(info.id)
        found: dict[str, dict[int, int]] = {}
        if store.seek(cur, "offsets", prefix):
            for k, v in cur.iternext():
                key = bytes(k)
                value = store.unseal("offsets", key, as_bytes(v))  # also the entry that ends the scan
                if key[: len(prefix)] != prefix:
                    break
                name = key[len(prefix) : -5].decode("utf-8")
                offset = keys.U64.unpack(bytes(value))[0]
                found.setdefault(name, {})[keys.partition_of_offset_key(key)] = offset
        for name in sorted(found):
            if limit is not None and len(out) >= limit:
                return out
            out.append(ConsumerInfo(info.name, name, found[name], expiry.of_consumer(txn, store, info, name)))
    return out
