"""Backup copies: a consistent, compacted copy of an engine's LMDB environment in a
temporary directory, read in pieces (what ``Backend.backup_begin``/``backup_read``/
``backup_end`` serve for ``tstreams backup --connect``), and the helpers :mod:`..operator.backup`
shares: a file's CRC32C and a copy's newest commit-log entry."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
import time
import uuid
from typing import Any

import lmdb
from crc32c import crc32c

from ... import errors
from ..protocol.backend import BackupCopy
from ..protocol.validate import check_int
from . import commitlog
from .reads import log_seq
from .store import Store

DATA_FILE = "data.mdb"
_COPY_CHUNK = 1 << 20


def file_crc(path: str) -> tuple[int, int]:
    """``(CRC32C, size)`` of a file."""
    crc = 0
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_COPY_CHUNK):
            crc = crc32c(chunk, crc)
            size += len(chunk)
    return crc, size


def copy_with_crc(env: lmdb.Environment, directory_path: str) -> tuple[int, int]:
    """Write a compacted copy of ``env`` as ``directory_path/data.mdb`` in one pass: LMDB
    writes the copy into a pipe (``env.copyfd``, one read snapshot), and this thread
    computes its CRC32C while writing it to the file, then syncs it. Returns ``(CRC32C,
    size)``. (Reading the copy back afterwards would go to the disk: LMDB writes copies
    with O_DIRECT, past the page cache.)"""
    read_end, write_end = os.pipe()
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            env.copyfd(write_end, compact=True)
        except BaseException as exc:  # noqa: BLE001 - reported to the reading side
            failure.append(exc)
        finally:
            os.close(write_end)

    try:
        fcntl.fcntl(read_end, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except OSError:
        pass  # a smaller pipe only costs more wake-ups
    writer = threading.Thread(target=produce, name="tstreams-backup-copy", daemon=True)
    writer.start()
    crc = 0
    size = 0
    try:
        with open(os.path.join(directory_path, DATA_FILE), "wb") as out:
            while chunk := os.read(read_end, _COPY_CHUNK):
                crc = crc32c(chunk, crc)
                size += len(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    finally:
        os.close(read_end)
        writer.join()
    if failure:
        raise failure[0]
    return crc, size


def newest_entry(path: str) -> tuple[int, int | None]:
    """The newest commit-log sequence number of the copy at ``path`` and that entry's time."""
    store = Store(path, "sync", readonly=True)
    try:
        with store.read() as txn:
            seq = log_seq(txn, store)
            found = commitlog.log_entries(txn, store, seq, 1) if seq else []
    finally:
        store.close()
        lock = os.path.join(path, "lock.mdb")
        if os.path.exists(lock):
            os.unlink(lock)
    return seq, (found[0][1] if found and found[0][0] == seq else None)


# --------------------------------------------------------------------------- copies for remote backups
#: the most bytes one ``backup_read`` returns
MAX_BACKUP_READ = 4 << 20
#: copies not ended within this many seconds are dropped at the next ``backup_begin``
COPY_TTL = 3600.0


class BackupCopies:
    """The backup copies an engine made for remote backups (``Backend.backup_begin``): each
    a compacted copy in its own temporary directory, read in pieces and then dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._copies: dict[str, tuple[str, float]] = {}  # token -> (directory, made at)

    def begin(self, env: lmdb.Environment) -> BackupCopy:
        self._expire()
        where = tempfile.mkdtemp(prefix="tstreams-backup-")
        try:
            crc, size = copy_with_crc(env, where)
            seq, at = newest_entry(where)
        except BaseException:
            shutil.rmtree(where, ignore_errors=True)
            raise
        token = uuid.uuid4().hex
        with self._lock:
            self._copies[token] = (where, time.monotonic())
        return BackupCopy(token, size, crc, seq, at)

    def read(self, token: Any, offset: Any, size: Any) -> bytes:
        check_int(offset, "offset", 0, 2**63 - 1)
        check_int(size, "size", 1, MAX_BACKUP_READ)
        with self._lock:
            found = self._copies.get(token) if isinstance(token, str) else None
        if found is None:
            raise errors.InvalidArgument(f"no backup copy {token!r} here (it ended, expired, or was made by another "
                                         "node or process): start the backup again")
        with open(os.path.join(found[0], DATA_FILE), "rb") as f:
            f.seek(offset)
            return f.read(size)

    def end(self, token: Any) -> None:
        with self._lock:
            found = self._copies.pop(token, None) if isinstance(token, str) else None
        if found is not None:
            shutil.rmtree(found[0], ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            copies, self._copies = list(self._copies.values()), {}
        for where, _ in copies:
            shutil.rmtree(where, ignore_errors=True)

    def _expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            old = [t for t, (_, made) in self._copies.items() if now - made > COPY_TTL]
        for token in old:
            self.end(token)


