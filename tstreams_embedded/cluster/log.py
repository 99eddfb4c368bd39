"""The replicated log of one cluster node: its own LMDB environment in ``DATA/cluster-log``.

Entries are numbered from 1 without gaps. Each is ``[epoch, now_ms, calls]`` (msgpack),
where ``calls`` is a list of client submits ``[client_id, seq, durable, rows]`` (``rows``:
encoded operation records, :func:`tstreams_embedded.engine.ops.encode`); a leader's first
entry in its epoch has no calls (it commits everything before it, as in Raft).

Appends are synced (the environment is opened ``NOSYNC`` and each append ends with one
``fdatasync``, as the engine's ``sync`` durability does): an entry a follower acknowledges
is on its disk. The leader may append without syncing and :meth:`ReplicatedLog.sync` while
followers fetch the entry; it counts itself towards a quorum only up to
:attr:`~ReplicatedLog.durable_index`. The commit index is stored with each append (never synced on its
own: after a crash it may lag, and the leader tells it again; the state's applied index is
a floor for it).
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Sequence
from typing import Any, cast

import lmdb
import msgpack

U64 = struct.Struct(">Q")
_COMMIT = b"commit"

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


class ReplicatedLog:
    """The node's log. Thread-safe; one writer at a time (an internal lock)."""

    def __init__(self, path: str, map_size: int = 1 << 30) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.env = lmdb.open(path, map_size=map_size, max_dbs=4, sync=False, metasync=False)
        self.entries = self.env.open_db(b"entries")
        self.meta = self.env.open_db(b"meta")
        self.lock = threading.RLock()
        self._sync_lock = threading.Lock()
        self._last = (0, 0)
        self._commit = 0
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.entries)
            if cur.last():
                idx = U64.unpack(cur.key())[0]
                self._last = (idx, _unpack(idx, cur.value()).epoch)
            raw = txn.get(_COMMIT, db=self.meta)
            self._commit = min(U64.unpack(raw)[0], self._last[0]) if raw else 0
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

    def position(self) -> tuple[int, int]:
        """``(last epoch, last index)``: the order in which logs are compared for election."""
        return self._last[1], self._last[0]

    def epoch_at(self, index: int) -> int | None:
        """The epoch of entry ``index`` (0 for index 0), ``None`` if absent."""
        if index == 0:
            return 0
        if index == self._last[0]:
            return self._last[1]
        with self.env.begin() as txn:
            raw = txn.get(U64.pack(index), db=self.entries)
        return None if raw is None else _unpack(index, raw).epoch

    def end_of_epoch(self, epoch: int) -> int:
        """The largest index whose entry's epoch is <= ``epoch`` (0 if none)."""
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.entries)
            if not cur.last():
                return 0
            while True:
                idx = U64.unpack(cur.key())[0]
                if _unpack(idx, cur.value()).epoch <= epoch:
                    return int(idx)
                if not cur.prev():
                    return 0

    # ------------------------------------------------------------------ reads
    def read(self, start: int, limit: int = 256, max_bytes: int = 8 << 20) -> list[Entry]:
        """Entries ``start, start+1, …`` (at most ``limit`` / about ``max_bytes``)."""
        out: list[Entry] = []
        size = 0
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.entries)
            if not cur.set_key(U64.pack(start)):
                return out
            for k, v in cur.iternext():
                raw = v
                out.append(_unpack(U64.unpack(k)[0], raw))
                size += len(raw)
                if len(out) >= limit or size >= max_bytes:
                    break
        return out

    # ------------------------------------------------------------------ writes
    def append(self, epoch: int, now_ms: int, calls: list[Call], sync: bool = True) -> int:
        """Append one new entry (leader); return its index once it is on disk (with
        ``sync=False``: once written; call :meth:`sync` before counting it as held)."""
        with self.lock:
            index = self._last[0] + 1
            with self.env.begin(write=True) as txn:
                txn.put(U64.pack(index), _pack(epoch, now_ms, calls), db=self.entries)
                txn.put(_COMMIT, U64.pack(self._commit), db=self.meta)
            self._last = (index, epoch)
        if sync:
            self.sync()
        return index

    def sync(self) -> None:
        """Flush every written entry to disk (one fdatasync) and raise :attr:`durable_index`."""
        with self._sync_lock:
            target = self._last[0]
            self.env.sync(True)
            self._durable = max(self._durable, target)

    def append_entries(self, entries: Sequence[Entry]) -> None:
        """Append entries received from the leader (they must follow the last one)."""
        if not entries:
            return
        with self.lock:
            with self.env.begin(write=True) as txn:
                expect = self._last[0] + 1
                for e in entries:
                    if e.index != expect:
                        raise ValueError(f"log entry {e.index} does not follow {expect - 1}")
                    txn.put(U64.pack(e.index), _pack(e.epoch, e.now_ms, e.calls), db=self.entries)
                    expect += 1
                txn.put(_COMMIT, U64.pack(self._commit), db=self.meta)
            self._last = (entries[-1].index, entries[-1].epoch)
            self.sync()

    def truncate_after(self, index: int) -> int:
        """Delete every entry after ``index``; return how many were removed."""
        with self.lock:
            removed = 0
            with self.env.begin(write=True) as txn:
                cur = txn.cursor(db=self.entries)
                if cur.set_range(U64.pack(index + 1)):
                    while cur.delete():
                        removed += 1
                c = cur.last()
                if c:
                    idx = U64.unpack(cur.key())[0]
                    self._last = (idx, _unpack(idx, cur.value()).epoch)
                else:
                    self._last = (0, 0)
                if self._commit > self._last[0]:
                    self._commit = self._last[0]
                    txn.put(_COMMIT, U64.pack(self._commit), db=self.meta)
            self.sync()
            self._durable = min(self._durable, self._last[0])
            return removed

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
