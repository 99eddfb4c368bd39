"""The applier: every node applies committed log entries, in order, to its engine.

Each entry is applied with :meth:`~tstreams_embedded.engine.storage.core.Core.apply_committed` at the
entry's ``now_ms``, deterministically from the state and the entry alone, so all nodes
compute the same transaction IDs, deadlines and results. Nothing uncommitted is ever
applied.

**Idempotent retries**: client calls carry ``(client_id, seq)``; the applier keeps the
outcomes of the last :data:`DEDUP_WINDOW` requests of each client in the replicated state (a
named database of the state environment, written in the same LMDB transaction as the
effects) and answers a repeated request with its first outcome.

**No fsync on apply**: an entry is applied in an LMDB commit that is not synced (the state
environment has ``sync=False, metasync=False``): the replicated log already holds it durably,
here and on a quorum. A crash of the process loses nothing (the page cache keeps it); a
power loss can lose the last applies, together with the applied index written in the same
commit, so the node restarts from an older applied index and applies the entries after it
again from its log (apply is deterministic, and the de-duplication windows roll back with
the effects, so the replay ends in the same state).

That is safe only while the log still holds every entry after the last *synced* applied
index. So the log is trimmed to its retention (:mod:`.retention`) never past
:attr:`Applier.synced_applied`: before a trim would pass it, the applier syncs the state
(:meth:`Applier.sync_state`, one fsync per trim, not per entry). On a leader, the trim also
keeps what live followers and snapshots in flight need.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import lmdb

from .. import errors
from ..engine.protocol import ops as O
from . import snapshot as snap
from .log import Entry
from .membership import read_members, write_members
from .messages import DEDUP_WINDOW, ClientCall, MaintenanceCall, MembershipCall, decode_call, pack, unpack
from .retention import trim_point

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..engine.storage.core import Core
    from .clock import StateClock
    from .counters import NodeCounters
    from .leader import LeaderState
    from .log import ReplicatedLog
    from .retention import Retention
    from .runtime import Condition, Event, Runtime
    from .snapshot import SnapshotServer
    from .timesource import TimeSource

log = logging.getLogger(__name__)

Outcome = tuple[bool, Any]


def outcome_to_wire(ok: bool, value: Any) -> list[Any]:
    if ok:
        return [True, value]
    name, message = errors.error_to_wire(value)
    return [False, name, message]


def outcome_from_wire(w: Sequence[Any]) -> Outcome:
    if w[0]:
        return True, w[1]
    return False, errors.error_from_wire(str(w[1]), str(w[2]))


class ApplierNode(Protocol):
    """What :class:`Applier` uses of its node: :class:`~.node.Node` is one (a protocol,
    so that this module need not import the node's)."""

    clock: StateClock
    core: Core
    counters: NodeCounters
    cv: Condition
    leader_state: LeaderState | None
    log: ReplicatedLog
    retention: Retention
    runtime: Runtime
    snapshot_server: SnapshotServer
    state_fsync: Callable[[Core], None]
    stopping: Event
    timer: TimeSource


class Applier:
    """Applies ``node``'s committed entries (one thread, :meth:`run`); see the module docstring."""

    def __init__(self, node: ApplierNode) -> None:
        self.node = node
        core = node.core
        self.cdb = core.store.env.open_db(b"cluster")
        with core.store.read() as txn:
            self.applied, self.position = snap.read_applied(txn, self.cdb)
            #: the size quorums are counted on, from the last applied membership entry
            #: (:mod:`.membership`; ``None`` until one was applied: then ``P/config``'s)
            self.members: int | None = read_members(txn, self.cdb)
        #: held while applying entries or swapping the state for a snapshot
        self.lock = node.runtime.lock()
        #: log index -> the outcomes of its calls once applied (None: not yet), for waiting writers
        self.waiting: dict[int, list[Outcome] | None] = {}
        self.log_trimmed = 0
        #: the applied index as of the last fsync of the state (what a power loss cannot undo);
        #: the log is never trimmed past it. At start, what the state holds was synced by the
        #: last close, or is what survived a crash: either way it is on disk now.
        self.synced_applied = self.applied
        self.state_syncs = 0
        self.trim_due = False  # an apply outside run() left the trim to it

    def reload(self) -> None:
        """After a snapshot replaced the state: reopen the cluster database, read the size.
        (The caller syncs it with :meth:`sync_state` once the applied index is the snapshot's.)"""
        self.cdb = self.node.core.store.env.open_db(b"cluster")
        with self.node.core.store.read() as txn:
            self.members = read_members(txn, self.cdb) or self.members

    def run(self) -> None:
        node = self.node
        cv = node.cv
        while not node.stopping.is_set():
            with cv:
                if node.log.commit_index <= self.applied and not self.trim_due:
                    cv.wait(0.5)
                    continue
            with self.lock:
                failed = not self.apply_committed()
                self.trim_due = False
                try:
                    self.trim_log()
                except Exception:  # noqa: BLE001 - trimming is retried after the next apply
                    log.exception("trimming the log failed")
            if failed:
                node.stopping.wait(0.5)

    def apply_now(self) -> None:
        """Apply what is committed in the calling thread, unless an apply is under way: the
        leader's acknowledging thread whose entry just committed (one thread hand-off fewer
        before its answer). Trimming is left to :meth:`run` (within its 0.5 s wait)."""
        if self.node.log.commit_index <= self.applied or not self.lock.acquire(blocking=False):
            return
        try:
            self.apply_committed()
            self.trim_due = True
        finally:
            self.lock.release()

    def apply_committed(self) -> bool:
        """Apply committed entries after the applied index (up to 256; :attr:`lock` held).
        False if an entry failed to apply (it is retried)."""
        node = self.node
        cv = node.cv
        commit = node.log.commit_index
        for e in node.log.read(self.applied + 1, limit=256):
            if e.index > commit or node.stopping.is_set():
                break
            started = node.timer.monotonic()
            try:
                outcomes = self.apply_entry(e)
            except Exception:  # noqa: BLE001 - e.g. the engine closed under us
                log.exception("applying log entry %d failed", e.index)
                return False
            self.note_applied(e.index, started)
            node.clock.advance(e.now_ms)
            with cv:
                self.applied = e.index
                if e.index in self.waiting:
                    self.waiting[e.index] = outcomes
                cv.notify_all()
        return True

    def note_applied(self, index: int, started: float) -> None:
        """Step timers: the apply of entry ``index`` began at ``started``; on the leader,
        also the time from its commit to now."""
        node = self.node
        now = node.timer.monotonic()
        steps = node.counters.steps
        steps.observe("apply", now - started)
        state = node.leader_state
        if state is not None:
            committed = state.committed_at.pop(index, None)
            if committed is not None:
                steps.observe("commit_to_applied", now - committed)
            for ix in [ix for ix in state.committed_at if ix < index]:
                del state.committed_at[ix]

    def sync_state(self) -> None:
        """Fsync the state (with the node's ``state_fsync``); :attr:`synced_applied` becomes
        the applied index. Called with :attr:`lock` held (no apply runs meanwhile)."""
        applied = self.applied
        self.node.state_fsync(self.node.core)
        self.synced_applied = applied
        self.state_syncs += 1

    def trim_log(self) -> None:
        """Trim the log to the retention (:mod:`.retention`): never past the applied index
        as last synced (:meth:`sync_state` first if the trim would pass it); on the leader,
        keep what live followers and snapshots in flight still need."""
        node = self.node
        r = node.retention
        lg = node.log
        needed: list[int] = []
        state = node.leader_state
        if state is not None:
            live = state.live_nodes
            needed = [m + 1 for n, m in list(state.match.items()) if live is None or n in live]
            needed += node.snapshot_server.needed_from()
        bytes_upto = lg.index_to_fit(r.bytes - r.bytes // 8) if lg.size_bytes > r.bytes else None
        upto = trim_point(r, lg.base_index, lg.last_index, lg.size_bytes, self.applied, needed, bytes_upto)
        if upto > self.synced_applied:
            self.sync_state()
            upto = min(upto, self.synced_applied)
        if upto > lg.base_index:
            self.log_trimmed += lg.trim_upto(upto)

    def apply_entry(self, e: Entry) -> list[Outcome]:
        """Apply one committed entry; deterministic from the state and the entry alone."""
        core = self.node.core
        windows: dict[str, dict[int, Any]] = {}
        outcomes: list[Outcome | None] = [None] * len(e.calls)
        same_as: dict[int, int] = {}  # a repeat inside the entry -> the call it repeats
        first: dict[tuple[str, int], int] = {}
        todo: list[tuple[int, list[O.Operation] | O.MaintenanceBatch]] = []
        members: int | None = None
        calls: list[ClientCall | MaintenanceCall | None] = []
        with core.store.read() as txn:
            for i, raw_call in enumerate(e.calls):
                calls.append(None)
                try:
                    call = decode_call(raw_call)
                except errors.ProtocolError as exc:
                    outcomes[i] = (False, exc)
                    continue
                if isinstance(call, MembershipCall):
                    members = call.size
                    outcomes[i] = (True, call.size)
                    continue
                calls[i] = call
                cid, seq = (call.client_id, call.seq) if isinstance(call, ClientCall) else (None, 0)
                if cid:
                    if cid not in windows:
                        raw = txn.get(b"c" + cid.encode(), db=self.cdb)
                        windows[cid] = dict(unpack(raw)) if raw else {}
                    w = windows[cid]
                    if (cid, seq) in first:
                        same_as[i] = first[(cid, seq)]
                        continue
                    if seq in w:
                        outcomes[i] = outcome_from_wire(w[seq])
                        continue
                    if len(w) >= DEDUP_WINDOW and seq < min(w):
                        outcomes[i] = (False, errors.RetryWindowExceeded(
                            f"request {seq} of client {cid} is older than its last {DEDUP_WINDOW} requests"))
                        continue
                    first[(cid, seq)] = i
                try:
                    ops = O.decode_all(call.rows)
                    todo.append((i, O.MaintenanceBatch(tuple(ops)) if isinstance(call, MaintenanceCall) else ops))
                except errors.TStreamsError as exc:
                    outcomes[i] = (False, exc)

        def finish(wtxn: lmdb.Transaction, results: list[Outcome]) -> None:
            touched = set()
            for (i, _), (ok, value) in zip(todo, results, strict=True):
                call = calls[i]
                if isinstance(call, ClientCall) and call.client_id:
                    windows[call.client_id][call.seq] = outcome_to_wire(ok, value)
                    touched.add(call.client_id)
            for cid in touched:
                w = windows[cid]
                keep = dict(sorted(w.items())[-DEDUP_WINDOW:])
                wtxn.put(b"c" + cid.encode(), pack(keep), db=self.cdb)
            if members is not None:
                write_members(wtxn, self.cdb, members)
            wtxn.put(snap.APPLIED_KEY, snap.encode_applied(snap.Position(e.index, e.epoch, e.now_ms)), db=self.cdb)

        results = core.apply_committed(e.now_ms, [ops for _, ops in todo], finish)
        if members is not None:
            self.members = members
            log.info("membership: %d nodes from log index %d", members, e.index)
        for (i, _), res in zip(todo, results, strict=True):
            outcomes[i] = res
        for i, j in same_as.items():
            outcomes[i] = outcomes[j]
        return [o if o is not None else (False, errors.TStreamsError("no outcome")) for o in outcomes]

    def stored_outcome(self, cid: str | None, seq: int) -> Outcome:
        """The outcome of request ``seq`` of client ``cid`` from the replicated window."""
        if cid is None:
            return (False, errors.ClusterUnavailable("the outcome of this write is not known; retry it"))
        with self.node.core.store.read() as txn:
            raw = txn.get(b"c" + cid.encode(), db=self.cdb)
        w = dict(unpack(raw)) if raw else {}
        if seq in w:
            return outcome_from_wire(w[seq])
        return (False, errors.ClusterUnavailable("the outcome of this write is not known; retry it"))
