"""``tstreams check``: verify a data directory offline and report every problem found.

Checks, in order (each problem is one line of the report):

1. **LMDB structure**, when the installed ``lmdb`` package has its offline verifier
   (``lmdb.verify``, py-lmdb >= 2.x): every page reachable, sound and ordered, read with
   plain file reads, so a damaged file cannot crash the checker. If it finds problems the
   data file is not opened at all.
2. **The directory** (:mod:`.directory`): marker, directory id, file size against its header.
3. **Every data chunk**: its checksum and encoding (:mod:`.chunks`).
4. **The key structure**: every ``txns`` record decodes, belongs to an existing stream and
   partition, and its ``parts`` key is >= its ID; a checkpointed or open transaction has
   exactly chunks ``0 .. n-1`` holding its item count, a cancelled or invalid one has none;
   no chunk without its transaction; ``parts`` and ``offsets`` keys refer to existing streams
   and partitions; stream ids are unique and below ``next_stream_id``; every commit-log
   entry decodes and none is past ``log_seq``.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Any

import lmdb

from .. import errors
from . import chunks, commitlog, keys, reads
from . import ops as O
from .catalog import decode_stream
from .ops import TxnState
from .store import Store, entries

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


def _keys(store: Store, txn: lmdb.Transaction, report: Report) -> None:
    streams: dict[int, tuple[str, int]] = {}  # id -> (name, partitions)
    for k, v in entries(txn.cursor(db=store.streams).iternext()):
        try:
            info = decode_stream(k.decode("utf-8"), v)
        except Exception as exc:  # noqa: BLE001
            report.problem(f"stream record {k!r:.60} does not decode: {exc}")
            continue
        if info.id in streams:
            report.problem(f"streams {streams[info.id][0]!r} and {info.name!r} share id {info.id}")
        streams[info.id] = (info.name, info.partitions)
    raw = txn.get(b"next_stream_id", db=store.meta)
    next_id = keys.U64.unpack(raw)[0] if raw else 1
    for sid, (name, _) in streams.items():
        if sid >= next_id:
            report.problem(f"stream {name!r} has id {sid} >= next_stream_id {next_id}")

    def where(sid: int, part: int, tid: int | None = None) -> str:
        name = streams[sid][0] if sid in streams else f"#{sid}"
        return f"stream {name!r} partition {part}" + (f" transaction {tid}" if tid is not None else "")

    def known(sid: int, part: int) -> bool:
        return sid in streams and part < streams[sid][1]

    parts: dict[tuple[int, int], int] = {}
    for k, v in entries(txn.cursor(db=store.parts).iternext()):
        if len(k) != keys.PART_LEN or len(v) != 8:
            report.problem(f"malformed parts key {k.hex()}")
            continue
        sid, part = struct.unpack(">QI", k)
        parts[(sid, part)] = keys.U64.unpack(v)[0]
        if not known(sid, part):
            report.problem(f"parts key of {where(sid, part)}, which does not exist")

    data = txn.cursor(db=store.data)
    pending = data.first()
    counts = {"streams": len(streams), "transactions": 0, "chunks": 0, "items": 0, "log_entries": 0}

    def next_chunk() -> tuple[tuple[int, int, int, int] | None, bytes]:
        """The current data key (decoded) and value, then advance."""
        nonlocal pending
        if not pending:
            return None, b""
        k, v = bytes(data.key()), bytes(data.value())
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
    for k, v in entries(txn.cursor(db=store.txns).iternext()):
        if len(k) != keys.TXN_LEN or len(v) != keys.STATE.size:
            report.problem(f"malformed txns record {k.hex()}")
            continue
        sid, part, tid = struct.unpack(">QIQ", k)
        counts["transactions"] += 1
        state, _, n_chunks, n_items = keys.STATE.unpack(v)
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

    for k, v in entries(txn.cursor(db=store.offsets).iternext()):
        if len(k) < 13 or len(v) != 8:
            report.problem(f"malformed offsets key {k.hex()}")
            continue
        sid = keys.U64.unpack_from(k)[0]
        part = keys.partition_of_offset_key(k)
        if not known(sid, part):
            consumer = k[8:-5].decode("utf-8", "replace")
            report.problem(f"offset of consumer {consumer!r} for {where(sid, part)}, which does not exist")

    raw = txn.get(reads.LOG_SEQ, db=store.meta)
    log_seq = max(keys.U64.unpack(raw)[0] if raw else 0, reads.log_seq(txn, store))
    for k, _ in entries(txn.cursor(db=store.log).iternext()):
        seq = commitlog.seq_of(k) if len(k) in (8, 12) else -1  # an entry, or a piece of one
        if seq < 0 or seq > log_seq:
            report.problem(f"commit-log key {k.hex()} is past log_seq {log_seq}")
    for seq, v in commitlog.iter_entries(txn.cursor(db=store.log).iternext()):
        counts["log_entries"] += 1
        try:
            O.unpack_batch(v)
        except Exception as exc:  # noqa: BLE001
            report.problem(f"commit-log entry {seq} does not decode: {exc}")
    report.counts = counts
