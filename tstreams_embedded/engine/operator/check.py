"""``tstreams check``: verify a data directory offline and report every problem found.

Checks, in order (each problem is one line of the report):

1. **LMDB structure**, when the installed ``lmdb`` package has its offline verifier
   (``lmdb.verify``, py-lmdb >= 2.x): every page reachable, sound and ordered, read with
   plain file reads, so a damaged file cannot crash the checker. If it finds problems the
   data file is not opened at all.
2. **The directory** (:mod:`..storage.directory`): marker, directory id, file size against its header.
3. **Every data chunk**: its checksum and encoding (:mod:`..storage.chunks`).
4. **The key structure**: every ``txns`` record decodes, belongs to an existing stream and
   partition, and its ``parts`` key is >= its ID; a checkpointed or open transaction has
   exactly chunks ``0 .. n-1`` holding its item count, a cancelled or invalid one has none;
   no chunk without its transaction; ``parts`` and ``offsets`` keys refer to existing streams
   and partitions; stream ids are unique and below ``next_stream_id``; every commit-log
   entry decodes and none is past ``log_seq``.
5. **Every entry is found by a lookup of its key** (not only by a scan of the leaves),
   and **every sealed value** (:mod:`..storage.seals`): catalog records, ``parts``, transaction records,
   offsets, markers, commit-log entries, state-store entries and leases, and the ``meta``
   counters carry a checksum over key and value; each is verified (in a directory written
   before sealed values, which a read-only open never upgrades, there is none to verify).
6. **Entry counts**: every database holds as many entries as its header says, so damage
   that hides entries from a scan (a damaged page) is reported even if LMDB's verifier is
   not available.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import lmdb

from ... import errors
from ..protocol import ops as O
from ..protocol.ops import TxnState
from ..storage import chunks, commitlog, directory, keys, reads, seals
from ..storage.catalog import decode_stream
from ..storage.store import Store, entries

_CHUNK = struct.Struct(">QIQI")
_MAX_PROBLEMS = 1000


@dataclass
class Report:
    """What :func:`check_directory` found."""

    path: str
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    structure: str = "not run"

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, message: str) -> None:
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(message)
        elif len(self.problems) == _MAX_PROBLEMS:
            self.problems.append("... (further problems not listed)")

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "ok": self.ok, "structure": self.structure, "counts": self.counts,
                "problems": self.problems}

    def text(self) -> str:
        lines = [f"tstreams check {self.path}", f"  LMDB structure: {self.structure}"]
        lines += [f"  {k}: {v}" for k, v in self.counts.items()]
        if self.ok:
            lines.append("OK: no problems found")
        else:
            lines.append(f"DAMAGED: {len(self.problems)} problem(s)")
            lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


def check_directory(path: str) -> Report:
    """Verify the data directory ``path`` (which must not be written meanwhile for a
    meaningful answer) and return the report. Never raises for damage: it reports it."""
    report = Report(path)
    if not os.path.isdir(path):
        raise errors.InvalidArgument(f"{path!r} is not a directory")
    if not _structure(path, report):
        return report
    try:
        store = Store(path, "sync", readonly=True)
    except errors.TStreamsError as exc:
        report.problem(f"cannot open: {exc}")
        return report
    except (lmdb.Error, OSError) as exc:
        report.problem(f"cannot open: {type(exc).__name__}: {exc}")
        return report
    try:
        with store.read() as txn:
            _keys(store, txn, report)
    except errors.TStreamsError as exc:
        report.problem(f"scan stopped: {exc}")
    finally:
        store.close()
    return report


def _structure(path: str, report: Report) -> bool:
    """Run LMDB's offline verifier if available; False if the file must not be opened."""
    try:
        from lmdb import verify  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        report.structure = "skipped (this lmdb package has no offline verifier)"
        return True
    if not os.path.exists(os.path.join(path, "data.mdb")):
        report.structure = "skipped (no data.mdb)"
        return True
    try:
        found: list[str] = verify.verify(path)  # type: ignore[no-untyped-call,unused-ignore]
    except Exception as exc:  # noqa: BLE001 - verification could not begin: report it
        report.structure = "failed"
        report.problem(f"data.mdb is not a readable LMDB file: {exc}")
        return False
    if found:
        report.structure = f"{len(found)} problem(s)"
        for p in found:
            report.problem(f"LMDB structure: {p}")
        return False
    report.structure = "ok"
    return True


def _looked_up(txn: lmdb.Transaction, store: Store, report: Report, db: str, key: bytes, raw: bytes) -> None:
    """Report an entry that a scan finds but a lookup of its key does not (a damaged branch
    page sends lookups to the wrong leaf: readers would miss it)."""
    if txn.get(key, db=store.dbs[db]) != raw:
        report.problem(f"{seals.describe(db, key)}: a lookup of its key does not find it in the {db!r} database "
                       "(a damaged branch page)")


def _opened(txn: lmdb.Transaction, store: Store, report: Report, db: str, key: bytes, raw: bytes) -> bytes | None:
    """The payload of a sealed value, or None (reported) if its seal does not match or a
    lookup of its key does not find it."""
    _looked_up(txn, store, report, db, key, raw)
    if store.sealed and not seals.is_sealed(key, raw):
        report.problem(f"{seals.describe(db, key)}: checksum mismatch (the {db!r} value of {len(raw)} bytes is "
                       "damaged)")
        return None
    return store.unseal(db, key, raw)


def _counted(txn: lmdb.Transaction, store: Store, report: Report, db: str, found: int) -> None:
    """Report a database whose header counts other entries than a scan found."""
    header = int(txn.stat(store.dbs[db])["entries"])
    if header != found:
        report.problem(f"the {db!r} database holds {header} entries by its header but a scan found {found} "
                       "(damaged pages hide or invent entries)")


def _verified(txn: lmdb.Transaction, store: Store, report: Report, db: str) -> Iterator[tuple[bytes, bytes]]:
    """``(key, payload)`` of every entry of the database named ``db`` whose seal holds (the
    others are reported), then a report if its header counts other entries than were found."""
    found = 0
    for k, raw in entries(txn.cursor(db=store.dbs[db]).iternext()):
        found += 1
        v = _opened(txn, store, report, db, k, raw)
        if v is not None:
            yield k, v
    _counted(txn, store, report, db, found)


def _keys(store: Store, txn: lmdb.Transaction, report: Report) -> None:
    streams: dict[int, tuple[str, int]] = {}  # id -> (name, partitions)
    for k, v in _verified(txn, store, report, "streams"):
        try:
            info = decode_stream(k.decode("utf-8"), v)
        except Exception as exc:  # noqa: BLE001
            report.problem(f"stream record {k!r:.60} does not decode: {exc}")
            continue
        if info.id in streams:
            report.problem(f"streams {streams[info.id][0]!r} and {info.name!r} share id {info.id}")
        streams[info.id] = (info.name, info.partitions)
    meta: dict[bytes, bytes | None] = {}
    for k, raw in entries(txn.cursor(db=store.meta).iternext()):
        meta[k] = raw if k in directory.UNSEALED_META else _opened(txn, store, report, "meta", k, raw)
    _counted(txn, store, report, "meta", len(meta))
    counter = meta.get(b"next_stream_id")
    next_id = keys.U64.unpack(counter)[0] if counter and len(counter) == 8 else 1
    for sid, (name, _) in streams.items():
        if sid >= next_id:
            report.problem(f"stream {name!r} has id {sid} >= next_stream_id {next_id}")

    def where(sid: int, part: int, tid: int | None = None) -> str:
        name = streams[sid][0] if sid in streams else f"#{sid}"
        return f"stream {name!r} partition {part}" + (f" transaction {tid}" if tid is not None else "")

    def known(sid: int, part: int) -> bool:
        return sid in streams and part < streams[sid][1]

    parts: dict[tuple[int, int], int] = {}
    n_parts = 0
    for k, raw in entries(txn.cursor(db=store.parts).iternext()):
        n_parts += 1
        head = _opened(txn, store, report, "parts", k, raw)
        if head is None:
            if len(k) == keys.PART_LEN:  # reported: its records are not compared with it
                parts[struct.unpack(">QI", k)] = 2**64
            continue
        if len(k) != keys.PART_LEN or len(head) != 8:
            report.problem(f"malformed parts key {k.hex()}")
            continue
        sid, part = struct.unpack(">QI", k)
        parts[(sid, part)] = keys.U64.unpack(head)[0]
        if not known(sid, part):
            report.problem(f"parts key of {where(sid, part)}, which does not exist")
    _counted(txn, store, report, "parts", n_parts)

    data = txn.cursor(db=store.data)
    pending = data.first()
    counts = {"streams": len(streams), "transactions": 0, "chunks": 0, "items": 0, "log_entries": 0}

    def next_chunk() -> tuple[tuple[int, int, int, int] | None, bytes]:
        """The current data key (decoded) and value, then advance."""
        nonlocal pending
        if not pending:
            return None, b""
        k, v = bytes(data.key()), bytes(data.value())
        _looked_up(txn, store, report, "data", k, v)
        pending = data.next()
        if len(k) != _CHUNK.size:
            report.problem(f"malformed data key {k.hex()}")
            return (0, 0, 0, 0), v
        return _CHUNK.unpack(k), v

    def verify_chunk(addr: tuple[int, int, int, int], value: bytes) -> int:
        counts["chunks"] += 1
        try:
            return chunks.verify(value, store.legacy_chunks)
        except errors.DataCorrupted as exc:
            report.problem(f"{where(*addr[:3])} chunk {addr[3]}: {exc}")
            return -1

    chunk, value = next_chunk()
    for k, v in _verified(txn, store, report, "txns"):
        if len(k) != keys.TXN_LEN or len(v) < keys.STATE_LEN or (
                len(v) > keys.STATE_LEN and v[0] != TxnState.OPENED):  # only an open one names its producer
            report.problem(f"malformed txns record {k.hex()}")
            continue
        sid, part, tid = struct.unpack(">QIQ", k)
        counts["transactions"] += 1
        state, _, n_chunks, n_items = keys.STATE.unpack_from(v)
        here = where(sid, part, tid)
        if not known(sid, part):
            report.problem(f"{here}: its stream or partition does not exist")
        if parts.get((sid, part), 0) < tid:
            report.problem(f"{here}: above the partition's last allocated id {parts.get((sid, part), 0)}")
        if state not in TxnState._value2member_map_:
            report.problem(f"{here}: unknown state {state}")
        while chunk is not None and chunk[:3] < (sid, part, tid):  # chunks with no transaction
            verify_chunk(chunk, value)
            report.problem(f"{where(*chunk[:3])} chunk {chunk[3]}: no such transaction (orphan chunk)")
            chunk, value = next_chunk()
        found: list[int] = []
        items, damaged = 0, False
        while chunk is not None and chunk[:3] == (sid, part, tid):
            found.append(chunk[3])
            n = verify_chunk(chunk, value)
            items += max(n, 0)
            damaged |= n < 0
            chunk, value = next_chunk()
        counts["items"] += items
        live = state in (TxnState.CHECKPOINTED, TxnState.OPENED)
        if live and found != list(range(n_chunks)):
            report.problem(f"{here}: has chunks {found[:20]}, its record says {n_chunks}")
        elif not live and found:
            report.problem(f"{here}: {TxnState(state).label if state in TxnState._value2member_map_ else state} "
                           f"but still has {len(found)} chunk(s)")
        elif live and not damaged and items != n_items:
            report.problem(f"{here}: chunks hold {items} items, its record says {n_items}")
    while chunk is not None:
        verify_chunk(chunk, value)
        report.problem(f"{where(*chunk[:3])} chunk {chunk[3]}: no such transaction (orphan chunk)")
        chunk, value = next_chunk()
    _counted(txn, store, report, "data", counts["chunks"])

    for k, v in _verified(txn, store, report, "offsets"):
        if len(k) < 13 or len(v) != 8:
            report.problem(f"malformed offsets key {k.hex()}")
            continue
        sid = keys.U64.unpack_from(k)[0]
        part = keys.partition_of_offset_key(k)
        if not known(sid, part):
            consumer = k[8:-5].decode("utf-8", "replace")
            report.problem(f"offset of consumer {consumer!r} for {where(sid, part)}, which does not exist")

    for k, v in _verified(txn, store, report, "markers"):
        if len(v) != 8:
            report.problem(f"malformed marker {k!r:.60}")

    counter = meta.get(reads.LOG_SEQ)
    log_seq = max(keys.U64.unpack(counter)[0] if counter and len(counter) == 8 else 0, _last_log_key(txn, store))
    n_log_keys = 0
    for k, raw in entries(txn.cursor(db=store.log).iternext()):
        n_log_keys += 1
        seq = commitlog.seq_of(k) if len(k) in (8, 12) else -1  # an entry, or a piece of one
        if seq < 0 or seq > log_seq:
            report.problem(f"commit-log key {k.hex()} is past log_seq {log_seq}")
        _looked_up(txn, store, report, "log", k, raw)
    for seq, raw in commitlog.iter_sealed_entries(txn.cursor(db=store.log).iternext()):
        counts["log_entries"] += 1
        entry_key = keys.U64.pack(seq)  # an entry is sealed whole, under its u64 key (.commitlog)
        if store.sealed and not seals.is_sealed(entry_key, raw):
            report.problem(f"{seals.describe('log', entry_key)}: checksum mismatch (the 'log' value of {len(raw)} "
                           "bytes is damaged)")
            continue
        v = store.unseal("log", entry_key, raw)
        try:
            O.unpack_batch(v)
        except Exception as exc:  # noqa: BLE001
            report.problem(f"commit-log entry {seq} does not decode: {exc}")
    _counted(txn, store, report, "log", n_log_keys)

    if store.state is None and store.sealed:
        report.problem("the 'state' database is missing (its record in LMDB's main database is damaged)")
    if store.state is not None:
        n_state = 0
        for k, raw in entries(txn.cursor(db=store.state).iternext()):
            n_state += 1
            _opened(txn, store, report, "state", k, raw)
        counts["state_entries"] = n_state
        _counted(txn, store, report, "state", n_state)
    if store.queues is not None:
        n_queues = 0
        for k, raw in entries(txn.cursor(db=store.queues).iternext()):
            n_queues += 1
            _opened(txn, store, report, "queues", k, raw)
        counts["queue_entries"] = n_queues
        _counted(txn, store, report, "queues", n_queues)
    report.counts = counts


def _last_log_key(txn: lmdb.Transaction, store: Store) -> int:
    cur = txn.cursor(db=store.log)
    return commitlog.seq_of(cur.key()) if cur.last() and len(cur.key()) in (8, 12) else 0
