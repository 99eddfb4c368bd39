"""Read-side queries over one LMDB snapshot.

The rule every reader follows: transactions of a partition are visited in ID order; a
checkpointed one is returned unless its stream's TTL has passed; cancelled and invalid ones
are passed over; an open one *stops* the scan (order is never broken). An open transaction
whose deadline has passed is reported in ``expired`` so that the caller can invalidate it
through the write path and scan again; readers never decide expiry on their own, which makes
"checkpointed just in time" and "expired" mutually exclusive.
"""

from __future__ import annotations

from collections.abc import Callable

import lmdb
from crc32c import crc32c

from ...errors import DataCorrupted
from ...ids import ID_MULTIPLIER
from ..protocol.backend import IndexScan, StreamInfo, TxnData
from ..protocol.ops import Checkpoint, ChunkRef, Data, GoneChunk, Instant, Open, Operation, TxnState
from ..protocol.validate import MAX_FETCH, check_int, check_partition
from . import keys, seals
from .catalog import lookup_stream
from .chunks import items_of, payload_of
from .seals import RESIDUE
from .store import Store, as_bytes, entries

CHECKPOINTED = int(TxnState.CHECKPOINTED)
OPENED = int(TxnState.OPENED)


def ttl_floor(info: StreamInfo, now: int) -> int:
    """Transactions with an ID below this are past the stream's TTL and never returned."""
    return (now - info.ttl * 1000) * ID_MULTIPLIER


def load_items(txn: lmdb.Transaction, store: Store, info: StreamInfo, partition: int, txn_id: int,
               chunks: int) -> list[bytes]:
    """The items of a transaction, each chunk verified (:mod:`.chunks`); :class:`DataCorrupted`
    names the transaction if a chunk is damaged or missing."""
    legacy = store.legacy_chunks
    try:
        if chunks == 1:
            return items_of(_chunk(txn, store, info, partition, txn_id, 0), legacy)
        items: list[bytes] = []
        for c in range(chunks):
            items.extend(items_of(_chunk(txn, store, info, partition, txn_id, c), legacy))
        return items
    except DataCorrupted as exc:
        raise _located(exc, info, partition, txn_id) from None


def chunk_items(txn: lmdb.Transaction, store: Store, info: StreamInfo, partition: int, txn_id: int,
                chunk: int) -> list[bytes]:
    """The items of one stored chunk of a transaction, verified like :func:`load_items`."""
    try:
        return items_of(_chunk(txn, store, info, partition, txn_id, chunk), store.legacy_chunks)
    except DataCorrupted as exc:
        raise _located(exc, info, partition, txn_id) from None


def transaction_payloads(txn: lmdb.Transaction, store: Store, info: StreamInfo, partition: int,
                         txn_id: int) -> list[memoryview | bytes]:
    """The verified, *undecoded* payloads (msgpack arrays of ``bytes`` items) of a stored
    transaction's chunks, in order, for readers that decode items in bulk (the Spark source
    builds Arrow columns from them). Checksums are verified as in :func:`load_items`;
    :class:`DataCorrupted` names the transaction if a chunk is damaged or missing, or the
    transaction record is gone. The payloads are valid while ``txn`` is."""
    try:
        raw = store.get(txn, "txns", keys.txn_key(info.id, partition, txn_id))
        if raw is None:
            raise DataCorrupted("its transaction record is missing")
        chunks = keys.STATE.unpack_from(raw)[2]
        return [payload_of(_chunk(txn, store, info, partition, txn_id, c), store.legacy_chunks)
                for c in range(chunks)]
    except DataCorrupted as exc:
        raise _located(exc, info, partition, txn_id) from None


def _located(exc: DataCorrupted, info: StreamInfo, partition: int, txn_id: int) -> DataCorrupted:
    return DataCorrupted(
        f"transaction {txn_id} in {info.name!r} partition {partition} is damaged: {exc}. "
        "Run `tstreams check --data DIR` for a full report",
        stream=info.name, partition=partition, txn_id=txn_id,
    )


def _chunk(txn: lmdb.Transaction, store: Store, info: StreamInfo, partition: int, txn_id: int, c: int) -> bytes:
    raw = txn.get(keys.chunk_key(info.id, partition, txn_id, c), db=store.data)
    if raw is None:
        raise DataCorrupted(f"its chunk {c} is missing")
    return as_bytes(raw)


class Scan:
    """Result of :func:`scan`: the checkpointed transactions found (``txns`` with their
    items, or ``index`` as ``(id, item count)`` when not loading), the position passed,
    whether it stopped at an open transaction, whether it stopped at ``max_txns``
    (``full``), and the ID of an expired open transaction that needs invalidating."""

    __slots__ = ("txns", "index", "position", "blocked", "full", "expired", "stream_id")

    def __init__(self, position: int, stream_id: int = 0) -> None:
        self.stream_id = stream_id
        self.txns: list[TxnData] = []
        self.index: list[tuple[int, int]] = []
        self.position = position
        self.blocked = False
        self.full = False
        self.expired: int | None = None


def scan(txn: lmdb.Transaction, store: Store, stream: str, partition: int, after: int, upto: int,
         max_txns: int, now: int, load: bool = True) -> Scan:
    """Visit transactions ``after < id <= upto`` of a partition (see module docstring).

    With ``load`` the items of each checkpointed transaction are read; without it only the
    transaction records are (an index-only scan). Meeting a transaction beyond ``upto``
    moves the position to ``upto``: IDs only grow, so nothing can appear in between."""
    info = lookup_stream(txn, store, stream)
    check_partition(info, partition)
    out = Scan(after, info.id)
    floor = ttl_floor(info, now)
    prefix = keys.part_key(info.id, partition)
    cur = txn.cursor(db=store.txns)
    if after >= 2**63 - 1 or not store.seek(cur, "txns", keys.txn_key(info.id, partition, after + 1)):
        return out
    unpack_state = keys.STATE.unpack_from  # the seal follows the record
    sealed = store.sealed
    found = 0
    for k, v in entries(cur.iternext()):
        # every entry visited is verified, also the one that ends the scan: not one moved there by damage
        if sealed and crc32c(v, crc32c(k)) != RESIDUE:  # seals.unseal, inlined
            if out.txns or out.index:  # return what precedes it; the next scan raises
                out.full = True
                break
            raise seals.damaged("txns", k, v)
        state, deadline, chunks, items = unpack_state(v)
        if k[: keys.PART_LEN] != prefix:
            break
        tid = keys.txn_id_of(k)
        if tid > upto:
            out.position = upto
            break
        if state == CHECKPOINTED:
            if tid >= floor:
                if load:
                    try:
                        items_ = load_items(txn, store, info, partition, tid, chunks)
                    except DataCorrupted:
                        if out.txns:  # return what precedes it; the next scan raises
                            out.full = True
                            break
                        raise
                    out.txns.append(TxnData(stream, partition, tid, items_, info.id))
                else:
                    out.index.append((tid, items))
                found += 1
            out.position = tid
            if found >= max_txns:
                out.full = True
                break
        elif state == OPENED:
            if deadline <= now:
                out.expired = tid
            out.blocked = True
            break
        else:
            out.position = tid
    return out



def scan_index(store: Store, clock: Callable[[], int], stream: str, partition: int, after: int, upto: int,
               max_txns: int, pass_expired: Callable[[Scan], None]) -> IndexScan:
    """The index-only scan of ``Backend.scan_index``, shared by the engine and the stream
    apps' state view: ``(id, item count)`` of checkpointed transactions ``after < id <=
    upto``, at most ``max_txns``. An expired open transaction met on the way is handed to
    ``pass_expired`` (the engine invalidates it; the state view passes over it, as it was
    expired at the state time) and the scan goes on past it."""
    check_int(after, "after", 0, 2**63 - 1)
    check_int(upto, "upto", 0, 2**63 - 1)
    check_int(max_txns, "max_txns", 1, MAX_FETCH)
    found: list[tuple[int, int]] = []
    position = after
    while True:
        with store.read() as txn:
            s = scan(txn, store, stream, partition, position, upto, max_txns - len(found), clock(), load=False)
        found.extend(s.index)
        position = max(position, s.position)
        if s.expired is None:
            return IndexScan(found, position, s.blocked, s.full)
        pass_expired(s)
        position = max(position, s.expired)
        if len(found) >= max_txns:
            return IndexScan(found, position, False, True)

def get_one(txn: lmdb.Transaction, store: Store, stream: str, partition: int, txn_id: int,
            now: int) -> TxnData | None:
    info = lookup_stream(txn, store, stream)
    check_partition(info, partition)
    raw = store.get(txn, "txns", keys.txn_key(info.id, partition, txn_id))
    if raw is None:
        return None
    state, _, chunks, _ = keys.STATE.unpack_from(raw)
    if state != TxnState.CHECKPOINTED or txn_id < ttl_floor(info, now):
        return None
    return TxnData(stream, partition, txn_id, load_items(txn, store, info, partition, txn_id, chunks), info.id)


def last_checkpointed(txn: lmdb.Transaction, store: Store, stream: str, partition: int,
                      now: int) -> TxnData | None:
    info = lookup_stream(txn, store, stream)
    check_partition(info, partition)
    prefix = keys.part_key(info.id, partition)
    floor = ttl_floor(info, now)
    cur = txn.cursor(db=store.txns)
    if store.seek(cur, "txns", keys.part_key(info.id, partition + 1)):
        if not cur.prev():
            return None
    elif not cur.last():
        return None
    for k, v in entries(cur.iterprev()):
        state, _, chunks, _ = keys.STATE.unpack_from(store.unseal("txns", k, v))  # also the entry that ends the scan
        if k[: keys.PART_LEN] != prefix:
            return None
        tid = keys.txn_id_of(k)
        if tid < floor:
            return None
        if state == TxnState.CHECKPOINTED:
            return TxnData(stream, partition, tid, load_items(txn, store, info, partition, tid, chunks), info.id)
    return None


def last_allocated(txn: lmdb.Transaction, store: Store, stream: str, partition: int) -> int:
    info = lookup_stream(txn, store, stream)
    check_partition(info, partition)
    raw = store.get(txn, "parts", keys.part_key(info.id, partition))
    return keys.U64.unpack(raw)[0] if raw else 0


#: ``meta`` key: a floor under the commit-log sequence, written when the log is trimmed (the
#: newest entry's key is the sequence otherwise, so a commit does not touch ``meta``)
LOG_SEQ = b"log_seq"


def log_seq(txn: lmdb.Transaction, store: Store) -> int:
    """The sequence number of the newest commit-log entry (0 if none): the log's last key,
    or the floor kept in ``meta`` when the log was trimmed empty. Directories of format 1
    kept the sequence in ``meta`` on every commit, so the larger of the two is right for
    both formats."""
    raw = store.get(txn, "meta", LOG_SEQ)
    floor: int = keys.U64.unpack(raw)[0] if raw else 0
    cur = txn.cursor(db=store.log)
    if cur.last():
        last: int = keys.U64.unpack_from(cur.key())[0]  # a u64, or a u64 and a piece (.commitlog)
        return max(last, floor)
    return floor


def offsets_of(txn: lmdb.Transaction, store: Store, stream: str, consumer: str) -> dict[int, int]:
    info = lookup_stream(txn, store, stream)
    prefix = keys.offsets_prefix(info.id, consumer)
    out: dict[int, int] = {}
    cur = txn.cursor(db=store.offsets)
    if store.seek(cur, "offsets", prefix):
        for k, v in entries(cur.iternext()):
            offset = store.unseal("offsets", k, v)  # also the entry that ends the scan
            if not k.startswith(prefix) or len(k) != len(prefix) + 4:
                break
            out[keys.partition_of_offset_key(k)] = keys.U64.unpack(offset)[0]
    return out


def resolve_chunks(txn: lmdb.Transaction, store: Store, records: list[Operation]) -> list[Operation]:
    """Logged records with every :class:`~..protocol.ops.ChunkRef` replaced by the stored chunk (its
    verified payload bytes), or by a :class:`~..protocol.ops.GoneChunk` if it was deleted since."""
    out: list[Operation] = []
    for op in records:
        if not isinstance(op, (Open, Data, Checkpoint, Instant)):
            out.append(op)
            continue
        ref = op.chunk
        if type(ref) is ChunkRef:
            raw = txn.get(keys.chunk_key(ref.stream_id, ref.partition, ref.txn_id, ref.index), db=store.data)
            if raw is None:
                chunk: bytes | GoneChunk = GoneChunk(ref.items)
            else:
                try:
                    chunk = bytes(payload_of(as_bytes(raw), store.legacy_chunks))
                except DataCorrupted as exc:
                    raise DataCorrupted(f"a chunk of transaction {ref.txn_id} referred to by the commit log is "
                                        f"damaged: {exc}", partition=ref.partition, txn_id=ref.txn_id) from None
            op = op._replace(chunk=chunk)
        out.append(op)
    return out
