"""Group commit: many writers, one LMDB write transaction, one fsync.

Each :meth:`GroupCommitter.submit` call queues a request. The first thread to find no
commit in progress becomes the *leader*: it takes every queued request, applies them all in
one LMDB write transaction (a request that fails is rolled back alone, see
:meth:`GroupCommitter._write_group`), appends each applied batch to the commit log under the
next sequence number, commits once and wakes the others. Durable requests then wait for one
shared fsync (``sync`` mode). A single thread therefore pays no hand-off.

Concurrent durable writers share one transaction *and* one fsync (true group commit):

* a durable request that arrives while an fsync is running needs the *next* fsync anyway,
  so it is not committed at once: it waits, with every other that arrives meanwhile, and
  the whole group is committed in one transaction right after the fsync (non-durable
  requests never wait for an fsync);
* a leader of durable requests waits briefly (``GATHER_WAIT``) for the writers that recent
  groups had and that are mid-call now (``_expect``, adapted to the groups that really
  form, so a lone writer never waits). ``group_sizes`` counts the groups by size;
* the leader runs the group's fsync itself before it lets the group's threads return, and
  every waiting thread sleeps on a lock of its own: each is woken once, by the event that
  concerns it (its group finished, or leadership is free and its request is first in the
  queue), not at every commit as with one shared condition (waking threads was a third of
  the CPU time of 8 durable writers).

Guarantees:

* a request is applied completely or not at all, and its log entry is written in the same
  LMDB transaction as its effects;
* ``submit`` returns only after the commit and, when durable in ``sync`` mode, after an
  fsync that started after the commit (fsyncs run outside the write lock, so writers that
  commit while one is in progress share the next one);
* when the map is full the whole group is retried after growing the map: nothing is lost
  and nothing is applied twice;
* deleting data is always possible, even at ``max_map_size`` (see :meth:`GroupCommitter._write_with_room`):
  requests that only free space (:data:`FREEING`, log trims) may use a reserve of the map
  beyond that limit, and pages freed by the last commit are made reusable before a write
  is refused, so that a deletion frees room for new writes at once;
* a full disk fails the group with :class:`~tstreams_embedded.errors.StorageFull`, damaged
  pages with :class:`~tstreams_embedded.errors.DataCorrupted` (:meth:`.Store.translate`);
* :meth:`close` lets the group being written finish, syncs, and fails every request that
  had not started with :class:`~tstreams_embedded.errors.EngineClosed`. A request that was
  committed never raises ``EngineClosed`` (its caller would retry and duplicate it): a
  durable one racing the close returns once the close's fsync covers it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import lmdb

from ... import errors
from ..protocol import ops as O
from ..protocol.ops import Operation
from . import commitlog, keys, reads
from .apply_base import Applier
from .store import Store

log = logging.getLogger(__name__)


#: records that only delete: a batch made of them may use the map's deletion reserve
FREEING = (O.DeleteStream, O.DeleteConsumer, O.Compact)


#: ``meta`` key bumped by :meth:`GroupCommitter._reclaim`
RECLAIM_KEY = b"reclaim"


class _Request:
    __slots__ = ("batch", "durable", "done", "results", "error", "seq", "at", "replay", "fn", "commit_no",
                 "taken", "finished", "waiter", "frees")

    def __init__(self, batch: Any, durable: bool, at: int | None = None, replay: bool = False,
                 fn: Callable[[lmdb.Transaction], Any] | None = None, frees: bool = False) -> None:
        #: whether it only deletes (it may then use the map's deletion reserve)
        self.frees = frees or (fn is None and bool(batch) and all(type(op) in FREEING for op in batch))
        self.batch = batch
        self.durable = durable
        self.at = at  # apply at this time instead of the clock's
        self.replay = replay  # resolved records from a log (engine-resolved fields accepted)
        self.fn = fn
        self.done = False
        self.results: Any = None
        self.error: BaseException | None = None
        self.seq = 0
        self.commit_no = 0
        self.taken = False  # a leader took it into a group
        self.finished = False  # its thread may return (committed, and synced by the leader if durable)
        self.waiter: Any = None  # the lock its sleeping thread waits on (see GroupCommitter._sleep)


class GroupCommitter:
    """Serialises and batches every write of one engine (see module docstring)."""

    def __init__(self, store: Store, applier: Applier, clock: Callable[[], int], sync_durable: bool) -> None:
        self.store = store
        self.applier = applier
        self.clock = clock
        self.sync_durable = sync_durable
        lock = threading.RLock()  # an RLock: Condition's ownership check is then a C call
        self._cv = threading.Condition(lock)
        self._gather = threading.Condition(lock)  # a leader waiting for the writers it expects
        #: durable requests the next leader expects to gather (the size of recent groups)
        self._expect = 1
        self._gathering = False
        self._queue: list[_Request] = []
        self._leading = False
        self.commits = 0
        self.fsyncs = 0
        #: seconds spent in fsyncs (with :attr:`fsyncs`, their mean latency over any interval)
        self.fsync_seconds = 0.0
        self.batches = 0
        #: committed groups by size bucket (1, 2, 4 = 3-4, 8 = 5-8, ...): how many requests share a commit
        self.group_sizes: dict[int, int] = {}
        self.generation = 0  # bumped after every commit; waited on by subscribers
        self.on_commit: Callable[[], None] | None = None
        # durability stage: commits are numbered; one fsync covers every commit before it
        self._sync_cv = threading.Condition()
        self._committed_no = 0
        self._synced_no = 0
        self._syncing = False
        self._fsyncing = False  # an fsync call is running (durable requests wait to commit after it)
        self._urgent = 0  # queued requests that must not wait for an fsync (not durable, or async mode)
        self._closed = False
        #: the commit log's bound in bytes (None: unbounded); a full map trims it to that
        self.log_bound: int | None = None
        self._close_flushed = False  # close() has run its final fsync (see _wait_durable)

    # ------------------------------------------------------------------ public
    def submit(self, batch: Sequence[Operation], durable: bool = True) -> list[Any]:
        """Apply ``batch`` atomically; return one result per operation or raise its error.
        The caller has validated where the batch comes from (see :mod:`.apply`)."""
        results: list[Any] = self._run(_Request(batch, durable))
        return results

    def replay(self, now_ms: int, batch: Sequence[Operation], durable: bool = True) -> list[Any]:
        """Apply an already-resolved batch (from another engine's log) at its original time."""
        results: list[Any] = self._run(_Request(batch, durable, at=now_ms, replay=True))
        return results

    def run_maintenance(self, fn: Callable[[lmdb.Transaction], Any], frees: bool = False) -> Any:
        """Run ``fn(write_txn)`` in the write path; not written to the commit log. With
        ``frees``, ``fn`` only deletes, and may use the map's deletion reserve."""
        req = _Request(None, False, fn=fn, frees=frees)
        return self._run(req)

    def submit_many(self, calls: Sequence[tuple[Sequence[Operation], bool]]) -> list[tuple[bool, Any]]:
        """Apply several independent ``(ops, durable)`` requests in one commit group (each
        atomic on its own) and wait for one fsync covering the durable ones. Returns one
        ``(True, results)`` or ``(False, exception)`` per request, in order. Used by the
        network server to turn a burst of client writes into one commit."""
        reqs = [_Request(ops, durable) for ops, durable in calls]
        if not reqs:
            return []
        self._lead(reqs)
        durable_no = max((r.commit_no for r in reqs if r.error is None and r.durable), default=0)
        if durable_no and self.sync_durable:
            try:
                self._wait_durable(durable_no)
            except errors.TStreamsError as exc:
                return [(False, exc) if r.durable or r.error else (True, r.results) for r in reqs]
        return [(False, r.error) if r.error is not None else (True, r.results) for r in reqs]

    def group_size_counts(self) -> dict[str, int]:
        """Committed groups by number of requests: ``{"1": n, "2": n, "3-4": n, "5-8": n, ...}``."""
        out = {}
        for bucket in sorted(self.group_sizes):
            low = bucket // 2 + 1 if bucket > 2 else bucket
            out[str(bucket) if low == bucket else f"{low}-{bucket}"] = self.group_sizes[bucket]
        return out

    def close(self) -> None:
        """Refuse new requests, let the group being committed finish, flush it to disk, and
        fail the requests still queued with :class:`EngineClosed`. Idempotent."""
        with self._cv:
            self._closed = True
            while self._leading:
                self._cv.wait()
            self._fail_queued()
        with self._sync_cv:
            while self._syncing:
                self._sync_cv.wait()
            self._syncing = True
            target = self._committed_no  # no commit follows: _lead refuses to lead once closed
        flushed = False
        try:
            if not self.store.closed:
                self.store.sync()
            flushed = True
        finally:
            with self._sync_cv:
                self._syncing = False
                if flushed:
                    self._synced_no = max(self._synced_no, target)
                self._close_flushed = True  # durable writers waiting for this fsync may return
                self._sync_cv.notify_all()

    def _fail_queued(self) -> None:
        """(with ``_cv`` held) Fail every queued request: the committer is closed."""
        for r in self._queue:
            r.results = None
            r.error = errors.EngineClosed(f"engine at {self.store.path!r} was closed before this write; "
                                          "nothing of it was written")
            r.done = True
            self._release(r)
        self._queue = []
        self._urgent = 0
        self._cv.notify_all()

    def apply_at(self, now_ms: int, calls: Sequence[Sequence[Operation]],
                 finish: Callable[[lmdb.Transaction, list[tuple[bool, Any]]], Any] | None = None
                 ) -> list[tuple[bool, Any]]:
        """Apply client batches as if the clock read ``now_ms`` (engine-resolved fields are
        computed, never taken from the records), each atomic on its own, all in one LMDB
        commit, and then ``finish(write_txn, outcomes)`` in that same transaction. Not
        synced (a replicated log makes it durable). One ``(True, results)`` or
        ``(False, exception)`` per call. Used by the cluster to apply committed entries
        deterministically on every node."""
        reqs = [_Request(batch, False, at=now_ms) for batch in calls]

        def outcomes() -> list[tuple[bool, Any]]:
            return [(False, r.error) if r.error is not None else (True, r.results) for r in reqs]

        tail = None if finish is None else _Request(None, False, fn=lambda txn: finish(txn, outcomes()))
        group = reqs + [tail] if tail is not None else reqs
        if not group:
            return []
        self._lead(group)
        if tail is not None and tail.error is not None:
            raise tail.error
        return outcomes()

    # ------------------------------------------------------------------ leader/follower
    def _run(self, req: _Request) -> Any:
        self._lead([req])
        if req.error is not None:
            raise req.error
        if req.durable and self.sync_durable and req.commit_no:
            self._wait_durable(req.commit_no)
        return req.results

    def _lead(self, reqs: list[_Request]) -> None:
        """Queue ``reqs`` and return once all are committed (leading a group when no one is)."""
        last = reqs[-1]
        urgent = sum(1 for r in reqs if not (r.durable and self.sync_durable))
        with self._cv:
            self._queue.extend(reqs)
            self._urgent += urgent
            if self._gathering and (urgent or len(self._queue) >= self._expect):
                self._gather.notify()
            while not last.finished:
                if last.taken or self._leading or (self._fsyncing and not self._urgent and not self._closed):
                    # a durable request that arrives during an fsync needs the next one anyway:
                    # it is committed right after this one, with every other that arrives meanwhile
                    self._sleep(last)
                    continue
                if self._closed:
                    self._fail_queued()
                    break
                self._leading = True
                if not self._urgent and len(self._queue) < self._expect:
                    self._gather_writers()
                group, self._queue = self._queue, []
                if not self._urgent and len(group) > self._expect:
                    self._expect = min(len(group), self.MAX_EXPECT)
                self._urgent = 0
                for r in group:
                    r.taken = True
                self._cv.release()
                try:
                    self._commit_group(group)
                finally:
                    self._cv.acquire()
                    self._leading = False
                    self._wake_next()
                    self._cv.notify_all()  # close(), fork quiescing and fsync joiners wait for this
                    self._finish(group)

    def _finish(self, group: list[_Request]) -> None:
        """(leader, with ``_cv`` held, leadership already handed on) Let the group's threads
        return: non-durable requests at once, durable ones after the fsync that covers them,
        which the leader runs itself, so that each waiting thread is woken exactly once."""
        durable_no = 0
        for r in group:
            if r.durable and r.error is None and self.sync_durable and r.commit_no:
                durable_no = max(durable_no, r.commit_no)
            else:
                self._release(r)
        if durable_no:
            self._cv.release()
            try:
                self._wait_durable(durable_no)
            except errors.TStreamsError:
                pass  # each thread meets the failure in its own _wait_durable (it retries, then raises)
            finally:
                self._cv.acquire()
                for r in group:
                    self._release(r)

    def _sleep(self, req: _Request) -> None:
        """(with ``_cv`` held) Sleep until woken by :meth:`_release` or :meth:`_wake_next`.
        A lock per sleeper, released by whoever wakes it: one wake-up per event for the thread
        concerned, instead of every waiter waking at every commit."""
        waiter = threading.Lock()
        waiter.acquire()
        req.waiter = waiter
        self._cv.release()
        try:
            waiter.acquire()
        finally:
            self._cv.acquire()

    @staticmethod
    def _wake(req: _Request) -> None:
        """(with ``_cv`` held) Wake the thread sleeping on ``req``, if one is."""
        waiter = req.waiter
        if waiter is not None:
            req.waiter = None
            waiter.release()

    def _release(self, req: _Request) -> None:
        """(with ``_cv`` held) ``req`` is finished: its thread may return."""
        req.finished = True
        self._wake(req)

    def _wake_next(self) -> None:
        """(with ``_cv`` held) Leadership is free: wake the first queued request's thread,
        which leads the next group (or goes back to sleep while an fsync runs)."""
        for r in self._queue:
            if r.waiter is not None:
                self._wake(r)
                return

    def pause(self, deadline: float) -> bool:
        """Before fork(): wait (until the monotonic ``deadline``) for the commit group and the
        fsync in flight, and hold new ones until :meth:`resume`. Whether both are held; on
        ``False`` nothing is held."""
        with self._cv:
            while self._leading:
                if not self._cv.wait(max(0.0, deadline - time.monotonic())):
                    return False
            self._leading = True  # no new commit group until resume()
        with self._sync_cv:  # nor an fsync (py-lmdb waits for calls in flight before closing)
            while self._syncing and self._sync_cv.wait(max(0.0, deadline - time.monotonic())):
                pass
            if not self._syncing:
                self._syncing = True
                return True
        self._release_leadership()
        return False

    def resume(self) -> None:
        """Release what :meth:`pause` held and wake the queued writers."""
        with self._sync_cv:
            self._syncing = False
            self._sync_cv.notify_all()
        self._release_leadership()

    def _release_leadership(self) -> None:
        with self._cv:
            self._leading = False
            self._cv.notify_all()
            self._wake_next()

    def _gather_writers(self) -> None:
        """(leader, with ``_cv`` held) Wait briefly for the durable writers that recent groups
        had and that are mid-call now, so that they share this commit (and its fsync) instead
        of each committing alone. Adaptive: ``_expect`` follows the size of the groups that
        really form, so a lone writer never waits, and a wait that times out shrinks it."""
        deadline = time.monotonic() + self.GATHER_WAIT
        self._gathering = True
        try:
            while len(self._queue) < self._expect and not self._urgent and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._expect = max(1, len(self._queue))
                    return
                self._gather.wait(remaining)
        finally:
            self._gathering = False

    #: the most writers a leader waits for
    MAX_EXPECT = 64
    #: longest wait of a leader for the writers it expects (seconds)
    GATHER_WAIT = 0.0005

    def _let_writers_join(self) -> None:
        """Before an fsync, let a commit group that is being written (or queued) finish, so
        that the fsync covers it too (bounded to ``JOIN_WAIT`` seconds)."""
        deadline = time.monotonic() + self.JOIN_WAIT
        with self._cv:
            while self._leading or self._queue:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cv.wait(remaining)

    JOIN_WAIT = 0.002

    def _wait_durable(self, commit_no: int) -> None:
        """Return once an fsync that started after commit ``commit_no`` has finished.

        The fsync runs outside the write lock: while one thread syncs, others keep
        committing, and the next fsync covers all of them (this is where durable writers
        share fsyncs)."""
        with self._sync_cv:
            while self._synced_no < commit_no:
                if self._syncing:
                    self._sync_cv.wait()
                    continue
                if self._closed:
                    # committed, so never EngineClosed (a caller would retry and duplicate it):
                    # close() flushes every commit made before it; wait for that fsync
                    if not self._close_flushed:
                        self._sync_cv.wait()
                        continue
                    raise errors.TStreamsError("the write was committed but the fsync at engine close failed, "
                                               "so it may not survive a crash")
                self._syncing = True
                self._sync_cv.release()
                try:
                    self._let_writers_join()
                    with self._sync_cv:
                        target = self._committed_no
                    self._fsyncing = True
                    started = time.monotonic()
                    try:
                        self.store.sync()
                        self.fsync_seconds += time.monotonic() - started
                    finally:
                        with self._cv:
                            self._fsyncing = False
                            self._wake_next()  # the durable requests held during the fsync
                            self._cv.notify_all()
                    self.fsyncs += 1
                except Exception as exc:  # noqa: BLE001
                    raise errors.TStreamsError(
                        f"the write was committed but fsync failed, so it may not survive a crash: {exc}"
                    ) from exc
                finally:
                    self._sync_cv.acquire()
                    self._syncing = False
                    self._sync_cv.notify_all()
                self._synced_no = max(self._synced_no, target)

    def _commit_group(self, group: list[_Request]) -> None:
        try:
            self._write_with_room(group)
            with self._sync_cv:
                self._committed_no += 1
                for r in group:
                    r.commit_no = self._committed_no
        except BaseException as exc:  # noqa: BLE001 - every waiter must learn of the failure
            err = self.store.translate(exc, "commit") if isinstance(exc, Exception) else errors.TStreamsError(
                f"commit failed, nothing was written: {type(exc).__name__}: {exc}"
            )
            for r in group:
                if r.error is None:
                    r.results = None
                    r.error = err
        finally:
            for r in group:
                r.done = True
        self.generation += 1
        if self.on_commit is not None:
            self.on_commit()

    def _write_with_room(self, group: list[_Request]) -> None:
        """Write ``group``, growing the map while it is full. At ``max_map_size``: first make
        the pages that the last commits freed reusable (LMDB reuses a page freed by commit
        ``T`` only from commit ``T + 2`` on) and try again; then commit the group's freeing
        requests alone, in the deletion reserve, and try the rest again (they may now fit);
        only then fail with StorageFull."""
        reclaimed = False
        while True:
            try:
                self._write_group(group)
                return
            except lmdb.MapFullError:
                if self.store.can_grow():
                    self.store.grow()
                    continue
                if not reclaimed:
                    reclaimed = True
                    self._in_reserve(self._reclaim)
                    continue
                freeing = [r for r in group if r.frees]
                if not freeing:
                    if self._trim_log_for_room():
                        reclaimed = False
                        continue
                    self.store.grow()  # raises StorageFull
                    return
                self._in_reserve(functools.partial(self._write_group, freeing))
                group = [r for r in group if not r.frees]
                if not group:
                    return
                reclaimed = False  # that deletion freed pages: try the rest again

    def _in_reserve(self, write: Callable[[], None]) -> None:
        """Run ``write`` (commits that only delete) with the map allowed to grow into the
        deletion reserve, then make the pages it freed reusable and give the reserve back."""
        try:
            while True:
                try:
                    write()
                    self._reclaim()
                    return
                except lmdb.MapFullError:
                    self.store.grow(freeing=True)  # raises StorageFull past the reserve
        finally:
            self.store.shrink_to_limit()

    def _trim_log_for_room(self) -> bool:
        """A full map's last resort before refusing a write: trim the commit log (a bounded
        history; its entries are not data) to :attr:`log_bound` bytes, which it may exceed
        between compactions. Whether anything went."""
        if self.log_bound is None:
            return False
        with self.store.read() as txn:
            size = commitlog.footprint(txn, self.store)
        n = commitlog.entries_over(size, self.log_bound)
        if not n:
            return False
        upto = size.first + n - 1
        log.warning("the LMDB map of %r is full at max_map_size=%d: trimming the commit log's oldest %d entries "
                    "(of %d, %d bytes) to make room", self.store.path, self.store.max_map_size, n,
                    size.entries, size.bytes)

        def trim() -> None:
            while True:
                txn = self.store.begin_write()
                try:
                    _, more = commitlog.trim_slice(txn, self.store, upto)
                    txn.commit()
                except BaseException:
                    txn.abort()
                    raise
                if not more:
                    return

        self._in_reserve(trim)
        return True

    def _reclaim(self) -> None:
        """One small commit, so that the pages freed by the commit before it become reusable
        by the next one (see :meth:`_write_with_room`)."""
        txn = self.store.begin_write()
        try:
            raw = self.store.get(txn, "meta", RECLAIM_KEY)
            self.store.put(txn, "meta", RECLAIM_KEY, keys.U64.pack(keys.U64.unpack(raw)[0] + 1 if raw else 1))
            txn.commit()
        except BaseException:
            txn.abort()
            raise

    #: failed requests after which a group is applied with one nested transaction per
    #: request instead of being restarted without the failed one (see :meth:`_write_group`)
    FLAT_FAILURES = 2

    def _write_group(self, group: list[_Request]) -> None:
        """One LMDB write transaction for the whole group, each request atomic on its own.

        Requests are applied straight into the group's transaction (a nested transaction
        per request costs more than the request itself). When one fails, the transaction
        is aborted and the group is applied again without it: the state and the clock are
        the same, so every other request gets the same result. After ``FLAT_FAILURES``
        failures the rest of the group uses a nested transaction per request instead."""
        for r in group:
            r.error = None
            r.results = None
        now = self.clock()
        live = group
        nested = False
        while live:
            failed = self._try_write(live, now, nested)
            if failed is None:
                return
            live = [r for r in live if r is not failed]
            nested = nested or len(group) - len(live) >= self.FLAT_FAILURES

    def _try_write(self, group: list[_Request], now: int, nested: bool) -> _Request | None:
        """Apply ``group`` in one write transaction and commit it; return the first request
        that failed (transaction aborted, its ``error`` set) or None once committed. With
        ``nested``, a failed request is rolled back alone and the rest is committed."""
        txn = self.store.begin_write()
        try:
            seq = reads.log_seq(txn, self.store)  # the log's own last key: no page of meta dirtied
            for r in group:
                child = self.store.env.begin(write=True, parent=txn) if nested else txn
                try:
                    if r.fn is not None:
                        r.results = r.fn(child)
                    else:
                        at = now if r.at is None else r.at
                        results, resolved = self.applier.apply_batch(child, at, r.batch, replay=r.replay)
                        seq += 1
                        commitlog.put_entry(child, self.store, seq, O.pack_batch(at, resolved))
                        r.results, r.seq = results, seq
                except lmdb.MapFullError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the request fails alone
                    r.results = None
                    r.error = self.store.translate(exc, "request (nothing of it was written)")
                    if not nested:
                        txn.abort()
                        return r
                    child.abort()
                    continue
                if nested:
                    child.commit()
            txn.commit()
        except BaseException:
            txn.abort()
            raise
        done = [r for r in group if r.error is None] if nested else group
        self.commits += 1
        self.batches += len(done)
        self._count_group(len(done))
        return None

    def _count_group(self, size: int) -> None:
        """Count a committed group in :attr:`group_sizes` (buckets 1, 2, 3-4, 5-8, ...)."""
        bucket = 1 << (size - 1).bit_length() if size > 0 else 0
        self.group_sizes[bucket] = self.group_sizes.get(bucket, 0) + 1
