"""The embedded storage engine: :class:`Core` implements :class:`Backend` on one LMDB directory.

Writes go through :class:`~.committer.GroupCommitter` as operation batches; reads use LMDB
snapshots (:mod:`.reads`). A maintenance thread compacts expired transactions, trims the
commit log, and in ``async`` mode flushes to disk every ``flush_interval`` seconds.

Durability modes (``durability=``):

``"sync"`` (default)
    A durable write (checkpoint, instant, group checkpoint, offsets, stream admin) returns
    only after ``fdatasync`` of the data file. Acknowledged data survives a process kill and
    an OS crash. Opening transactions and flushing their data are not synced on their own
    (they only matter once checkpointed). LMDB runs ``NOSYNC`` with one explicit sync per
    commit group, so on a power cut *during* a commit the integrity of the newest commit
    depends on the filesystem keeping write order (LMDB's documented ``NOSYNC`` caveat).
``"strict"``
    LMDB's own two-step commit (pages synced, then the meta page synced) on every group:
    survives a power cut at any moment on any filesystem, at about half the commit rate.
``"async"``
    Nothing waits for the disk. A process kill loses nothing (pages are in the OS cache);
    an OS crash or power cut may lose the commits of the last ``flush_interval`` seconds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import lmdb

from ... import errors
from ...ids import ID_MULTIPLIER, MAX_ID
from ..protocol import ops as O
from ..protocol import schedules
from ..protocol.backend import (
    MAX_DESCRIBED_PARTITIONS,
    BackupCopy,
    ConsumerInfo,
    Fetched,
    IndexScan,
    PartitionInfo,
    QueueStatus,
    StoreScan,
    StreamInfo,
    TxnData,
)
from ..protocol.iteration import iter_transactions
from ..protocol.ops import Operation
from ..protocol.validate import MAX_FETCH, check_int, check_interval, check_name, check_wait, utf8
from . import (
    apply,  # noqa: F401  (registers every record's apply handler)
    commitlog,
    inspection,
    keys,
    paging,
    queue_reads,
    reads,
)
from . import state_stores as state
from .apply_base import Applier
from .backup_copies import BackupCopies
from .bulk import PayloadSnapshot
from .catalog import lookup_stream, stream_of
from .commit_waker import CommitWaker
from .committer import GroupCommitter
from .schedule_firer import Firer
from .store import DEFAULT_MAP_SIZE, DEFAULT_MAX_MAP_SIZE, Store, entries, translate
from .unusable import check_files, unusable_directory

log = logging.getLogger(__name__)

DURABILITY_MODES = ("sync", "strict", "async")
DEFAULT_MAX_ITEM_SIZE = 10 * 1024 * 1024
#: default bound of the commit log's size in the data file (see ``log_retention_bytes``)
DEFAULT_LOG_RETENTION_BYTES = 64 * 1024 * 1024


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# ------------------------------------------------------------------------------ fork()
# LMDB forbids using an environment in a child process, and py-lmdb refuses to open the
# same files twice in one process. So, around fork(), every Core of this process is
# quiesced (no write transaction, no read snapshot in flight: their reader slots are shared
# with the parent); in the child each one is closed, which is then harmless to the parent,
# and the child opens environments of its own.
_LIVE: weakref.WeakSet[Core] = weakref.WeakSet()
_FORK_WAIT = 10.0
_quiesced: list[Core] = []


def _before_fork() -> None:
    deadline = time.monotonic() + _FORK_WAIT
    for core in list(_LIVE):
        if not core._closed and core._quiesce(deadline):
            _quiesced.append(core)


def _after_fork_in_parent() -> None:
    while _quiesced:
        _quiesced.pop()._resume()


def _after_fork_in_child() -> None:
    quiet = {id(core) for core in _quiesced}
    _quiesced.clear()
    for core in list(_LIVE):
        core.forked_away(close_environment=id(core) in quiet)
    _LIVE.clear()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)


#: After another process's write wakes a commit wait with nothing new yet, re-read after
#: this many seconds, doubling up to EXTERNAL_RECHECK_LAST (see Core.wait_for_commit).
EXTERNAL_RECHECK_FIRST = 0.001
EXTERNAL_RECHECK_LAST = 0.064


class Core:
    """The embedded engine on one LMDB directory. Thread-safe; several processes may open
    the same directory at once (LMDB serialises their writes)."""

    #: ``now_ms()`` is a cheap local call (consumers may ask it per transaction).
    local_clock = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        durability: str = "sync",
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        max_map_size: int = DEFAULT_MAX_MAP_SIZE,
        max_item_size: int = DEFAULT_MAX_ITEM_SIZE,
        clock: Callable[[], int] | None = None,
        compaction_interval: float | None = 60.0,
        log_retention: int | None = 100_000,
        log_retention_bytes: int | None = DEFAULT_LOG_RETENTION_BYTES,
        flush_interval: float = 1.0,
        fire_schedules: bool = True,
    ) -> None:
        if durability not in DURABILITY_MODES:
            raise errors.InvalidArgument(f"durability must be one of {DURABILITY_MODES}, got {durability!r}")
        check_int(max_item_size, "max_item_size", 1, 1 << 31)
        check_int(map_size, "map_size", 1 << 16, 1 << 50)
        check_int(max_map_size, "max_map_size", map_size, 1 << 50)
        if log_retention is not None:
            check_int(log_retention, "log_retention", 0, 1 << 62)
        if log_retention_bytes is not None:
            check_int(log_retention_bytes, "log_retention_bytes", 0, 1 << 62)
        check_interval(compaction_interval, "compaction_interval", allow_none=True)
        check_interval(flush_interval, "flush_interval")
        if not isinstance(fire_schedules, bool):
            raise errors.InvalidArgument(f"fire_schedules must be True or False, got {fire_schedules!r}")
        if clock is not None and not callable(clock):
            raise errors.InvalidArgument(f"clock must be a callable returning epoch milliseconds, got {clock!r}")
        if not isinstance(path, (str, os.PathLike)):
            raise errors.InvalidArgument(f"path must be a string or path, got {type(path).__name__}")
        if os.path.exists(path) and not os.path.isdir(path):
            raise errors.InvalidArgument(f"data path {os.fspath(path)!r} exists and is not a directory")
        self.path = os.fspath(path)
        self.durability = durability
        self.max_item_size = max_item_size
        self.log_retention = log_retention
        self.log_retention_bytes = log_retention_bytes
        self.clock = clock or wall_clock_ms
        self._store_sizes = (map_size, max_map_size)
        check_files(self.path)
        try:
            self.store = Store(self.path, durability, map_size=map_size, max_map_size=max_map_size)
        except (lmdb.Error, OSError) as exc:
            if "already open in this process" in str(exc):
                raise errors.EngineBusy(
                    f"{self.path!r} is already open in this process (or was open in the parent at a fork() that "
                    "happened in the middle of a write or read); open it with ts.open, which shares it"
                ) from exc
            raise unusable_directory(self.path, exc) or translate(exc, "opening the LMDB environment",
                                                                  self.path) from exc
        self.applier = Applier(self.store, max_item_size)
        self.committer = GroupCommitter(self.store, self.applier, self.clock, sync_durable=durability == "sync")
        self.committer.log_bound = self.log_bound()
        self._commit_cv = threading.Condition()
        self.committer.on_commit = self._notify_commit
        self.external_commits = 0  # wake-ups by other processes' commits (commit_waker.py)
        self._waker = CommitWaker(self.path, self._notify_external_commit)
        self._closed = False
        self._forked = False
        self._backup_copies = BackupCopies()  # copies made for remote backups (backup_begin)
        self._stop = threading.Event()
        self._maintenance: threading.Thread | None = None
        self._firer: Firer | None = None
        self.compaction_interval = compaction_interval
        self.flush_interval = flush_interval
        if compaction_interval or durability == "async":
            self._maintenance = threading.Thread(target=self._maintain, name="tstreams-maintenance", daemon=True)
            self._maintenance.start()
        #: fires due schedules (:mod:`.schedule_firer`); off in a cluster, whose leader fires
        if fire_schedules:
            self._firer = Firer(self.clock, self.next_schedule_due,
                                lambda: self.fire_due_schedules(durable=False), self.sync_firings)
        _LIVE.add(self)

    # ------------------------------------------------------------------ lifecycle
    @property
    def closed(self) -> bool:
        return self._closed

    def forked_away(self, close_environment: bool) -> None:
        """This object was inherited through ``fork()``: the child never uses its parent's
        environment (every call raises EngineClosed). It is closed when nothing was in
        flight at the fork (then closing it touches nothing of the parent's); otherwise it
        is left as it is, and the child cannot open that directory again."""
        self._closed = True
        self._forked = True
        if close_environment:
            try:
                self.store.env.close()
            except Exception:  # noqa: BLE001 - the child only needs the files released
                log.exception("closing an environment inherited through fork() failed")

    def _quiesce(self, deadline: float) -> bool:
        """Before fork(): wait for the commit group, the fsync and the read snapshots in
        flight, and hold new ones (until :meth:`_resume`). Whether all are held; on ``False``
        nothing is."""
        if not self.committer.pause(deadline):
            return False
        if not self.store.hold_snapshots(deadline):
            self.committer.resume()
            return False
        return True

    def _resume(self) -> None:
        self.store.release_snapshots()
        self.committer.resume()

    def _check(self) -> None:
        if self._closed:
            raise errors.EngineClosed(f"engine at {self.path!r} is closed")

    def close(self) -> None:
        """Stop maintenance, let the commit in progress finish, flush to disk and close the
        environment. Writes that had not started fail with :class:`EngineClosed`, and so do
        reads that had not started. Idempotent."""
        if self._closed:
            return
        _LIVE.discard(self)
        self._stop.set()
        if self._maintenance is not None:
            self._maintenance.join(timeout=30)
        if self._firer is not None:
            self._firer.stop()
        self._closed = True
        with self._commit_cv:
            self._commit_cv.notify_all()
        self._waker.close()
        try:
            self.committer.close()
        finally:
            self._backup_copies.close()
            self.store.close()

    def reopen(self, replace: Callable[[], None]) -> None:
        """Close the LMDB environment, call ``replace()`` (which may swap the directory's data
        file for another, e.g. a cluster snapshot), and open the directory again: same object,
        new contents. Meant for an engine nobody else writes to (a cluster follower): calls
        made meanwhile fail with :class:`EngineClosed`. Only for ``compaction_interval=None``
        engines in ``sync``/``strict`` mode (no maintenance thread)."""
        self._check()
        if self._maintenance is not None or self._firer is not None:
            raise errors.InvalidArgument("reopen() needs an engine without a maintenance thread "
                                         "(compaction_interval=None, fire_schedules=False)")
        self.committer.close()
        self.store.close()
        self._waker.close()  # it watches the old data file; the next wait starts a new one
        self._waker = CommitWaker(self.path, self._notify_external_commit)
        try:
            replace()
        finally:
            map_size, max_map_size = self._store_sizes
            try:
                self.store = Store(self.path, self.durability, map_size=map_size, max_map_size=max_map_size)
            except (lmdb.Error, OSError) as exc:
                self._closed = True
                raise translate(exc, "reopening the LMDB environment", self.path) from exc
            except BaseException:
                self._closed = True
                raise
            self.applier = Applier(self.store, self.max_item_size)
            self.committer = GroupCommitter(self.store, self.applier, self.clock,
                                            sync_durable=self.durability == "sync")
            self.committer.log_bound = self.log_bound()
            self.committer.on_commit = self._notify_commit
            self._notify_commit()

    # ------------------------------------------------------------------ writes
    def submit(self, ops: Sequence[Operation], durable: bool = True) -> list[Any]:
        """Apply client ``ops`` atomically; see :class:`~..protocol.backend.Backend`. Engine-only
        operations and engine-resolved fields are refused (:func:`..protocol.ops.check_client_batch`)."""
        self._check()
        batch = O.check_client_batch(ops)
        if not batch:
            return []
        results = self.committer.submit(batch, bool(durable))
        self._wake_firer(batch)
        return results

    def _wake_firer(self, batch: Sequence[Operation]) -> None:
        """A batch that stored a schedule wakes the firer: it may be due first."""
        if self._firer is not None and any(type(op) is O.Schedule for op in batch):
            self._firer.wake()

    def submit_many(self, calls: Sequence[tuple[Sequence[Operation], bool]]) -> list[tuple[bool, Any]]:
        """Several independent client ``(ops, durable)`` requests in one commit group and one
        fsync; one ``(True, results)`` or ``(False, exception)`` per request (see the committer)."""
        self._check()
        checked: list[tuple[bool, Any] | None] = []
        todo: list[tuple[list[Operation], bool]] = []
        for ops, durable in calls:
            try:
                todo.append((O.check_client_batch(ops), bool(durable)))
                checked.append(None)
            except errors.TStreamsError as exc:
                checked.append((False, exc))
        done = iter(self.committer.submit_many(todo))
        for ops, _ in todo:
            self._wake_firer(ops)
        return [c if c is not None else next(done) for c in checked]

    def apply_committed(self, now_ms: int, calls: Sequence[Sequence[Operation] | O.MaintenanceBatch],
                        finish: Callable[[lmdb.Transaction, list[tuple[bool, Any]]], Any] | None = None
                        ) -> list[tuple[bool, Any]]:
        """Apply client batches (client-batch rules) as of ``now_ms``: the cluster's apply
        step for a committed log entry. Each call is atomic on its own; all of them and
        ``finish(write_txn, outcomes)`` share one LMDB commit. The same state and the same
        ``now_ms`` give the same results on every node. One ``(ok, results or exception)``
        per call; a call that is not a valid client batch fails alone, deterministically.
        A :class:`~..protocol.ops.MaintenanceBatch` (a leader's replicated compaction) holds engine
        records that clients cannot submit."""
        self._check()
        check_int(now_ms, "now_ms", 0, 2**62)
        checked: list[list[Operation] | BaseException] = []
        for ops in calls:
            try:
                checked.append(O.check_maintenance_batch(ops.ops) if isinstance(ops, O.MaintenanceBatch)
                               else O.check_client_batch(ops))
            except errors.TStreamsError as exc:
                checked.append(exc)
        good = [c for c in checked if not isinstance(c, BaseException)]

        def merge(applied: list[tuple[bool, Any]]) -> list[tuple[bool, Any]]:
            done = iter(applied)
            return [(False, c) if isinstance(c, BaseException) else next(done) for c in checked]

        def finish_all(txn: lmdb.Transaction, applied: list[tuple[bool, Any]]) -> Any:
            return finish(txn, merge(applied)) if finish is not None else None

        return merge(self.committer.apply_at(now_ms, good, finish_all))

    def _notify_commit(self) -> None:
        with self._commit_cv:
            self._commit_cv.notify_all()

    def _notify_external_commit(self) -> None:
        with self._commit_cv:
            self.external_commits += 1
            self._commit_cv.notify_all()

    # ------------------------------------------------------------------ metadata
    def get_stream(self, name: str) -> StreamInfo:
        self._check()
        with self.store.read() as txn:
            return lookup_stream(txn, self.store, name)

    def list_streams(self, prefix: str = "", limit: int | None = None) -> list[StreamInfo]:
        self._check()
        if not isinstance(prefix, str):
            raise errors.InvalidArgument("prefix must be a string")
        if limit is not None:
            check_int(limit, "limit", 0, 1 << 62)
        out: list[StreamInfo] = []
        pb = utf8(prefix, "prefix")
        with self.store.read() as txn:
            cur = txn.cursor(db=self.store.streams)
            if cur.set_range(pb):
                for k, v in entries(cur.iternext()):
                    if not k.startswith(pb) or (limit is not None and len(out) >= limit):
                        break
                    out.append(stream_of(self.store, k, v))
        return out

    # ------------------------------------------------------------------ reads
    def fetch(self, stream: str, partition: int, after: int, max_txns: int = 256) -> Fetched:
        self._check()
        check_int(after, "after", 0, 2**63 - 1)
        check_int(max_txns, "max_txns", 1, MAX_FETCH)
        while True:
            now = self.clock()
            with self.store.read() as txn:
                s = reads.scan(txn, self.store, stream, partition, after, 2**63 - 1, max_txns, now)
            if s.expired is None or s.txns:
                return Fetched(s.txns, s.position, s.blocked, s.stream_id)
            self._invalidate(stream, partition, s.expired, s.stream_id)

    def _invalidate(self, stream: str, partition: int, txn_id: int, stream_id: int) -> None:
        self.committer.submit([O.Invalidate(stream, partition, txn_id, stream_id)], durable=False)

    # -- paged reads (bounded replies for the network server; see paging.py) --------
    def page_transaction(self, stream: str, partition: int, txn_id: int, cursor: Any, cap: int) -> list[Any]:
        """``get_transaction`` in pages of at most ``cap`` bytes of items:
        ``[txn wire form or None, cursor or None]``."""
        self._check()
        return paging.one(self, stream, partition, txn_id, cursor, cap)

    def page_last_transaction(self, stream: str, partition: int, cursor: Any, cap: int) -> list[Any]:
        """``last_transaction`` in pages: ``[txn wire form or None, cursor or None]``."""
        self._check()
        return paging.last(self, stream, partition, cursor, cap)

    def page_scan(self, stream: str, partition: int, after: int, upto: int, max_txns: int, cursor: Any,
                  cap: int) -> paging.ScanPage:
        """Transactions ``after < id <= upto`` in one page (``fetch``, ``transactions_range``)."""
        self._check()
        return paging.scan(self, stream, partition, after, upto, max_txns, cursor, cap)

    def get_transaction(self, stream: str, partition: int, txn_id: int) -> TxnData | None:
        self._check()
        check_int(txn_id, "transaction id", 0, 2**63 - 1)
        with self.store.read() as txn:
            return reads.get_one(txn, self.store, stream, partition, txn_id, self.clock())

    def transactions_range(self, stream: str, partition: int, from_id: int, to_id: int) -> list[TxnData]:
        self._check()
        check_int(from_id, "from_id", 0, 2**63 - 1)
        check_int(to_id, "to_id", 0, 2**63 - 1)
        return list(iter_transactions(self, stream, partition, max(from_id - 1, 0), to_id, 4096))

    def scan_index(self, stream: str, partition: int, after: int, upto: int = 2**63 - 1,
                   max_txns: int = 4096) -> IndexScan:
        self._check()

        def invalidate(s: reads.Scan) -> None:
            assert s.expired is not None
            self._invalidate(stream, partition, s.expired, s.stream_id)

        return reads.scan_index(self.store, self.clock, stream, partition, after, upto, max_txns, invalidate)

    def last_transaction(self, stream: str, partition: int) -> TxnData | None:
        self._check()
        with self.store.read() as txn:
            return reads.last_checkpointed(txn, self.store, stream, partition, self.clock())

    def last_txn_id(self, stream: str, partition: int) -> int:
        self._check()
        with self.store.read() as txn:
            return reads.last_allocated(txn, self.store, stream, partition)

    def get_offsets(self, stream: str, consumer: str) -> dict[int, int]:
        self._check()
        check_name(consumer, "consumer name")
        with self.store.read() as txn:
            return reads.offsets_of(txn, self.store, stream, consumer)

    def get_marker(self, key: str) -> int | None:
        self._check()
        check_name(key, "marker name")
        with self.store.read() as txn:
            raw = self.store.get(txn, "markers", key.encode("utf-8"))
        return keys.I64.unpack(raw)[0] if raw is not None else None

    def list_consumers(self, stream: str | None = None, limit: int | None = None) -> list[ConsumerInfo]:
        self._check()
        if stream is not None:
            check_name(stream)
        if limit is not None:
            check_int(limit, "limit", 0, 1 << 62)
        with self.store.read() as txn:
            return inspection.list_consumers(txn, self.store, stream, limit)

    def describe_partitions(self, stream: str, first: int = 0, count: int = 256) -> list[PartitionInfo]:
        self._check()
        check_int(first, "first", 0, 2**32 - 1)
        check_int(count, "count", 1, MAX_DESCRIBED_PARTITIONS)
        now = self.clock()
        with self.store.read(buffers=True) as txn:
            info = lookup_stream(txn, self.store, check_name(stream))
            return [inspection.describe_partition(txn, self.store, info, p, now)
                    for p in range(first, min(first + count, info.partitions))]

    def backup_begin(self) -> BackupCopy:
        self._check()
        return self._backup_copies.begin(self.store.env)

    def backup_read(self, token: str, offset: int, size: int) -> bytes:
        self._check()
        return self._backup_copies.read(token, offset, size)

    def backup_end(self, token: str) -> None:
        self._backup_copies.end(token)

    def queue_status(self, stream: str, group: str, full: bool = False) -> QueueStatus:
        self._check()
        with self.store.read() as txn:
            return queue_reads.status(txn, self.store, stream, group, self.clock(), bool(full))

    def first_open_at(self, stream: str, partition: int, ms: int) -> int:
        self._check()
        check_int(ms, "ms", 0, MAX_ID // ID_MULTIPLIER)
        with self.store.read(buffers=True) as txn:
            info = lookup_stream(txn, self.store, check_name(stream))
            return inspection.first_open_at(txn, self.store, info, partition, ms)

    def store_get(self, store: str, key: bytes) -> bytes | None:
        self._check()
        with self.store.read() as txn:
            return state.get(txn, self.store, store, key)

    def store_range(self, store: str, start: bytes | None = None, end: bytes | None = None,
                    limit: int = 10_000) -> list[tuple[bytes, bytes]]:
        self._check()
        state.check_limit(limit)
        with self.store.read() as txn:
            return state.scan(txn, self.store, store, start, end, limit)

    def store_windows(self, store: str, key: bytes | None, end_from: int, end_to: int,
                      limit: int = 10_000) -> list[tuple[bytes, bytes]]:
        self._check()
        state.check_limit(limit)
        with self.store.read() as txn:
            return state.windows(txn, self.store, store, key, end_from, end_to, limit)

    def store_snapshot(self, scans: Sequence[StoreScan],
                       max_bytes: int | None = None) -> list[list[tuple[bytes, bytes]]]:
        self._check()
        bound = state.check_scans(scans, max_bytes)
        with self.store.read() as txn:
            return state.read_scans(txn, self.store, scans, bound)

    def log_seq(self) -> int:
        """The sequence number of the newest commit-log entry (0 if none)."""
        self._check()
        with self.store.read() as txn:
            return reads.log_seq(txn, self.store)

    def wait_for_commit(self, seen: int, timeout: float) -> int:
        """Block until the commit log moves past ``seen`` and return the newest sequence, or
        return it after ``timeout`` seconds. Commits of this process wake the wait at once,
        and so do other processes' commits to the same directory where inotify is available
        (:mod:`.commit_waker`; elsewhere they are noticed when the wait times out)."""
        timeout = check_wait(seen, timeout)
        self._check()
        deadline = time.monotonic() + timeout
        if timeout > 0:
            self._waker.ensure_started()  # before the first read: no commit slips between
        # Another process's commit wakes us when it writes data.mdb, but LMDB publishes the
        # new snapshot to readers (the transaction ID in lock.mdb, shared memory: no file
        # event) just *after* writing the meta page. A wake-up that finds nothing new is
        # therefore followed by re-reads after 1, 2, 4, … 64 ms, not by a wait for the next
        # event (which may never come: the wake-up would be lost until the timeout).
        recheck = 0.0
        while True:
            gen = self.committer.generation
            external = self.external_commits
            current = self.log_seq()
            if current > seen or self._closed:
                return current
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return current
            with self._commit_cv:
                if (self.committer.generation == gen and self.external_commits == external
                        and not self._closed):
                    self._commit_cv.wait(min(remaining, recheck) if recheck else remaining)
            if self.external_commits != external:
                recheck = EXTERNAL_RECHECK_FIRST
            elif recheck:
                recheck = recheck * 2 if recheck < EXTERNAL_RECHECK_LAST else 0.0

    def now_ms(self) -> int:
        return self.clock()

    def stats(self) -> dict[str, Any]:
        self._check()
        info = self.store.env.info()
        with self.store.read() as txn:
            streams = txn.stat(self.store.streams)["entries"]
            txns = txn.stat(self.store.txns)["entries"]
            log_entries = commitlog.footprint(txn, self.store).entries
        return {
            "path": self.path,
            "durability": self.durability,
            "streams": streams,
            "transactions": txns,
            "log_entries": log_entries,
            "log_seq": self.log_seq(),
            "map_size": info["map_size"],
            "last_pgno": info["last_pgno"],
            "commits": self.committer.commits,
            "batches": self.committer.batches,
            "fsyncs": self.committer.fsyncs,
            "group_sizes": self.committer.group_size_counts(),
            "max_item_size": self.max_item_size,
        }

    # ------------------------------------------------------------------ commit log
    def read_log(self, from_seq: int, limit: int = 1000) -> list[tuple[int, int, list[Operation]]]:
        """Log entries with ``seq >= from_seq`` as ``(seq, now_ms, ops)``, oldest first. Chunks
        are read from where they are stored (the log keeps references, see :mod:`..protocol.ops`); a
        chunk deleted since is a :class:`~..protocol.ops.GoneChunk`."""
        self._check()
        check_int(from_seq, "from_seq", 0, 2**63 - 1)
        check_int(limit, "limit", 1, 1 << 20)
        with self.store.read() as txn:
            return commitlog.log_entries(txn, self.store, from_seq, limit)

    def apply_log(self, entries: Sequence[tuple[int, int, Sequence[Operation]]], durable: bool = True) -> int:
        """Replay another engine's log entries (a replica catching up): the privileged path
        that accepts engine-resolved fields and engine-only records. Returns entries applied."""
        self._check()
        for _, now_ms, ops in entries:
            for op in ops:
                O.spec(op)
            self.committer.replay(now_ms, list(ops), durable)
        return len(entries)

    def trim_log(self, upto_seq: int) -> int:
        """Delete log entries with ``seq <= upto_seq`` (in slices of at most
        :data:`~.commitlog.TRIM_SLICE` entries and about :data:`~.commitlog.TRIM_BYTES`
        bytes per write); return how many were removed."""
        self._check()
        check_int(upto_seq, "upto_seq", 0, 2**63 - 1)

        def trim_slice(txn: lmdb.Transaction) -> tuple[int, bool]:
            return commitlog.trim_slice(txn, self.store, upto_seq)

        total = 0
        while True:
            n: int
            more: bool
            n, more = self.committer.run_maintenance(trim_slice, frees=True)
            total += n
            if not more:
                return total

    @contextmanager
    def payload_snapshot(self, stream: str, partition: int) -> Iterator[PayloadSnapshot]:
        """A read-only snapshot of a partition's undecoded chunk payloads for bulk readers
        (:mod:`.bulk`; the Spark source builds Arrow columns from it), valid inside the
        ``with`` block."""
        self._check()
        with self.store.read(buffers=True) as txn:
            yield PayloadSnapshot(txn, self.store, lookup_stream(txn, self.store, stream), partition, self.clock())

    # ------------------------------------------------------------------ schedules
    def next_schedule_due(self) -> int | None:
        """The due time (epoch ms) of the earliest pending schedule (None: none)."""
        first = self.store_range(schedules.NAMESPACE, schedules.DUE, schedules.BY_ID, limit=1)
        return schedules.split_due_key(first[0][0])[0] if first else None

    def due_schedule_firings(self, now: int | None = None) -> list[O.FireSchedule]:
        """The :class:`~..protocol.ops.FireSchedule` records of the schedules due at ``now`` (epoch ms;
        default: the engine's clock), earliest first, at most :data:`..protocol.schedules.FIRE_BATCH`.
        :meth:`fire_due_schedules` applies them; a cluster leader replicates them."""
        now = self.clock() if now is None else now
        # only the due ones are read (keys order by due time; no schedule ID is 0)
        entries = self.store_range(schedules.NAMESPACE, schedules.DUE, schedules.due_key(min(now, 2**63 - 2) + 1, 0),
                                   limit=schedules.FIRE_BATCH)
        return [O.FireSchedule(sid) for sid in schedules.iter_due(iter(entries), now, schedules.FIRE_BATCH)]

    def fire_due_schedules(self, durable: bool = True) -> int:
        """Turn every schedule due on the engine's clock into its transaction (the firer
        thread does this by itself); how many fired. ``durable=False`` (the firer) does not
        wait for an fsync: see :mod:`.schedule_firer` and :meth:`sync_firings`."""
        fired = 0
        while True:
            batch = self.due_schedule_firings()
            if not batch:
                return fired
            fired += sum(1 for txn_id in self.committer.submit(batch, durable=durable) if txn_id is not None)

    def sync_firings(self) -> None:
        """Make the firer's firings durable (an fsync, in ``sync`` mode; ``async`` mode
        flushes on its own schedule and ``strict`` commits are synced already)."""
        if self.durability == "sync":
            self._check()
            self.store.sync()

    # ------------------------------------------------------------------ maintenance
    def compact(self) -> dict[str, int]:
        """Delete every transaction past its stream's TTL (and its data), counting what
        registered consumers had not read (:mod:`.expiry`), and trim the commit log to
        ``log_retention`` entries and ``log_retention_bytes`` bytes (:mod:`.commitlog`).
        Freed pages are reused by later writes.

        Works in slices (``COMPACTION_SLICE`` streams per snapshot, bounded deletions per
        write) so that millions of streams never hold the write lock for long."""
        removed = sum(self._submit_compaction(work) for work in self.expired_compactions())
        return {"transactions_removed": removed, "log_entries_trimmed": self.trim_log_to_retention()}

    COMPACTION_SLICE = 5000
    COMPACTION_BATCH = 256
    #: about the most transactions plus chunks one compaction write deletes. The pages one
    #: commit frees are listed in one LMDB free-list record; a large record takes a run of
    #: overflow pages that a fragmented free list may not have, and LMDB then grows the
    #: file although it holds free pages (see :mod:`.commitlog`): compaction frees space
    #: in small steps instead.
    COMPACTION_STEP = 64

    def expired_compactions(self, now: int | None = None) -> Iterator[list[O.Compact]]:
        """The :class:`~..protocol.ops.Compact` records that delete every transaction past its
        stream's TTL as of ``now`` (epoch ms; default: the engine's clock), in batches of at
        most :attr:`COMPACTION_BATCH` records and about :attr:`COMPACTION_STEP`
        transactions and chunks, computed on consistent slices of :attr:`COMPACTION_SLICE`
        streams. :meth:`compact` applies them here; a cluster leader replicates them so
        that every node deletes the same transactions."""
        self._check()
        now = self.clock() if now is None else now
        after: bytes | None = b""
        while after is not None:
            work, after = self._expired_slice(after, now)
            batch: list[O.Compact] = []
            cost = 0
            for op, n in work:
                if batch and (cost + n > self.COMPACTION_STEP or len(batch) >= self.COMPACTION_BATCH):
                    yield batch
                    batch, cost = [], 0
                batch.append(op)
                cost += n
            if batch:
                yield batch
            if after is not None:
                time.sleep(0)  # let foreground threads run between slices

    def trim_log_to_retention(self) -> int:
        """Trim the commit log to its newest ``log_retention`` entries, and further while
        its pages take more than ``log_retention_bytes`` (each bound off when None); return
        how many entries were removed."""
        self._check()
        removed = 0
        if self.log_retention is not None:
            seq = self.log_seq()
            removed += self.trim_log(seq - self.log_retention) if seq > self.log_retention else 0
        bound = self.log_bound()
        if bound is not None:
            removed += self._trim_log_to_bytes(bound)
        return removed

    def log_bound(self) -> int | None:
        """The commit log's bound in bytes: ``log_retention_bytes``, and at most 1/16 of
        ``max_map_size`` (None when ``log_retention_bytes`` is None)."""
        if self.log_retention_bytes is None:
            return None
        return min(self.log_retention_bytes, self.store.max_map_size // 16)

    def log_footprint(self) -> commitlog.Footprint:
        """The commit log's first sequence number, entries, and bytes in the data file."""
        self._check()
        with self.store.read() as txn:
            return commitlog.footprint(txn, self.store)

    def _trim_log_to_bytes(self, bound: int) -> int:
        """Trim the oldest log entries while the log takes more than ``bound`` bytes."""
        removed = 0
        while True:
            size = self.log_footprint()
            n = commitlog.entries_over(size, bound)
            if not n:
                return removed
            removed += self.trim_log(size.first + n - 1)

    def _expired_slice(self, after: bytes, now: int) -> tuple[list[tuple[O.Compact, int]], bytes | None]:
        """COMPACT operations for the next slice of streams after name ``after``, each with
        the transactions plus chunks it deletes (a partition's expired range is cut into
        records of about :attr:`COMPACTION_STEP`); the name to continue from (None when done)."""
        work: list[tuple[O.Compact, int]] = []
        seen = 0
        with self.store.read() as txn:
            cur = txn.cursor(db=self.store.streams)
            tcur = txn.cursor(db=self.store.txns)
            if not cur.set_range(after + b"\x00" if after else b""):
                return work, None
            for k, v in entries(cur.iternext()):
                seen += 1
                info = stream_of(self.store, k, v)
                floor = reads.ttl_floor(info, now)
                if floor > 0:
                    for p in range(info.partitions):
                        work.extend(self._expired_steps(tcur, info, p, floor))
                if seen >= self.COMPACTION_SLICE:
                    return work, k
        return work, None

    def _expired_steps(self, tcur: lmdb.Cursor, info: StreamInfo, partition: int,
                       floor: int) -> list[tuple[O.Compact, int]]:
        """The Compact records that delete a partition's transactions below ``floor``, each
        deleting about :attr:`COMPACTION_STEP` transactions plus chunks, with that cost."""
        first = keys.part_key(info.id, partition)
        steps: list[tuple[O.Compact, int]] = []
        cost = 0
        if not tcur.set_range(first):
            return steps
        for k, v in entries(tcur.iternext()):
            if k[: keys.PART_LEN] != first or keys.txn_id_of(k) >= floor:
                break
            if cost >= self.COMPACTION_STEP:  # delete what is below this one, then go on
                steps.append((O.Compact(info.name, partition, keys.txn_id_of(k), info.id), cost))
                cost = 0
            cost += 1 + keys.STATE.unpack_from(self.store.unseal("txns", k, v))[2]
        if cost:
            steps.append((O.Compact(info.name, partition, floor, info.id), cost))
        return steps

    def _submit_compaction(self, work: list[O.Compact]) -> int:
        try:
            return sum(self.committer.submit(work, durable=False))
        except errors.StreamNotFound:  # a stream was deleted meanwhile: go one by one
            removed = 0
            for op in work:
                try:
                    removed += self.committer.submit([op], durable=False)[0]
                except errors.StreamNotFound:
                    pass
            return removed

    def _maintain(self) -> None:
        last_compaction = time.monotonic()
        tick = min(x for x in (self.compaction_interval, self.flush_interval if self.durability == "async"
                               else None) if x)
        while not self._stop.wait(tick):
            try:
                if self.durability == "async":
                    self.store.sync()
                if self.compaction_interval and time.monotonic() - last_compaction >= self.compaction_interval:
                    last_compaction = time.monotonic()
                    self.compact()
            except errors.EngineClosed:
                return
            except Exception:  # noqa: BLE001 - maintenance must not die silently, nor kill the app
                log.exception("tstreams maintenance failed; will retry")
