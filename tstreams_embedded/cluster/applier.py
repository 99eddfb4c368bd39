"""The applier: every node applies committed log entries, in order, to its engine.

Each entry is applied with :meth:`~tstreams_embedded.engine.core.Core.apply_committed` at the
entry's ``now_ms``, deterministically from the state and the entry alone, so all nodes
compute the same transaction IDs, deadlines and results. Nothing uncommitted is ever
applied.

**Idempotent retries**: client calls carry ``(client_id, seq)``; the applier keeps the
outcomes of the last :data:`DEDUP_WINDOW` requests of each client in the replicated state (a
named database of the state environment, written in the same LMDB transaction as the
effects) and answers a repeated request with its first outcome.

After applying, the log is trimmed to its retention (:mod:`.retention`), never past the
applied index and, on a leader, keeping what live followers and snapshots in flight need.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import lmdb

from .. import errors
from ..engine import ops as O
from . import snapshot as snap
from .log import Entry
from .membership import read_members, write_members
from .messages import ClientCall, MaintenanceCall, MembershipCall, decode_call, pack, unpack
from .retention import trim_point

if TYPE_CHECKING:
    from .node import Node

log = logging.getLogger(__name__)

DEDUP_WINDOW = 64
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


class Applier:
    """Applies ``node``'s committed entries (one thread, :meth:`run`); see the module docstring."""

    def __init__(self, node: Node) -> None:
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

    def reload(self) -> None:
        """After a snapshot replaced the state: reopen the cluster database, read the size."""
        self.cdb = self.node.core.store.env.open_db(b"cluster")
        with self.node.core.store.read() as txn:
            self.members = read_members(txn, self.cdb) or self.members

    def run(self) -> None:
        node = self.node
        cv = node.cv
        while not node.stopping.is_set():
            with cv:
                if node.log.commit_index <= self.applied:
                    cv.wait(0.5)
                    continue
            with self.lock:
                commit = node.log.commit_index
                failed = False
                for e in node.log.read(self.applied + 1, limit=256):
                    if e.index > commit or node.stopping.is_set():
                        break
                    try:
                        outcomes = self.apply_entry(e)
                    except Exception:  # noqa: BLE001 - e.g. the engine closed under us
                        log.exception("applying log entry %d failed", e.index)
                        failed = True
                        break
                    node.clock.advance(e.now_ms)
                    with cv:
                        self.applied = e.index
                        if e.index in self.waiting:
                            self.waiting[e.index] = outcomes
                        cv.notify_all()
                try:
                    self.trim_log()
                except Exception:  # noqa: BLE001 - trimming is retried after the next apply
                    log.exception("trimming the log failed")
            if failed:
                node.stopping.wait(0.5)

    def trim_log(self) -> None:
        """Trim the log to the retention (:mod:`.retention`): never past the applied index;
        on the leader, keep what live followers and snapshots in flight still need."""
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
