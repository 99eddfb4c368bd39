"""Refusing damaged data directories at open.

Two checks run every time a :class:`~.store.Store` opens a directory:

* **Initialised directories keep their data file.** A directory initialised by the engine
  holds a marker file, ``tstreams.dir`` (JSON, mode 0644: the marker format and a random
  directory id), and the same id under ``directory_id`` in the ``meta`` database. Opening a
  directory whose marker exists but whose ``data.mdb`` is missing, empty, or holds another
  id (a file copied in from elsewhere) raises :class:`DataCorrupted` instead of silently
  starting an empty engine. A directory without the marker but with ``lock.mdb`` and no data
  is refused the same way. Directories of older versions (no marker, data present) open
  normally and get their marker then. Checks and initialisation run under an exclusive
  ``flock`` of the directory, so concurrent first opens by several processes are safe.
* **A creation that never finished is started over.** Before the engine creates anything in
  a new directory it writes ``tstreams.creating``, and removes it once the marker is
  written. A directory that has that file, no marker and no data (creation interrupted, e.g.
  by a full disk) is cleared of LMDB's files (the engine never used them) and created again, instead of being refused as
  lost data.
* **The lock file has real blocks.** LMDB maps ``lock.mdb`` and writes its reader table
  through the map; a sparse file on a full filesystem would kill the process with SIGBUS at
  that write. Its blocks are reserved first (``posix_fallocate``), so a full disk is a
  :class:`StorageFull` error instead.
* **The data file is as long as its header says.** After LMDB reads the meta pages, and
  before any page is touched, ``data.mdb`` must hold ``(last_pgno + 1) * page size`` bytes;
  a shorter (truncated) file would kill the process with SIGBUS on the first read.

``meta`` also records ``format``, the data format:

* absent: created before chunk checksums (its unsealed chunks stay readable, see
  :mod:`.chunks`) and before sealed values;
* ``1``: chunks sealed, other values not;
* ``2`` (:data:`DATA_FORMAT`): every value sealed (:mod:`.seals`). A directory upgraded from
  an absent format also has ``unsealed_chunks`` in ``meta``: its old chunks stay readable.

A directory of format absent or ``1`` is upgraded in place when opened for writing
(:func:`upgrade_values`: every value sealed, in the same LMDB transaction as the new format,
so the upgrade happens completely or not at all), and its marker then says format 3, which
older code refuses. A read-only open (``tstreams check``) never upgrades: it reads the values
unsealed. A marker of format 3 with a data format other than ``2`` is damage.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import lmdb

from ...errors import DataCorrupted, StorageFull
from . import seals
from .keys import U64

MARKER = "tstreams.dir"
MARKER_FORMAT = 3
#: marker formats this code opens: 1 kept the commit-log sequence in ``meta`` (updated by
#: every commit); 2 takes it from the log's last key (see ``reads.log_seq``); 3 seals every
#: value (data format 2). Code that knows only format 1 would reuse sequence numbers in a
#: format-2 directory, and code that knows only format 2 would misread sealed values, so an
#: older directory is upgraded in place (its marker rewritten) when opened for writing, and
#: older code refuses it from then on.
READABLE_MARKER_FORMATS = (1, 2, 3)
#: meta "format": 1 = chunks sealed with a checksum; 2 = every value sealed (:mod:`.seals`)
DATA_FORMAT = 2
CHUNKS_SEALED_FORMAT = 1
DATA_FILE = "data.mdb"
LOCK_FILE = "lock.mdb"
CREATING = "tstreams.creating"
#: bytes of ``lock.mdb`` reserved before LMDB maps it: its header and the reader table of
#: ``max_readers`` readers (64 bytes each)
LOCK_HEADER = 192
READER_SIZE = 64
ID_KEY = b"directory_id"
FORMAT_KEY = b"format"
#: meta key (sealed, empty payload) of a directory upgraded from before chunk checksums
LEGACY_CHUNKS_KEY = b"unsealed_chunks"
#: meta keys stored without a seal (every other meta value is sealed)
UNSEALED_META = (ID_KEY, FORMAT_KEY)
#: the databases whose values are sealed (meta: all but :data:`UNSEALED_META`)
SEALED_DBS = ("meta", "streams", "parts", "txns", "offsets", "markers", "log", "state")


@contextmanager
def init_lock(path: str) -> Iterator[None]:
    """Exclusive ``flock`` on the directory while it is checked and initialised."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def read_marker(path: str) -> str | None:
    """The directory id in the marker file, or None when there is no marker."""
    found = read_marker_doc(path)
    return found[0] if found is not None else None


def read_marker_doc(path: str) -> tuple[str, int] | None:
    """``(directory id, marker format)`` from the marker file, or None when there is none."""
    file = os.path.join(path, MARKER)
    try:
        with open(file, "rb") as f:
            raw = f.read(4096)
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
        fmt = doc["format"]
        if fmt not in READABLE_MARKER_FORMATS:
            raise ValueError(f"unknown marker format {fmt!r} (this version reads {READABLE_MARKER_FORMATS})")
        dir_id = doc["directory_id"]
        if not isinstance(dir_id, str) or not dir_id:
            raise ValueError("no directory id")
        return dir_id, int(fmt)
    except (ValueError, KeyError, TypeError) as exc:
        raise DataCorrupted(f"{file} is damaged ({exc}); it marks {path!r} as an initialised tstreams directory. "
                            "Restore the directory from a backup") from None


def write_marker(path: str, dir_id: str) -> None:
    """Write the marker atomically (temporary file, fsync, rename, fsync of the directory)."""
    file = os.path.join(path, MARKER)
    tmp = file + ".tmp"
    doc: dict[str, Any] = {"format": MARKER_FORMAT, "directory_id": dir_id,
                           "note": "marks an initialised tstreams-embedded directory; do not delete"}
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, json.dumps(doc).encode() + b"\n")
        os.fchmod(fd, 0o644)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, file)
    dfd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def data_size(path: str) -> int | None:
    """Size of ``data.mdb``, or None if it does not exist."""
    try:
        return os.path.getsize(os.path.join(path, DATA_FILE))
    except FileNotFoundError:
        return None


def is_data_directory(path: str) -> bool:
    """Whether ``path`` is a directory holding engine data (a non-empty ``data.mdb``)."""
    return os.path.isdir(path) and bool(data_size(path))


def lock_file_size(max_readers: int) -> int:
    """The size LMDB gives ``lock.mdb`` for ``max_readers`` readers."""
    return LOCK_HEADER + (max_readers - 1) * READER_SIZE


def reserve(file: str, size: int) -> None:
    """Give ``file`` (created if missing) real blocks for its first ``size`` bytes; never
    changes its content. Raises :class:`StorageFull` when the filesystem has no room."""
    fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StorageFull(f"cannot create {file!r}: the disk holding it is full; nothing was written") from None
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # filesystems without fallocate
            raise
    finally:
        os.close(fd)


def begin_creation(path: str) -> None:
    """Mark ``path`` as being created (see module docstring), durably."""
    fd = os.open(os.path.join(path, CREATING), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    sync_dir(path)


def end_creation(path: str) -> None:
    """Creation finished (the marker is written): remove the creation mark."""
    try:
        os.unlink(os.path.join(path, CREATING))
    except FileNotFoundError:
        return
    sync_dir(path)


def sync_dir(path: str) -> None:
    """fsync the directory ``path`` itself (its entries: files created, renamed or removed)."""
    dfd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def check_before_open(path: str, marker_id: str | None) -> bool:
    """Refuse a directory that was initialised but lost its data file; clear one whose
    creation never finished. Returns whether the directory is new (nothing in it yet)."""
    if marker_id is None and os.path.exists(os.path.join(path, CREATING)):
        # creation never finished: the engine never opened it for use, so it holds no data
        for name in (DATA_FILE, LOCK_FILE):
            try:
                os.unlink(os.path.join(path, name))
            except FileNotFoundError:
                pass
        return True
    size = data_size(path)
    if size:
        return False
    what = "missing" if size is None else "empty (0 bytes)"
    if marker_id is not None:
        raise DataCorrupted(
            f"{path!r} is an initialised tstreams directory (it has {MARKER}) but its {DATA_FILE} is {what}: "
            f"the data was lost. Restore {DATA_FILE} from a backup; to start over with an empty engine "
            f"instead, delete {MARKER}, {DATA_FILE} and {LOCK_FILE}"
        )
    if os.path.exists(os.path.join(path, LOCK_FILE)):
        raise DataCorrupted(
            f"{path!r} has {LOCK_FILE} but its {DATA_FILE} is {what}: the data was lost (or its creation was "
            f"interrupted). Restore {DATA_FILE} from a backup; to start over with an empty engine instead, "
            f"delete {LOCK_FILE}"
        )
    return True


def check_size(env: lmdb.Environment, path: str) -> None:
    """Refuse a truncated data file before any page of it is read (see module docstring)."""
    last_pgno = env.info()["last_pgno"]
    psize = env.stat()["psize"]
    need = (last_pgno + 1) * psize
    size = data_size(path) or 0  # read after the header: the file only grows
    if size < need:
        raise DataCorrupted(
            f"{os.path.join(path, DATA_FILE)} is truncated: {size} bytes, but its header says it holds "
            f"{last_pgno + 1} pages of {psize} bytes ({need} bytes). Restore it from a backup"
        )


@dataclass(frozen=True)
class Binding:
    """What :func:`bind` found: the id to write in a missing marker (or None), whether
    unsealed chunks are legacy data that must stay readable, and whether the values are
    sealed (see :mod:`.seals`)."""

    write_id: str | None
    legacy_chunks: bool
    sealed: bool


#: named databases added after the current data format: a directory written before one was
#: added lacks it, and its first write-open creates it (and notes it in ``meta``, so that
#: losing it later is recognised as damage)
ADDED_DATABASES = ("queues",)


def added_database_key(name: str) -> bytes:
    """The ``meta`` key noting that database ``name`` (one of :data:`ADDED_DATABASES`) exists."""
    return b"has_database:" + name.encode()


def bind(txn: lmdb.Transaction, dbs: dict[str, Any], path: str, marker: tuple[str, int] | None, new: bool,
         readonly: bool, created: frozenset[str] = frozenset()) -> Binding:
    """Check (and for a new or older directory, record) the directory id in ``meta``, and
    the data format (upgrading an older one in place unless ``readonly``). ``created``: the
    named databases this open had to create; in a directory of the current format every one
    exists already, so a missing one is damage (its record in LMDB's main database was
    damaged: opening it would silently start it empty)."""
    meta = dbs["meta"]
    marker_id = marker[0] if marker is not None else None
    raw = txn.get(ID_KEY, db=meta)
    stored = bytes(raw).decode("ascii", "replace") if raw is not None else None
    if marker_id is not None and stored != marker_id:
        found = f"directory id {stored!r}" if stored else "no directory id (a new, empty data file)"
        raise DataCorrupted(
            f"{os.path.join(path, DATA_FILE)} does not belong to this directory: {MARKER} says "
            f"{marker_id!r} but the data file has {found}. Put the directory's own {DATA_FILE} back "
            f"(from a backup); to use this data file here, delete {MARKER}"
        )
    fmt = _data_format(txn, meta, path, marker, new, readonly)
    lost = {name for name in created
            if name not in ADDED_DATABASES or txn.get(added_database_key(name), db=meta) is not None}
    if fmt == DATA_FORMAT and not new and lost:
        raise DataCorrupted(f"{os.path.join(path, DATA_FILE)} is damaged: its database(s) {sorted(lost)} are "
                            "missing (their records in LMDB's main database are damaged). Run `tstreams check "
                            "--data DIR` and restore the directory from a backup")
    if not readonly:  # from now on, losing a database added after the data format is damage too
        for name in ADDED_DATABASES:
            key = added_database_key(name)
            if txn.get(key, db=meta) is None:
                txn.put(key, seals.seal(key, b""), db=meta)
    legacy = fmt is None
    if fmt == DATA_FORMAT:
        legacy = txn.get(LEGACY_CHUNKS_KEY, db=meta) is not None
    write_id = None
    if marker_id is None and not readonly:
        if stored is None:
            stored = secrets.token_hex(16)
            txn.put(ID_KEY, stored.encode("ascii"), db=meta)
        write_id = stored
    if fmt != DATA_FORMAT and not readonly:
        upgrade_values(txn, dbs, legacy)
        fmt = DATA_FORMAT
    return Binding(write_id, legacy, fmt == DATA_FORMAT)


def _data_format(txn: lmdb.Transaction, meta: Any, path: str, marker: tuple[str, int] | None,
                 new: bool, readonly: bool) -> int | None:
    """The data format in ``meta`` (None: before chunk checksums); a new directory starts
    at :data:`DATA_FORMAT`. :class:`DataCorrupted` for a value no version wrote, or an older
    format under a marker that says the directory was upgraded."""
    if new:
        if not readonly:
            txn.put(FORMAT_KEY, U64.pack(DATA_FORMAT), db=meta)
        return DATA_FORMAT
    raw = txn.get(FORMAT_KEY, db=meta)
    fmt = U64.unpack(raw)[0] if raw is not None and len(raw) == U64.size else raw
    if fmt not in (None, CHUNKS_SEALED_FORMAT, DATA_FORMAT):
        raise DataCorrupted(f"{os.path.join(path, DATA_FILE)} is damaged: its data format is {fmt!r}, which no "
                            "version wrote. Run `tstreams check --data DIR` and restore it from a backup")
    if marker is not None and marker[1] >= MARKER_FORMAT and fmt != DATA_FORMAT:
        raise DataCorrupted(f"{os.path.join(path, DATA_FILE)} is damaged: its {MARKER} says every value is "
                            f"sealed (marker format {marker[1]}) but its data format is {fmt!r}. Run "
                            "`tstreams check --data DIR` and restore it from a backup")
    return fmt if fmt is None else int(fmt)


def upgrade_values(txn: lmdb.Transaction, dbs: dict[str, Any], legacy_chunks: bool) -> None:
    """Seal every value of a directory written before sealed values, in ``txn`` (see the
    module docstring), and record :data:`DATA_FORMAT`."""
    for name in SEALED_DBS:
        db = dbs.get(name)
        if db is None:
            continue
        cur = txn.cursor(db=db)
        more = cur.first()
        while more:
            key = bytes(cur.key())
            if name != "meta" or key not in UNSEALED_META:
                cur.put(key, seals.seal(key, bytes(cur.value())))
            more = cur.next()
    if legacy_chunks:
        txn.put(LEGACY_CHUNKS_KEY, seals.seal(LEGACY_CHUNKS_KEY, b""), db=dbs["meta"])
    txn.put(FORMAT_KEY, U64.pack(DATA_FORMAT), db=dbs["meta"])
