"""The LMDB environment: named databases, read transactions, and map growth.

One environment holds every stream. :class:`Store` owns it and guarantees:

* read transactions never overlap a map resize in this process (``set_mapsize`` requires
  that), through a small readers/resizer gate;
* when the map is full the caller can :meth:`grow` it (doubling, up to ``max_map_size``);
  when another process grew it, the next transaction adopts the new size.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import lmdb
from crc32c import crc32c

from ... import errors
from ...errors import StorageFull
from . import directory, seals


@dataclass(frozen=True)
class StoreUsage:
    """The map and disk use of an environment (:meth:`Store.usage`): ``used_bytes`` are the
    pages up to the highest one in use (free pages inside count: LMDB reuses them), and
    ``disk_bytes`` the blocks ``data.mdb`` occupies on disk."""

    map_bytes: int
    max_map_bytes: int
    used_bytes: int
    disk_bytes: int


def entries(cursor_iter: Iterable[tuple[Any, Any]]) -> Iterator[tuple[bytes, bytes]]:
    """A cursor iteration as ``(key, value)`` bytes pairs (what lmdb yields without
    ``buffers=True``; its type stubs also allow memoryview)."""
    return cast(Iterator[tuple[bytes, bytes]], cursor_iter)


def as_bytes(value: Any) -> bytes:
    """A key or value from lmdb, typed as the ``bytes`` it is (see :func:`entries`)."""
    return cast(bytes, value)


#: Below this many free bytes on its filesystem, an I/O error of a commit is a full disk
#: (LMDB reports a short write, which is what a full disk causes, as EIO).
FULL_DISK_MARGIN = 1 << 20


def disk_free(path: str) -> int:
    """Bytes available on the filesystem of ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def translate(exc: BaseException, action: str, path: str, closed: bool = False) -> errors.TStreamsError:
    """The project error for an exception raised by LMDB (or the OS) during ``action`` on
    the directory ``path``: :class:`StorageFull` for a full disk, :class:`DataCorrupted` for
    a damaged data file, :class:`EngineClosed` once closed, the base class otherwise."""
    if isinstance(exc, errors.TStreamsError):
        return exc
    code = getattr(exc, "code", None) if isinstance(exc, lmdb.Error) else getattr(exc, "errno", None)
    if isinstance(exc, lmdb.DiskError) or code in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull(f"{action} failed: the disk holding {path!r} is full; nothing was written")
    if code == errno.EIO:
        try:
            free = disk_free(path)
        except OSError:
            free = FULL_DISK_MARGIN
        if free < FULL_DISK_MARGIN:
            return StorageFull(f"{action} failed: the disk holding {path!r} is full ({free} bytes free); "
                               "nothing was written")
    if isinstance(exc, (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError,
                        lmdb.VersionMismatchError)):
        return errors.DataCorrupted(f"{action} failed: the LMDB data file in {path!r} is damaged ({exc}); "
                                    f"run `tstreams check --data {path}` and restore it from a backup")
    if isinstance(exc, lmdb.BadTxnError) and not closed:  # LMDB broke the transaction at a damaged page
        return errors.DataCorrupted(f"{action} failed: the LMDB data file in {path!r} is damaged ({exc}); "
                                    f"run `tstreams check --data {path}` and restore it from a backup")
    if closed:
        return errors.EngineClosed(f"engine at {path!r} is closed")
    return errors.TStreamsError(f"{action} failed: {type(exc).__name__}: {exc}")


DB_NAMES = ("meta", "streams", "parts", "txns", "data", "offsets", "markers", "log", "state", "queues")
#: databases a read-only open does without when a directory predates them
OPTIONAL_DBS = ("state", "queues")

MAX_READERS = 1024
DEFAULT_MAP_SIZE = 1 << 30  # 1 GiB to start; the file is sparse and grows with use
DEFAULT_MAX_MAP_SIZE = 1 << 40  # 1 TiB of address space


class _ResizeGate:
    """Many readers or one resizer."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._readers = 0
        self._resizing = False

    def enter_read(self) -> None:
        with self._cv:
            while self._resizing:
                self._cv.wait()
            self._readers += 1

    def exit_read(self) -> None:
        with self._cv:
            self._readers -= 1
            if self._readers == 0 and self._resizing:
                self._cv.notify_all()

    def hold(self, deadline: float) -> bool:
        """Wait (until the monotonic ``deadline``) for the snapshots in flight and admit no
        new one until :meth:`release`; whether it is held (on ``False`` nothing is)."""
        with self._cv:
            while self._resizing or self._readers:
                if not self._cv.wait(max(0.0, deadline - time.monotonic())):
                    return False
            self._resizing = True
            return True

    def release(self) -> None:
        with self._cv:
            self._resizing = False
            self._cv.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cv:
            while self._resizing:
                self._cv.wait()
            self._resizing = True
            while self._readers:
                self._cv.wait()
        try:
            yield
        finally:
            with self._cv:
                self._resizing = False
                self._cv.notify_all()


class Store:
    """An open LMDB environment with the engine's named databases.

    ``durability`` selects the LMDB flags:

    * ``"strict"``: LMDB's own commit protocol (data pages synced, then the meta page synced);
    * ``"sync"`` and ``"async"``: the environment is opened ``NOSYNC`` and the committer calls
      :meth:`sync` itself (after every durable group in ``sync`` mode, periodically in ``async``).
    """

    def __init__(
        self,
        path: str,
        durability: str,
        map_size: int = DEFAULT_MAP_SIZE,
        max_map_size: int = DEFAULT_MAX_MAP_SIZE,
        readonly: bool = False,
    ) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.max_map_size = max(max_map_size, map_size)
        self._closed = False
        self._gate = _ResizeGate()
        strict = durability == "strict"
        with directory.init_lock(path):  # see .directory: refuse damaged directories
            marker = directory.read_marker_doc(path)
            marker_id = marker[0] if marker is not None else None
            new = directory.check_before_open(path, marker_id)
            if new and not readonly:
                directory.begin_creation(path)
            self._reserve_lock_file(readonly)
            self.env = lmdb.open(
                path,
                map_size=map_size,
                max_dbs=len(DB_NAMES) + 2,
                max_readers=MAX_READERS,
                sync=strict,
                metasync=strict,
                lock=True,
                readonly=readonly,
            )
            try:
                directory.check_size(self.env, path)
                if readonly:  # handles opened inside a read-only transaction close with it
                    self.dbs: dict[str, Any] = {}
                    for name in DB_NAMES:
                        try:
                            self.dbs[name] = self.env.open_db(name.encode(), create=False)
                        except lmdb.NotFoundError:
                            if name not in OPTIONAL_DBS:
                                raise
                binding = self._bind(marker, new, readonly)
                write_id = binding.write_id
                if write_id is not None:
                    if not strict:
                        self.env.sync(True)  # the id is on disk before the marker names it
                    directory.write_marker(path, write_id)
                elif marker is not None and marker[1] < directory.MARKER_FORMAT and not readonly:
                    directory.write_marker(path, marker[0])  # upgrade in place (see directory.py)
                if not readonly:
                    directory.end_creation(path)
            except BaseException:
                self.env.close()
                raise
        #: chunks written before chunk checksums may be unsealed (see :mod:`.chunks`)
        self.legacy_chunks = binding.legacy_chunks
        #: whether values are sealed (:mod:`.seals`): always, but in a read-only open of a
        #: directory written before sealed values
        self.sealed = binding.sealed
        #: ``unseal(db name, key, stored value)``: the verified payload (see :mod:`.seals`)
        self.unseal: seals.Unseal = seals.unseal if binding.sealed else seals.unsealed
        self.meta = self.dbs["meta"]
        self.streams = self.dbs["streams"]
        self.parts = self.dbs["parts"]
        self.txns = self.dbs["txns"]
        self.data = self.dbs["data"]
        self.offsets = self.dbs["offsets"]
        self.markers = self.dbs["markers"]
        self.log = self.dbs["log"]
        #: state stores of stream applications (:mod:`.state_stores`); None only in a read-only open
        #: of a directory older than them
        self.state = self.dbs.get("state")
        #: work queue groups (:mod:`..protocol.queuestate`); None only in a read-only open of an older directory
        self.queues = self.dbs.get("queues")

    def _reserve_lock_file(self, readonly: bool) -> None:
        """Real blocks for ``lock.mdb`` before LMDB maps it (see :mod:`.directory`)."""
        try:
            directory.reserve(os.path.join(self.path, directory.LOCK_FILE), directory.lock_file_size(MAX_READERS))
        except OSError as exc:  # a read-only open may lack the right to write it
            if not readonly or exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
    def get(self, txn: lmdb.Transaction, db: str, key: bytes) -> bytes | None:
        """The verified payload of the sealed value of ``key`` in the database named ``db``
        (None if there is none); :class:`~tstreams_embedded.errors.DataCorrupted` if damaged."""
        raw: bytes | None = txn.get(key, db=self.dbs[db])  # type: ignore[assignment]  # memoryview in buffers snapshots
        if raw is None:
            if self.sealed:  # a miss is checked too: a damaged branch page can hide an entry from lookups
                cur = txn.cursor(db=self.dbs[db])
                if self.seek(cur, db, key) and bytes(cur.key()) == key:
                    raise self._misrouted(db, key, key)
            return None
        if not self.sealed:
            return raw
        if crc32c(raw, crc32c(key)) == seals.RESIDUE and len(raw) >= seals.SEAL_LEN:  # seals.unseal, inlined
            return raw[:-seals.SEAL_LEN]
        raise seals.damaged(db, key, raw)

    def put(self, txn: lmdb.Transaction, db: str, key: bytes, payload: bytes) -> None:
        """Store ``payload`` under ``key`` in the database named ``db``, sealed."""
        txn.put(key, seals.seal(key, payload), db=self.dbs[db])

    def seek(self, cur: lmdb.Cursor, db: str, key: bytes) -> bool:
        """``cur.set_range(key)`` on the database named ``db``, with the seals of the entry
        found and of the one before it verified, and that one below ``key``: a key moved out
        of order by damage makes LMDB's binary search land just after it or on it, and a
        damaged branch page sends it too far, so damage cannot make a range read silently
        skip entries (:mod:`.seals`). The cursor ends on the entry found."""
        if not cur.set_range(key):
            if cur.last():  # nothing at or after key: the last entry is the one before
                self._before(db, key, bytes(cur.key()), as_bytes(cur.value()))
            return False
        found = bytes(cur.key())  # bytes: a memoryview in buffers snapshots does not order
        self._verify(db, found, as_bytes(cur.value()))
        if found < key:
            raise self._misrouted(db, key, found)
        if cur.prev():
            self._before(db, key, bytes(cur.key()), as_bytes(cur.value()))
            cur.next()
        else:
            cur.set_range(key)
        return True

    def _before(self, db: str, target: bytes, key: bytes, raw: bytes) -> None:
        """Verify the entry just before where a seek for ``target`` landed."""
        self._verify(db, key, raw)
        if key >= target:
            raise self._misrouted(db, target, key)

    def _verify(self, db: str, key: bytes, raw: bytes) -> None:
        """Verify the seal of an entry a seek passed by (``meta``'s unsealed keys have none)."""
        if db != "meta" or key not in directory.UNSEALED_META:
            self.unseal(db, key, raw)

    @staticmethod
    def _misrouted(db: str, target: bytes, key: bytes) -> errors.DataCorrupted:
        return errors.DataCorrupted(
            f"the {db!r} database is damaged: a lookup of {bytes(target[:40]).hex()} landed beside the "
            f"{seals.describe(db, key)}, out of order (a damaged branch page). Run `tstreams check --data DIR` "
            "for a full report and restore the directory from a backup")

    def _bind(self, marker: tuple[str, int] | None, new: bool, readonly: bool) -> directory.Binding:
        """Open the databases and check (or record, or upgrade) the directory's identity and
        format in one transaction; an upgrade that fills the map grows it and starts over."""
        while True:
            txn = self.env.begin(write=not readonly)
            try:
                created: frozenset[str] = frozenset()
                if not readonly:
                    existing = {bytes(k) for k in txn.cursor().iternext(values=False)}
                    created = frozenset(n for n in DB_NAMES if n.encode() not in existing)
                    self.dbs = {name: self.env.open_db(name.encode(), txn=txn) for name in DB_NAMES}
                binding = directory.bind(txn, self.dbs, self.path, marker, new, readonly, created)
            except lmdb.MapFullError:
                txn.abort()
                self.grow()
                continue
            except BaseException:
                txn.abort()
                raise
            txn.commit()
            return binding

    def _begin_read(self, buffers: bool) -> lmdb.Transaction:
        return self.env.begin(buffers=True) if buffers else self.env.begin(buffers=False)

    @contextmanager
    def read(self, buffers: bool = False) -> Iterator[lmdb.Transaction]:
        """A read-only snapshot. Never overlaps a map resize in this process. LMDB errors
        inside it become project errors (:meth:`translate`). With ``buffers``, keys and
        values are memoryviews into the map, valid inside the snapshot only (reading a
        value's length then touches none of its pages)."""
        self._gate.enter_read()
        try:
            if self._closed:
                raise errors.EngineClosed(f"engine at {self.path!r} is closed")
            try:
                txn = self._begin_read(buffers)
            except lmdb.MapResizedError:
                self._gate.exit_read()
                self.adopt_map_size()
                self._gate.enter_read()
                txn = self._begin_read(buffers)
            try:
                yield txn
            except lmdb.Error as exc:
                raise self.translate(exc, "read") from exc
            finally:
                txn.abort()
        finally:
            self._gate.exit_read()

    def begin_write(self) -> lmdb.Transaction:
        """Begin the (single) write transaction of this process; the caller commits or aborts."""
        if self._closed:
            raise errors.EngineClosed(f"engine at {self.path!r} is closed")
        try:
            return self.env.begin(write=True)
        except lmdb.MapResizedError:
            self.adopt_map_size()
            return self.env.begin(write=True)

    def translate(self, exc: BaseException, action: str) -> errors.TStreamsError:
        """The project error for ``exc`` raised during ``action`` (see :func:`translate`)."""
        return translate(exc, action, self.path, self._closed)

    def adopt_map_size(self) -> None:
        """Take over a map size that another process set."""
        with self._gate.exclusive():
            self.env.set_mapsize(0)

    def can_grow(self) -> bool:
        """Whether the map is below ``max_map_size``."""
        return bool(self.env.info()["map_size"] < self.max_map_size)

    def grow(self, freeing: bool = False) -> None:
        """Double the map size. Raises :class:`StorageFull` at ``max_map_size``; with
        ``freeing`` (a commit that only deletes), at ``max_map_size`` plus the deletion
        reserve (:attr:`deletion_reserve`)."""
        current = self.env.info()["map_size"]
        limit = self.max_map_size + (self.deletion_reserve if freeing else 0)
        if current >= limit:
            raise StorageFull(
                f"LMDB map is full at {current} bytes and max_map_size={self.max_map_size} forbids growing; "
                "nothing was written" + (" (deleting data needed more than the map's deletion reserve)"
                                         if freeing else "; delete data (streams, consumers) to make room")
            )
        new = min(max(current * 2, self.max_map_size), limit) if freeing else min(current * 2, limit)
        with self._gate.exclusive():
            try:
                self.env.set_mapsize(new)
            except lmdb.Error as exc:
                raise StorageFull(f"could not grow the LMDB map to {new} bytes: {exc}") from exc

    @property
    def deletion_reserve(self) -> int:
        """Bytes beyond ``max_map_size`` that commits which only delete may use (so that a
        full map can always be freed): 1/16 of the limit, at least 1 MiB, at most 256 MiB."""
        return min(max(self.max_map_size // 16, 1 << 20), 256 << 20)

    def shrink_to_limit(self) -> None:
        """Give back what a deletion used of the reserve: the map goes back to
        ``max_map_size`` (LMDB keeps it at least as large as the pages in use)."""
        if self.env.info()["map_size"] > self.max_map_size:
            with self._gate.exclusive():
                self.env.set_mapsize(self.max_map_size)

    def sync(self) -> None:
        """Flush every committed page to disk (fdatasync)."""
        self.env.sync(True)

    def usage(self) -> StoreUsage:
        """How much of the map and of the disk the environment uses now."""
        try:
            info = self.env.info()
            page = int(self.env.stat()["psize"])
        except lmdb.Error as exc:
            raise self.translate(exc, "read the map's use") from exc
        try:
            on_disk = os.stat(os.path.join(self.path, "data.mdb")).st_blocks * 512
        except OSError:
            on_disk = 0
        return StoreUsage(map_bytes=int(info["map_size"]), max_map_bytes=self.max_map_size,
                          used_bytes=(int(info["last_pgno"]) + 1) * page, disk_bytes=on_disk)

    def hold_snapshots(self, deadline: float) -> bool:
        """Before fork(): wait (until the monotonic ``deadline``) for the read snapshots in
        flight and admit no new one until :meth:`release_snapshots`; whether they are held."""
        return self._gate.hold(deadline)

    def release_snapshots(self) -> None:
        self._gate.release()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._gate.exclusive():
            self._closed = True
            self.env.close()
