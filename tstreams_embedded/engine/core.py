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
from collections.abc import Callable, Sequence
from typing import Any

import lmdb

from .. import errors
from . import keys, reads
from . import ops as O
from .apply import Applier
from .backend import Fetched, IndexScan, StreamInfo, TxnData
from .catalog import decode_stream, lookup_stream
from .committer import GroupCommitter
from .iteration import iter_transactions
from .ops import Operation
from .store import DEFAULT_MAP_SIZE, DEFAULT_MAX_MAP_SIZE, Store, as_bytes, entries
from .validate import check_int, check_name

log = logging.getLogger(__name__)

DURABILITY_MODES = ("sync", "strict", "async")
DEFAULT_MAX_ITEM_SIZE = 10 * 1024 * 1024


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


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
        flush_interval: float = 1.0,
    ) -> None:
        if durability not in DURABILITY_MODES:
            raise errors.InvalidArgument(f"durability must be one of {DURABILITY_MODES}, got {durability!r}")
        check_int(max_item_size, "max_item_size", 1, 1 << 31)
        check_int(map_size, "map_size", 1 << 16, 1 << 50)
        if log_retention is not None:
            check_int(log_retention, "log_retention", 0, 1 << 62)
        self.path = os.fspath(path)
        self.durability = durability
        self.max_item_size = max_item_size
        self.log_retention = log_retention
        self.clock = clock or wall_clock_ms
        try:
            self.store = Store(self.path, durability, map_size=map_size, max_map_size=max_map_size)
        except lmdb.Error as exc:
            raise errors.TStreamsError(f"cannot open LMDB environment at {self.path!r}: {exc}") from exc
        self.applier = Applier(self.store, max_item_size)
        self.committer = GroupCommitter(self.store, self.applier, self.clock, sync_durable=durability == "sync")
        self._commit_cv = threading.Condition()
        self.committer.on_commit = self._notify_commit
        self._closed = False
        self._stop = threading.Event()
        self._maintenance: threading.Thread | None = None
        self.compaction_interval = compaction_interval
        self.flush_interval = flush_interval
        if compaction_interval or durability == "async":
            self._maintenance = threading.Thread(target=self._maintain, name="tstreams-maintenance", daemon=True)
            self._maintenance.start()

    # ------------------------------------------------------------------ lifecycle
    @property
    def closed(self) -> bool:
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise errors.EngineClosed(f"engine at {self.path!r} is closed")

    def close(self) -> None:
        """Stop maintenance, flush to disk and close the environment. Idempotent."""
        if self._closed:
            return
        self._stop.set()
        if self._maintenance is not None:
            self._maintenance.join(timeout=30)
        self._closed = True
        with self._commit_cv:
            self._commit_cv.notify_all()
        try:
            self.store.sync()
        finally:
            self.store.close()

    # ------------------------------------------------------------------ writes
    def submit(self, ops: Sequence[Operation], durable: bool = True) -> list[Any]:
        """Apply client ``ops`` atomically; see :class:`~.backend.Backend`. Engine-only
        operations and engine-resolved fields are refused (:func:`.ops.check_client_batch`)."""
        self._check()
        batch = O.check_client_batch(ops)
        if not batch:
            return []
        return self.committer.submit(batch, bool(durable))

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
        return [c if c is not None else next(done) for c in checked]

    def apply_committed(self, now_ms: int, calls: Sequence[Sequence[Operation]],
                        finish: Callable[[lmdb.Transaction, list[tuple[bool, Any]]], Any] | None = None
                        ) -> list[tuple[bool, Any]]:
        """Apply client batches (client-batch rules) as of ``now_ms``: the cluster's apply
        step for a committed log entry. Each call is atomic on its own; all of them and
        ``finish(write_txn, outcomes)`` share one LMDB commit. The same state and the same
        ``now_ms`` give the same results on every node. One ``(ok, results or exception)``
        per call; a call that is not a valid client batch fails alone, deterministically."""
        self._check()
        check_int(now_ms, "now_ms", 0, 2**62)
        checked: list[list[Operation] | BaseException] = []
        for ops in calls:
            try:
                checked.append(O.check_client_batch(ops))
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
        pb = prefix.encode("utf-8")
        with self.store.read() as txn:
            cur = txn.cursor(db=self.store.streams)
            if cur.set_range(pb):
                for k, v in entries(cur.iternext()):
                    if not k.startswith(pb) or (limit is not None and len(out) >= limit):
                        break
                    out.append(decode_stream(k.decode("utf-8"), v))
        return out

    # ------------------------------------------------------------------ reads
    def fetch(self, stream: str, partition: int, after: int, max_txns: int = 256) -> Fetched:
        self._check()
        check_int(after, "after", 0, 2**63 - 1)
        check_int(max_txns, "max_txns", 1, 1 << 20)
        while True:
            now = self.clock()
            with self.store.read() as txn:
                s = reads.scan(txn, self.store, stream, partition, after, 2**63 - 1, max_txns, now)
            if s.expired is None or s.txns:
                return Fetched(s.txns, s.position, s.blocked)
            self._invalidate(stream, partition, s.expired)

    def _invalidate(self, stream: str, partition: int, txn_id: int) -> None:
        self.committer.submit([O.Invalidate(stream, partition, txn_id)], durable=False)

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
        check_int(after, "after", 0, 2**63 - 1)
        check_int(upto, "upto", 0, 2**63 - 1)
        check_int(max_txns, "max_txns", 1, 1 << 20)
        entries: list[tuple[int, int]] = []
        position = after
        while True:
            now = self.clock()
            with self.store.read() as txn:
                s = reads.scan(txn, self.store, stream, partition, position, upto, max_txns - len(entries), now,
                               load=False)
            entries.extend(s.index)
            position = max(position, s.position)
            if s.expired is None:
                return IndexScan(entries, position, s.blocked, s.full)
            self._invalidate(stream, partition, s.expired)  # then scan on past it

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
            raw = txn.get(key.encode("utf-8"), db=self.store.markers)
        return keys.I64.unpack(raw)[0] if raw is not None else None

    def log_seq(self) -> int:
        """The sequence number of the newest commit-log entry (0 if none)."""
        self._check()
        with self.store.read() as txn:
            raw = txn.get(b"log_seq", db=self.store.meta)
        return keys.U64.unpack(raw)[0] if raw else 0

    def wait_for_commit(self, seen: int, timeout: float) -> int:
        """Block until the commit log moves past ``seen`` (woken at once by commits of this
        process, noticed within ``timeout`` for other processes); return the newest sequence."""
        self._check()
        deadline = time.monotonic() + max(0.0, float(timeout))
        while True:
            gen = self.committer.generation
            current = self.log_seq()
            if current > seen or self._closed:
                return current
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return current
            with self._commit_cv:
                if self.committer.generation == gen and not self._closed:
                    self._commit_cv.wait(remaining)

    def now_ms(self) -> int:
        return self.clock()

    def stats(self) -> dict[str, Any]:
        self._check()
        info = self.store.env.info()
        with self.store.read() as txn:
            streams = txn.stat(self.store.streams)["entries"]
            txns = txn.stat(self.store.txns)["entries"]
            log_entries = txn.stat(self.store.log)["entries"]
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
            "max_item_size": self.max_item_size,
        }

    # ------------------------------------------------------------------ commit log
    def read_log(self, from_seq: int, limit: int = 1000) -> list[tuple[int, int, list[Operation]]]:
        """Log entries with ``seq >= from_seq`` as ``(seq, now_ms, ops)``, oldest first."""
        self._check()
        check_int(from_seq, "from_seq", 0, 2**63 - 1)
        check_int(limit, "limit", 1, 1 << 20)
        out = []
        with self.store.read() as txn:
            cur = txn.cursor(db=self.store.log)
            if cur.set_range(keys.U64.pack(from_seq)):
                for k, v in cur.iternext():
                    now_ms, ops = O.unpack_batch(v)
                    out.append((keys.U64.unpack(k)[0], now_ms, ops))
                    if len(out) >= limit:
                        break
        return out

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
        """Delete log entries with ``seq <= upto_seq`` (in slices of 10,000 per write); return
        how many were removed."""
        self._check()
        check_int(upto_seq, "upto_seq", 0, 2**63 - 1)

        def trim_slice(txn: lmdb.Transaction) -> int:
            cur = txn.cursor(db=self.store.log)
            removed = 0
            if cur.first():
                while removed < 10_000 and cur.key() and keys.U64.unpack(cur.key())[0] <= upto_seq:
                    if not cur.delete():
                        break
                    removed += 1
            return removed

        total = 0
        while True:
            n: int = self.committer.run_maintenance(trim_slice)
            total += n
            if n < 10_000:
                return total

    # ------------------------------------------------------------------ maintenance
    def compact(self) -> dict[str, int]:
        """Delete every transaction past its stream's TTL (and its data) and trim the commit
        log to ``log_retention`` entries. Freed pages are reused by later writes.

        Works in slices (``COMPACTION_SLICE`` streams per snapshot, bounded deletions per
        write) so that millions of streams never hold the write lock for long."""
        self._check()
        now = self.clock()
        removed = 0
        after: bytes | None = b""
        while after is not None:
            work, after = self._expired_slice(after, now)
            for i in range(0, len(work), 256):
                removed += self._submit_compaction(work[i : i + 256])
            if after is None:
                break
            time.sleep(0)  # let foreground threads run between slices
        trimmed = 0
        if self.log_retention is not None:
            seq = self.log_seq()
            if seq > self.log_retention:
                trimmed = self.trim_log(seq - self.log_retention)
        return {"transactions_removed": removed, "log_entries_trimmed": trimmed}

    COMPACTION_SLICE = 5000

    def _expired_slice(self, after: bytes, now: int) -> tuple[list[O.Compact], bytes | None]:
        """COMPACT operations for the next slice of streams after name ``after``; the name to
        continue from (None when done)."""
        work: list[O.Compact] = []
        seen = 0
        with self.store.read() as txn:
            cur = txn.cursor(db=self.store.streams)
            tcur = txn.cursor(db=self.store.txns)
            if not cur.set_range(after + b"\x00" if after else b""):
                return work, None
            for k, v in entries(cur.iternext()):
                seen += 1
                info = decode_stream(k.decode("utf-8"), v)
                floor = reads.ttl_floor(info, now)
                if floor > 0:
                    for p in range(info.partitions):
                        first = keys.part_key(info.id, p)
                        head = as_bytes(tcur.key()) if tcur.set_range(first) else b""
                        if head[: keys.PART_LEN] == first and keys.txn_id_of(head) < floor:
                            work.append(O.Compact(info.name, p, floor))
                if seen >= self.COMPACTION_SLICE:
                    return work, k
        return work, None

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
