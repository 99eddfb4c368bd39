"""Online backup, restore, and continuous archiving of the commit log (point-in-time restore).

**Backup** (:func:`backup`): a consistent, compacted copy of a data directory taken while
writers run — LMDB's ``env.copy(compact=True)``, which reads one snapshot — into a new
directory holding ``data.mdb`` and ``backup.json``: the copy's CRC32C and size, the
sequence number and time of the newest commit-log entry it contains, and where it came from.

**Restore** (:func:`restore`): verifies the copy's checksum, puts it into a new data
directory, and, given an archive, replays the archived log entries after the copy's
sequence number, up to a moment (``until_ms``) if asked: point-in-time restore.

**Archive** (:class:`Archiver`): ships commit-log entries as they are written into segment
files ``<first seq>-<last seq>.seg`` (20 digits each), each sealed: ``TSSEG1`` · CRC32C u32
of the payload · the payload (:func:`~..protocol.ops.pack_entries`: entries with their items, not
references). A segment is written to a temporary name, synced and renamed, so a crash
leaves whole segments only. Entries must still be in the log when the archiver reads them:
one trimmed away unread (``log_retention``) is a gap, reported as
:class:`~tstreams_embedded.errors.ArchiveGap` and never skipped silently.

In the manner of Litestream and PostgreSQL's WAL archiving. The restored directory gets a
new identity (its ``tstreams.dir`` marker is written at the first open).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from crc32c import crc32c

from ... import errors
from ..protocol import ops as O
from ..storage import directory
from ..storage.backup_copies import DATA_FILE, MAX_BACKUP_READ, copy_with_crc, file_crc, newest_entry
from ..storage.core import Core
from ..storage.store import Store

MANIFEST = "backup.json"
BACKUP_FORMAT = 1
SEGMENT_MAGIC = b"TSSEG1"
_SEGMENT = re.compile(r"^(\d{20})-(\d{20})\.seg$")
_CRC = struct.Struct(">I")
#: entries per archive segment at most (a busy log is cut into segments of this size)
SEGMENT_ENTRIES = 1000


@dataclass(frozen=True)
class BackupManifest:
    """What ``backup.json`` says of a backup (see the module docstring)."""

    format: int
    created_ms: int
    log_seq: int
    log_time_ms: int | None
    bytes: int
    crc32c: int
    source: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RestoreReport:
    """What :func:`restore` did: the copy's sequence number, the archived entries replayed
    after it, and the sequence number and time of the last entry applied."""

    target: str
    base_seq: int
    replayed: int
    last_seq: int
    last_time_ms: int | None


# --------------------------------------------------------------------------- backup
def _empty_target(out: str, what: str) -> None:
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise errors.InvalidArgument(f"{what} {out!r} must be a new or empty directory")
    os.makedirs(out, exist_ok=True)


def backup(source: str | Core, out: str) -> BackupManifest:
    """Write a consistent, compacted, checksummed copy of ``source`` (a data directory —
    which may be open in other processes meanwhile — or an open :class:`Core`) into the new
    or empty directory ``out``; return its manifest."""
    out = os.fspath(out)
    _empty_target(out, "the backup directory")
    if isinstance(source, Core):
        label = source.path
        crc, size = copy_with_crc(source.store.env, out)
    else:
        label = os.path.abspath(os.fspath(source))
        if not directory.is_data_directory(label):
            raise errors.DataDirectoryNotFound(f"{label!r} is not a tstreams data directory")
        store = Store(label, "sync", readonly=True)
        try:
            crc, size = copy_with_crc(store.env, out)
        finally:
            store.close()
    seq, at = newest_entry(out)
    manifest = BackupManifest(BACKUP_FORMAT, int(time.time() * 1000), seq, at, size, crc, str(label))
    _write_synced(os.path.join(out, MANIFEST), json.dumps(manifest.to_json(), indent=1).encode())
    directory.sync_dir(out)
    return manifest


def read_manifest(backup_dir: str, verify: bool = True) -> BackupManifest:
    """The manifest of a backup; with ``verify``, the copy's checksum is checked too
    (:class:`~tstreams_embedded.errors.DataCorrupted` naming the file if it does not match)."""
    path = os.path.join(os.fspath(backup_dir), MANIFEST)
    try:
        doc = json.loads(Path(path).read_text())
        manifest = BackupManifest(**doc)
    except FileNotFoundError:
        raise errors.DataDirectoryNotFound(f"{backup_dir!r} is not a backup (it has no {MANIFEST})") from None
    except (ValueError, TypeError) as exc:
        raise errors.DataCorrupted(f"{path} is damaged: {exc}") from None
    if manifest.format != BACKUP_FORMAT:
        raise errors.InvalidArgument(f"{path}: backup format {manifest.format} is not {BACKUP_FORMAT}")
    if verify:
        data = os.path.join(os.fspath(backup_dir), DATA_FILE)
        if not os.path.exists(data):
            raise errors.DataCorrupted(f"{data} is missing")
        crc, size = file_crc(data)
        if (crc, size) != (manifest.crc32c, manifest.bytes):
            raise errors.DataCorrupted(f"{data} is damaged: its checksum or size ({size} bytes) does not match "
                                       f"{MANIFEST} ({manifest.bytes} bytes)")
    return manifest


# --------------------------------------------------------------------------- restore
def restore(backup_dir: str, target: str, *, archive: str | None = None, until_ms: int | None = None,
            durability: str = "sync") -> RestoreReport:
    """Restore ``backup_dir`` into the new or empty directory ``target``, then replay the
    entries of ``archive`` after the copy's sequence number (all, or those written at or
    before ``until_ms``, epoch ms). Damage or a gap in the archive stops it with an error
    naming the segment, before anything is replayed."""
    manifest = read_manifest(backup_dir)
    if until_ms is not None and archive is None:
        raise errors.InvalidArgument("until needs an archive (the log entries written after the backup)")
    if until_ms is not None and manifest.log_time_ms is not None and until_ms < manifest.log_time_ms:
        raise errors.InvalidArgument(
            f"the backup already holds entries written after {until_ms}: its newest is from "
            f"{manifest.log_time_ms}; restore an older backup")
    segments = list(archive_segments(archive)) if archive is not None else []
    _check_archive(segments, manifest.log_seq)
    target = os.fspath(target)
    _empty_target(target, "the restore target")
    partial = os.path.join(target, DATA_FILE + ".restoring")
    shutil.copyfile(os.path.join(os.fspath(backup_dir), DATA_FILE), partial)
    with open(partial, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(partial, os.path.join(target, DATA_FILE))
    directory.sync_dir(target)
    replayed, last_seq, last_ms = 0, manifest.log_seq, manifest.log_time_ms
    limit = until_ms if until_ms is not None else 2**63

    def in_time(entry: tuple[int, int, list[O.Operation]]) -> bool:
        return entry[1] <= limit

    core = Core(target, durability, compaction_interval=None)
    try:
        for path, _, _ in segments:
            batch = [e for e in read_segment(path) if e[0] > last_seq]
            reached = not all(map(in_time, batch))
            if reached:
                batch = list(itertools.takewhile(in_time, batch))
            if batch:
                core.apply_log(batch)
                replayed += len(batch)
                last_seq, last_ms = batch[-1][0], batch[-1][1]
            if reached:
                break
    finally:
        core.close()
    return RestoreReport(target, manifest.log_seq, replayed, last_seq, last_ms)


def _check_archive(segments: list[tuple[str, int, int]], base_seq: int) -> None:
    """Every segment whole, and no entry missing between the backup and the last segment."""
    expected = base_seq + 1
    for path, first, last in segments:
        if last < expected:
            continue
        if first > expected:
            raise errors.ArchiveGap(f"the archive misses log entries {expected}..{first - 1} (before {path}): "
                                    "they were trimmed before the archiver read them")
        entries = read_segment(path)  # verifies the seal
        if [e[0] for e in entries] != list(range(first, last + 1)):
            raise errors.DataCorrupted(f"archive segment {path} does not hold entries {first}..{last}")
        expected = last + 1


# --------------------------------------------------------------------------- archive
def archive_segments(archive: str) -> Iterator[tuple[str, int, int]]:
    """``(path, first seq, last seq)`` of the archive's segments, in order."""
    if not os.path.isdir(archive):
        raise errors.DataDirectoryNotFound(f"archive {archive!r} is not a directory")
    found = []
    for name in os.listdir(archive):
        m = _SEGMENT.match(name)
        if m:
            found.append((os.path.join(archive, name), int(m.group(1)), int(m.group(2))))
    yield from sorted(found, key=lambda s: s[1])


def read_segment(path: str) -> list[tuple[int, int, list[O.Operation]]]:
    """The entries of one archive segment; DataCorrupted naming it if its seal does not match."""
    raw = Path(path).read_bytes()
    head = len(SEGMENT_MAGIC) + _CRC.size
    if len(raw) < head or not raw.startswith(SEGMENT_MAGIC) or \
            _CRC.unpack_from(raw, len(SEGMENT_MAGIC))[0] != crc32c(raw[head:]):
        raise errors.DataCorrupted(f"archive segment {path} is damaged (its checksum does not match)")
    try:
        return O.unpack_entries(raw[head:])
    except Exception as exc:  # noqa: BLE001 - any decoding failure of a sealed segment is damage
        raise errors.DataCorrupted(f"archive segment {path} does not decode: {exc}") from None


def _write_synced(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Archiver:
    """Ships the commit log of the data directory ``source`` into ``archive`` (see the module
    docstring). :meth:`step` archives what is new; :meth:`run` does so until stopped."""

    def __init__(self, source: str | Core, archive: str) -> None:
        self.archive = os.fspath(archive)
        os.makedirs(self.archive, exist_ok=True)
        last = [s[2] for s in archive_segments(self.archive)]
        self.next_seq = (max(last) + 1) if last else None
        self._owned = not isinstance(source, Core)
        self.core = source if isinstance(source, Core) else Core(os.fspath(source), "sync", compaction_interval=None)
        self.source = self.core.path

    def close(self) -> None:
        if self._owned:
            self.core.close()

    def __enter__(self) -> Archiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def step(self) -> int:
        """Archive the entries written since the last step; return how many."""
        done = 0
        while True:
            start = self.next_seq if self.next_seq is not None else 0
            entries = self.core.read_log(start, SEGMENT_ENTRIES)
            if not entries:
                return done
            if self.next_seq is not None and entries[0][0] != self.next_seq:
                raise errors.ArchiveGap(
                    f"log entries {self.next_seq}..{entries[0][0] - 1} of {self.source!r} were trimmed before they "
                    f"were archived: raise log_retention, or take a new base backup and start a new archive")
            first, last = entries[0][0], entries[-1][0]
            payload = O.pack_entries(entries)
            name = os.path.join(self.archive, f"{first:020d}-{last:020d}.seg")
            _write_synced(name, SEGMENT_MAGIC + _CRC.pack(crc32c(payload)) + payload)
            directory.sync_dir(self.archive)
            self.next_seq = last + 1
            done += len(entries)

    def run(self, stop: threading.Event, idle: float = 1.0) -> None:
        """Archive until ``stop`` is set, woken by commits (and at least every ``idle`` s)."""
        seen = self.core.wait_for_commit(-1, 0)
        while not stop.is_set():
            self.step()
            seen = self.core.wait_for_commit(seen, idle)


def backup_from(backend: Any, out: str, source: str) -> BackupManifest:
    """:func:`backup` through any Backend (a server or a cluster: ``backup_begin``,
    ``backup_read``, ``backup_end``): the copy is made where the data is and streamed here
    in pieces, its checksum verified."""
    out = os.fspath(out)
    _empty_target(out, "the backup directory")
    copy = backend.backup_begin()
    try:
        crc = 0
        done = 0
        partial = os.path.join(out, DATA_FILE + ".partial")
        with open(partial, "wb") as f:
            while done < copy.bytes:
                piece = backend.backup_read(copy.token, done, min(MAX_BACKUP_READ, copy.bytes - done))
                if not piece:
                    raise errors.DataCorrupted(f"the backup copy ended at {done} of {copy.bytes} bytes")
                f.write(piece)
                crc = crc32c(piece, crc)
                done += len(piece)
            f.flush()
            os.fsync(f.fileno())
        if crc != copy.crc32c:
            raise errors.DataCorrupted("the backup copy arrived damaged (its checksum does not match); run it again")
        os.replace(partial, os.path.join(out, DATA_FILE))
    finally:
        backend.backup_end(copy.token)
    manifest = BackupManifest(BACKUP_FORMAT, int(time.time() * 1000), copy.log_seq, copy.log_time_ms, copy.bytes,
                              copy.crc32c, source)
    _write_synced(os.path.join(out, MANIFEST), json.dumps(manifest.to_json(), indent=1).encode())
    directory.sync_dir(out)
    return manifest
