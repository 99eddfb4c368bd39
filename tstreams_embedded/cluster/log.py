"""The replicated log of one cluster node: its own LMDB environment in ``DATA/cluster-log``.

Entries are numbered from 1 without gaps. Each is ``[epoch, now_ms, calls]`` (msgpack),
where ``calls`` is a list of client submits ``[client_id, seq, durable, rows]`` (``rows``:
encoded operation records, :func:`tstreams_embedded.engine.protocol.ops.encode`); a leader's first
entry in its epoch has no calls (it commits everything before it, as in Raft).

Appends are synced (the environment is opened ``NOSYNC`` and each append ends with one
``fdatasync``, as the engine's ``sync`` durability does): an entry a follower acknowledges
is on its disk. The leader may append without syncing and :meth:`ReplicatedLog.sync` while
followers fetch the entry; it counts itself towards a quorum only up to
:attr:`~ReplicatedLog.durable_index`. The commit index is stored with each append (never synced on its
own: after a crash it may lag, and the leader tells it again; the state's applied index is
a floor for it).

**Trimming.** The log keeps a suffix of the history: entries ``first_index … last_index``.
What was trimmed is summed up by its **base** ``(index, epoch, now_ms)`` of the last removed
entry (Raft's *lastIncludedIndex/Term*), stored in the same LMDB transaction as the removal,
so that the log-matching check (``epoch_at(first_index - 1)``) and the leader's clock
(``now_at``) still work at the boundary. :meth:`ReplicatedLog.trim_upto` removes a prefix
(the node decides how far: :mod:`.retention`); :meth:`ReplicatedLog.reset` empties the log
onto a new base after a snapshot was installed (:mod:`.snapshot`). An empty log has the
base ``(0, 0, 0)``, so ``last_index`` is the base index when no entry follows it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from typing import Any, cast

import lmdb
import msgpack

from .. import errors
from .runtime import REAL, Runtime

U64 = struct.Struct(">Q")
BASE = struct.Struct(">QQQ")  # index, epoch, now_ms of the last trimmed entry
_COMMIT = b"commit"
_BASE = b"base"
_BYTES = b"bytes"
TRIM_SLICE = 10_000  # entries removed per write transaction

Call = list[Any]
"""``[client_id | None, seq, durable, rows]``."""


class Entry:
    """One log entry."""

    __slots__ = ("index", "epoch", "now_ms", "calls")

    def __init__(self, index: int, epoch: int, now_ms: int, calls: list[Call]) -> None:
        self.index = index
        self.epoch = epoch
        self.now_ms = now_ms
        self.calls = calls

    def to_wire(self) -> list[Any]:
        return [self.index, self.epoch, self.now_ms, self.calls]

    @classmethod
    def from_wire(cls, v: Sequence[Any]) -> Entry:
        return cls(int(v[0]), int(v[1]), int(v[2]), list(v[3]))


def _pack(epoch: int, now_ms: int, calls: list[Call]) -> bytes:
    return cast(bytes, msgpack.packb([epoch, now_ms, calls], use_bin_type=True))


def _unpack(index: int, raw: bytes) -> Entry:
    epoch, now_ms, calls = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    return Entry(index, epoch, now_ms, calls)


def _env_fsync(env: lmdb.Environment) -> None:
    env.sync(True)


class ReplicatedLog:
    """The node's log. Thread-safe; one writer at a time (an internal lock)."""

    def __init__(self, path: str, map_size: int = 1 << 30,
                 fsync: Callable[[lmdb.Environment], None] | None = None, runtime: Runtime = REAL) -> None:
        """``fsync`` flushes the environment to disk (by default ``env.sync(True)``; tests
        inject one that fails)."""
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.env = lmdb.open(path, map_size=map_size, max_dbs=4, sync=False, metasync=False)
        self.entries = self.env.open_db(b"entries")
        self.meta = self.env.open_db(b"meta")
        self._runtime = runtime
        self.lock = runtime.rlock()
        self._base = (0, 0, 0)
        self._sync_lock = runtime.lock()
        self._last = (0, 0)
        self._last_now = 0
        self._commit = 0
        self._bytes = 0
        self.syncs = 0  # synced write transactions (appends, truncations): for /metrics
        self.sync_seconds = 0.0  # time spent in those fsyncs
        self._fsync = fsync or _env_fsync
        #: the error of a failed fsync: the log takes no more writes until the node restarts
        #: (after a failed fsync, what was written may be lost although a later one succeeds)
        self.failed: OSError | None = None
        with self.env.begin() as txn:
            raw = txn.get(_BASE, db=self.meta)
            if raw:
                self._base = cast(tuple[int, int, int], BASE.unpack(raw))
            cur = txn.cursor(db=self.entries)
            if cur.last():
                idx = U64.unpack(cur.key())[0]
                e = _unpack(idx, cur.value())
                self._last, self._last_now = (idx, e.epoch), e.now_ms
            else:
                self._last, self._last_now = (self._base[0], self._base[1]), self._base[2]
            raw = txn.get(_COMMIT, db=self.meta)
            self._commit = max(self._base[0], min(U64.unpack(raw)[0], self._last[0])) if raw else self._base[0]
            raw = txn.get(_BYTES, db=self.meta)
            if raw:
                self._bytes = U64.unpack(raw)[0]
            else:  # a log written before sizes were kept: count once
                self._bytes = sum(len(v) for _, v in txn.cursor(db=self.entries))
        self._durable = self._last[0]

    # ------------------------------------------------------------------ positions
    @property
    def last_index(self) -> int:
        return self._last[0]

    @property
    def last_epoch(self) -> int:
        return self._last[1]

    @property
    def durable_index(self) -> int:
        """The last index known to be on disk (synced)."""
        return min(self._durable, self._last[0])

    @property
    def commit_index(self) -> int:
        return self._commit

    @property
    def base_index(self) -> int:
        """The index of the last trimmed entry (0 if none): entries start after it."""
        return self._base[0]

    @property
    def base_epoch(self) -> int:
        return self._base[1]

    @property
    def first_index(self) -> int:
        """The index of the oldest entry the log holds (``last_index + 1`` when empty)."""
        return self._base[0] + 1

    @property
    def count(self) -> int:
        """How many entries the log holds."""
        return self._last[0] - self._base[0]

    @property
    def size_bytes(self) -> int:
        """The encoded size of the entries the log holds."""
        return self._bytes

    def position(self) -> tuple[int, int]:
        """``(last epoch, last index)``: the order in which logs are compared for election."""
        return self._last[1], self._last[0]

    def epoch_at(self, index: int) -> int | None:
        """The epoch of entry ``index`` (the base's at the base index, 0 for index 0),
        ``None`` if the log does not know it (trimmed or not there yet)."""
        base = self._base
        if index == base[0]:
            return base[1]
        if index < base[0]:
            return None
        if index == self._last[0]:
            return self._last[1]
        with self.env.begin() as txn:
            raw = txn.get(U64.pack(index), db=self.entries)
        return None if raw is None else _unpack(index, raw).epoch

    def now_at(self, index: int) -> int | None:
        """The ``now_ms`` of entry ``index`` (the base's at the base index), ``None`` if unknown."""
        base = self._base
        if index == base[0]:
            return base[2]
        if index < base[0]:
            return None
        if index == self._last[0]:
            return self._last_now
        with self.env.begin() as txn:
            raw = txn.get(U64.pack(index), db=self.entries)
        return None if raw is None else _unpack(index, raw).now_ms

    def end_of_epoch(self, epoch: int) -> int:
        """The largest index whose entry's epoch is <= ``epoch``, as far as the log knows:
        the base index if only the base qualifies, 0 if nothing does."""
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.entries)
            if cur.last():
                while True:
                    idx = U64.unpack(cur.key())[0]
                    if _unpack(idx, cur.value()).epoch <= epoch:
                        return int(idx)
                    if not cur.prev():
                        break
        return self._base[0] if self._base[1] <= epoch else 0

    def index_to_fit(self, max_bytes: int) -> int:
        """The smallest index up to which trimming leaves at most ``max_bytes`` of entries
        (the base index if the log already fits)."""
        excess = self._bytes - max_bytes
        index = self._base[0]
        if excess <= 0:
            return index
        with self.env.begin() as txn:
            for k, v in txn.cursor(db=self.entries):
                index = U64.unpack(k)[0]
                excess -= len(v)
                if excess <= 0:
                    break
        return int(index)

    # ------------------------------------------------------------------ reads
    def read(self, start: int, limit: int = 256, max_bytes: int = 8 << 20) -> list[Entry]:
        """Entries ``start, start+1, …`` up to :attr:`last_index` as it was when called (at
        most ``limit`` / about ``max_bytes``); empty if ``start`` is not in the log.

        Never past that index: an append commits its entry before it moves the index, and a
        fetch answered in between must not hand a follower an entry the leader's own index
        does not have yet (the follower's next fetch would look ahead of the leader, and be
        told to truncate it)."""
        out: list[Entry] = []
        size = 0
        upto = self._last[0]
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.entries)
            if not cur.set_key(U64.pack(start)):
                return out
            for k, v in cur.iternext():
                raw = v
                index = U64.unpack(k)[0]
                if index > upto:
                    break
                out.append(_unpack(index, raw))
                size += len(raw)
                if len(out) >= limit or size >= max_bytes:
                    break
        return out

    # ------------------------------------------------------------------ writes
    def _put_meta(self, txn: lmdb.Transaction) -> None:
        txn.put(_COMMIT, U64.pack(self._commit), db=self.meta)
        txn.put(_BYTES, U64.pack(self._bytes), db=self.meta)

    def append(self, epoch: int, now_ms: int, calls: list[Call], sync: bool = True) -> int:
        """Append one new entry (leader); return its index once it is on disk (with
        ``sync=False``: once written; call :meth:`sync` before counting it as held)."""
        with self.lock:
            if self.failed is not None:
                raise self.failed
            index = self._last[0] + 1
            raw = _pack(epoch, now_ms, calls)
            with self.env.begin(write=True) as txn:
                txn.put(U64.pack(index), raw, db=self.entries)
                self._bytes += len(raw)
                self._put_meta(txn)
            # a fetch answered here finds the entry in LMDB before last_index has it (see read)
            self._runtime.preempt("log-appended")
            self._last, self._last_now = (index, epoch), now_ms
        if sync:
            self.sync()
        return index

    def sync(self) -> None:
        """Flush every written entry to disk (one fdatasync) and raise :attr:`durable_index`."""
        with self._sync_lock:
            if self.failed is not None:
                raise self.failed
            target = self._last[0]
            started = self._runtime.monotonic()
            try:
                self._fsync(self.env)
            except OSError as exc:
                self.failed = exc
                raise
            self.syncs += 1
            self.sync_seconds += self._runtime.monotonic() - started
            self._durable = max(self._durable, target)

    def append_entries(self, entries: Sequence[Entry]) -> None:
        """Append entries received from the leader (they must follow the last one)."""
        if not entries:
            return
        with self.lock:
            if self.failed is not None:
                raise self.failed
            expect = self._last[0] + 1
            added = 0
            for e in entries:
                if e.index != expect:
                    raise errors.InvalidArgument(f"log entry {e.index} does not follow {expect - 1}")
                expect += 1
            with self.env.begin(write=True) as txn:
                for e in entries:
                    raw = _pack(e.epoch, e.now_ms, e.calls)
                    txn.put(U64.pack(e.index), raw, db=self.entries)
                    added += len(raw)
                self._bytes += added
                try:
                    self._put_meta(txn)
                except BaseException:
                    self._bytes -= added
                    raise
            self._last, self._last_now = (entries[-1].index, entries[-1].epoch), entries[-1].now_ms
            self.sync()

    def truncate_after(self, index: int) -> int:
        """Delete every entry after ``index`` (>= the base index); return how many were removed."""
        with self.lock:
            if index < self._base[0]:
                raise errors.InvalidArgument(f"cannot truncate the log after {index}: it was trimmed up to "
                                             f"{self._base[0]} (a snapshot must replace it)")
            removed = 0
            freed = 0
            with self.env.begin(write=True) as txn:
                cur = txn.cursor(db=self.entries)
                if cur.set_range(U64.pack(index + 1)):
                    while True:
                        freed += len(cur.value())
                        if not cur.delete():
                            break
                        removed += 1
                        if not cur.key():
                            break
                if cur.last():
                    idx = U64.unpack(cur.key())[0]
                    e = _unpack(idx, cur.value())
                    last, last_now = (idx, e.epoch), e.now_ms
                else:
                    last, last_now = (self._base[0], self._base[1]), self._base[2]
                commit = min(self._commit, last[0])
                txn.put(_COMMIT, U64.pack(commit), db=self.meta)
                txn.put(_BYTES, U64.pack(self._bytes - freed), db=self.meta)
            self._last, self._last_now, self._commit = last, last_now, commit
            self._bytes -= freed
            self.sync()
            self._durable = min(self._durable, self._last[0])
            return removed

    def trim_upto(self, index: int) -> int:
        """Remove the entries up to ``index`` (bounded by the last one), oldest first, in
        slices of :data:`TRIM_SLICE` per synced transaction; the base becomes the last removed
        entry. The caller keeps what is still needed (never past its applied index). Returns
        how many entries were removed."""
        total = 0
        while True:
            with self.lock:
                upto = min(index, self._last[0])
                if upto <= self._base[0]:
                    return total
                removed = 0
                freed = 0
                base = self._base
                with self.env.begin(write=True) as txn:
                    cur = txn.cursor(db=self.entries)
                    if cur.first():
                        while removed < TRIM_SLICE:
                            key = cur.key()
                            if not key:
                                break
                            idx = U64.unpack(key)[0]
                            if idx > upto:
                                break
                            raw = cur.value()
                            e = _unpack(idx, raw)
                            base = (idx, e.epoch, e.now_ms)
                            freed += len(raw)
                            removed += 1
                            if not cur.delete():
                                break
                    txn.put(_BASE, BASE.pack(*base), db=self.meta)
                    txn.put(_BYTES, U64.pack(self._bytes - freed), db=self.meta)
                self._base = base
                self._bytes -= freed
                total += removed
                if removed == 0:
                    return total

    def reset(self, index: int, epoch: int, now_ms: int) -> None:
        """Drop every entry and start the log after ``(index, epoch, now_ms)``: the position
        of an installed snapshot. Everything up to ``index`` counts as committed."""
        for name, v in (("index", index), ("epoch", epoch), ("now_ms", now_ms)):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**63:
                raise errors.InvalidArgument(f"log base {name} must be a non-negative integer, got {v!r}")
        with self.lock:
            with self.env.begin(write=True) as txn:
                txn.drop(self.entries, delete=False)
                txn.put(_BASE, BASE.pack(index, epoch, now_ms), db=self.meta)
                txn.put(_COMMIT, U64.pack(index), db=self.meta)
                txn.put(_BYTES, U64.pack(0), db=self.meta)
            self._base = (index, epoch, now_ms)
            self._last, self._last_now = (index, epoch), now_ms
            self._commit = index
            self._bytes = 0
            self.sync()
            self._durable = index

    def set_commit(self, index: int) -> bool:
        """Raise the commit index to ``index`` (bounded by the last entry); True if it moved."""
        with self.lock:
            index = min(index, self._last[0])
            if index <= self._commit:
                return False
            self._commit = index  # stored with the next append (not worth an fsync of its own)
            return True

    def close(self) -> None:
        self.env.close()
