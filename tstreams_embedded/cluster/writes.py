"""Client writes on the leader: each burst of submits becomes ONE log entry; the clients
are answered once it is committed (held durably by ``--acks`` nodes) and applied here, and
only while this node surely still leads (its lease from ZooKeeper).

A retried request still in flight on this leader waits for the first one; one already
applied is answered from the replicated de-duplication window (:mod:`.applier`).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .. import errors
from ..engine.protocol import ops as O
from ..net.deferred import Deferred
from .applier import Outcome
from .leader import LeaderState
from .messages import ClientCall, MaintenanceCall
from .runtime import Task
from .zk import required_acks

if TYPE_CHECKING:
    from .applier import Applier
    from .counters import NodeCounters
    from .log import ReplicatedLog
    from .runtime import Condition, Event, Runtime
    from .timesource import TimeSource


def _plain(row: list[Any]) -> list[Any]:
    return [bytes(v) if isinstance(v, (memoryview, bytearray)) else v for v in row]


@dataclass
class Ticket:
    """A write appended to the log (:meth:`Writes.begin`), waiting to be acknowledged."""

    state: LeaderState
    index: int  # its entry (0: only retries of calls already in the log)
    indexes: set[int]  # the entries it waits for
    started: float
    deadline: float
    rows_of: Sequence[tuple[int, ClientCall | MaintenanceCall]]
    waits: list[tuple[int, int, str, int]]
    out: list[Outcome | None]


def fail(out: list[Outcome | None], rows_of: Sequence[tuple[int, Any]], waits: list[tuple[int, int, str, int]],
         exc: errors.TStreamsError) -> None:
    """Every call of ``rows_of`` and ``waits`` without an outcome yet fails with ``exc``."""
    for i in [r[0] for r in rows_of] + [w[0] for w in waits]:
        if out[i] is None:
            out[i] = (False, exc)


def outcomes(out: list[Outcome | None]) -> list[Outcome]:
    return [o if o is not None else (False, errors.ClusterUnavailable("no outcome")) for o in out]


class WritesNode(Protocol):
    """What :class:`Writes` uses of its node: :class:`~.node.Node` is one (a protocol,
    so that this module need not import the node's)."""

    ack_timeout: float
    applier: Applier
    counters: NodeCounters
    cv: Condition
    leader_state: LeaderState | None
    log: ReplicatedLog
    node_id: str
    runtime: Runtime
    stopping: Event
    timer: TimeSource
    zk_ok: bool

    @property
    def acks(self) -> str: ...

    @property
    def nodes(self) -> int: ...

    def advance_commit(self) -> None: ...

    def check_serving(self) -> None: ...

    def leader_hint(self) -> str: ...

    def next_now(self) -> int: ...

    def step_down(self, why: str) -> None: ...

    def wake(self) -> None: ...


class Writes:
    """``node``'s client write path (any number of threads; see the module docstring)."""

    def __init__(self, node: WritesNode) -> None:
        self.node = node
        self.inflight: dict[tuple[str, int], int] = {}  # (client, seq) -> log index, while in flight here
        #: appended writes waiting to be acknowledged, in log order (:meth:`run_acker`)
        self.acking: collections.deque[tuple[Ticket, Deferred]] = collections.deque()
        self.acking_cv = node.runtime.condition()
        self.acker: Task | None = None

    def submit_batch(self, calls: Sequence[Sequence[Any]]) -> list[Outcome]:
        """``[ops, durable, client_id, seq]`` per call: appends them as one log entry, waits
        for it to be committed and applied (:meth:`submit_deferred` without the deferral)."""
        out, rows_of, waits = self.prepare(calls)
        if rows_of or waits:
            try:
                self.replicate(rows_of, waits, out)
            except errors.TStreamsError as exc:
                fail(out, rows_of, waits, exc)
        return outcomes(out)

    def submit_deferred(self, calls: Sequence[Sequence[Any]]) -> list[Outcome] | Deferred:
        """The server's ``submit`` batch function: appends the calls as one log entry on the
        write executor's thread (so entries keep the order of arrival), then returns a
        :class:`~..net.deferred.Deferred` that the acknowledging thread completes once the
        entry is committed and applied. Meanwhile the executor writes the next entry: several
        entries are in flight at once, each replicating while the next is written."""
        out, rows_of, waits = self.prepare(calls)
        if not (rows_of or waits):
            return outcomes(out)
        try:
            ticket = self.begin(rows_of, waits, out)
        except errors.TStreamsError as exc:
            fail(out, rows_of, waits, exc)
            return outcomes(out)
        deferred = Deferred()
        with self.acking_cv:
            self.acking.append((ticket, deferred))
            self.acking_cv.notify()
        self.start_acker()
        return deferred

    def start_acker(self) -> None:
        """Start the acknowledging thread, or again if it ended (it ends once the node
        stops and nothing is queued; a write queued just then still gets its answer)."""
        if self.acker is None or not self.acker.is_alive():
            self.acker = self.node.runtime.spawn("cluster-ack", self.run_acker)

    def run_acker(self) -> None:
        """Complete deferred writes in log order (:meth:`submit_deferred`)."""
        n = self.node
        while True:
            with self.acking_cv:
                while not self.acking:
                    if n.stopping.is_set():
                        return
                    self.acking_cv.wait(0.2)
                ticket, deferred = self.acking.popleft()
            try:
                self.finish(ticket)
            except errors.TStreamsError as exc:
                fail(ticket.out, ticket.rows_of, ticket.waits, exc)
            except BaseException as exc:  # noqa: BLE001 - never leave a client without an answer
                fail(ticket.out, ticket.rows_of, ticket.waits, errors.ClusterUnavailable(str(exc)))
            deferred.complete(outcomes(ticket.out))

    def prepare(self, calls: Sequence[Sequence[Any]]
                ) -> tuple[list[Outcome | None], list[tuple[int, ClientCall]], list[tuple[int, int, str, int]]]:
        """Check the calls: their outcomes so far (errors, empty calls), the calls to
        append, and the retries of calls already in the log here."""
        out: list[Outcome | None] = [None] * len(calls)
        rows_of: list[tuple[int, ClientCall]] = []
        waits: list[tuple[int, int, str, int]] = []  # (call, index, client, seq) of calls already in the log
        for i, args in enumerate(calls):
            try:
                if not args:
                    raise errors.InvalidArgument("submit takes (ops, durable, client_id, seq)")
                ops = O.check_client_batch(O.decode_all(args[0]))
                durable = args[1] if len(args) > 1 else True
                if not isinstance(durable, bool):
                    raise errors.InvalidArgument(f"durable must be a boolean, got {type(durable).__name__}")
                cid = args[2] if len(args) > 2 else None
                seq = args[3] if len(args) > 3 else 0
                if cid is not None and (not isinstance(cid, str) or not cid or len(cid) > 128):
                    raise errors.InvalidArgument("client_id must be a non-empty string of at most 128 characters")
                if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63:
                    raise errors.InvalidArgument("seq must be a non-negative integer")
                if not ops:
                    out[i] = (True, [])
                    continue
                if cid is not None and (cid, seq) in self.inflight:
                    waits.append((i, self.inflight[(cid, seq)], cid, seq))
                    continue
                rows_of.append((i, ClientCall(cid, seq, durable, [_plain(O.encode(op)) for op in ops])))
            except errors.TStreamsError as exc:
                out[i] = (False, exc)
        return out, rows_of, waits

    def submit_maintenance(self, ops: Sequence[O.Compact | O.FireSchedule]) -> Outcome:
        """Leader: replicate engine maintenance (``Compact`` or ``FireSchedule`` records) as one log entry that
        every node applies alike; wait until it is committed and applied here. Returns
        ``(True, results)`` or ``(False, exception)``; raises ``NotLeader`` or
        ``ClusterUnavailable`` as a client write would."""
        row = MaintenanceCall([_plain(O.encode(op)) for op in O.check_maintenance_batch(ops)])
        out: list[Outcome | None] = [None]
        self.replicate([(0, row)], [], out)
        return out[0] if out[0] is not None else (False, errors.ClusterUnavailable("no outcome"))

    def replicate(self, rows_of: Sequence[tuple[int, ClientCall | MaintenanceCall]],
                  waits: list[tuple[int, int, str, int]], out: list[Outcome | None]) -> None:
        """Append, then wait for the entry (and the retried calls' entries) to be applied."""
        self.finish(self.begin(rows_of, waits, out))

    def begin(self, rows_of: Sequence[tuple[int, ClientCall | MaintenanceCall]],
              waits: list[tuple[int, int, str, int]], out: list[Outcome | None]) -> Ticket:
        """Append ``rows_of`` as one entry and sync it (``NotLeader``, ``ClusterUnavailable``)."""
        n = self.node
        n.check_serving()
        state = n.leader_state
        if state is None:
            raise errors.NotLeader(f"node {n.node_id} stopped leading; {n.leader_hint()}")
        applier = n.applier
        cv = n.cv
        index = 0
        started = n.timer.monotonic()
        if rows_of:
            with n.log.lock:
                if n.leader_state is not state:
                    raise errors.NotLeader(f"node {n.node_id} stopped leading; {n.leader_hint()}")
                with cv:
                    applier.waiting[n.log.last_index + 1] = None
                index = n.log.append(state.epoch, n.next_now(), [c.to_wire() for _, c in rows_of], sync=False)
                state.last_append = appended = n.timer.monotonic()
                state.appended_at[index] = appended
            steps = n.counters.steps
            steps.observe("leader_append", appended - started)
            n.counters.group_size.observe(len(rows_of))
            for _, c in rows_of:
                if isinstance(c, ClientCall) and c.client_id is not None:
                    self.inflight[(c.client_id, c.seq)] = index
            n.wake()  # followers fetch the entry while this node syncs it
            try:
                n.log.sync()
                steps.observe("leader_log_sync", n.timer.monotonic() - appended)
            except OSError as exc:
                n.step_down(f"its log could not be synced ({exc}): restart the node")
                raise errors.ClusterUnavailable(
                    f"node {n.node_id} could not sync its log ({exc}); the outcome is unknown (retry it)") from exc
            n.advance_commit()
        indexes = {index} if index else set()
        indexes.update(w[1] for w in waits)
        for ix in indexes:
            with cv:
                applier.waiting.setdefault(ix, None)
        return Ticket(state, index, indexes, started, n.timer.monotonic() + n.ack_timeout, rows_of, waits, out)

    def finish(self, ticket: Ticket) -> None:
        """Wait until the ticket's entries are applied here, and fill in its outcomes."""
        n = self.node
        applier = n.applier
        cv = n.cv
        state, index, indexes, started, deadline = (ticket.state, ticket.index, ticket.indexes, ticket.started,
                                                    ticket.deadline)
        rows_of, waits, out = ticket.rows_of, ticket.waits, ticket.out
        last = max(indexes, default=0)
        try:
            if n.log.commit_index >= last > applier.applied:
                applier.apply_now()
            with cv:
                tried = True
                while not all(applier.applied >= ix for ix in indexes):
                    if not tried and n.log.commit_index >= last > applier.applied:
                        tried = True  # (once per wake-up: the applier thread may hold the apply lock)
                        cv.release()  # apply it here, without holding the condition
                        try:
                            applier.apply_now()
                        finally:
                            cv.acquire()
                        continue
                    if n.leader_state is not state:
                        raise errors.ClusterUnavailable(
                            f"node {n.node_id} stopped leading before the write was committed; its outcome is "
                            f"unknown (retry it); {n.leader_hint()}")
                    remaining = deadline - n.timer.monotonic()
                    if remaining <= 0:
                        raise errors.ClusterUnavailable(
                            f"the write was not acknowledged by {required_acks(n.acks, n.nodes)} of "
                            f"{n.nodes} nodes within {n.ack_timeout:g} s; its outcome is unknown (retry it)")
                    cv.wait(min(remaining, 0.2))
                    tried = False
                # acknowledge only while this node surely still leads (lease from ZooKeeper)
                if not (n.leader_state is state and n.zk_ok and n.timer.monotonic() < state.lease_until):
                    raise errors.ClusterUnavailable(
                        f"node {n.node_id} cannot confirm its leadership; the outcome is unknown (retry it)")
                results = {ix: applier.waiting.get(ix) for ix in indexes}
            acked = n.timer.monotonic() - started
            n.counters.ack_seconds.observe(acked)
            n.counters.steps.observe("ack", acked)
        finally:
            with cv:
                for ix in indexes:
                    applier.waiting.pop(ix, None)
            for _, c in rows_of:
                if isinstance(c, ClientCall) and c.client_id is not None \
                        and self.inflight.get((c.client_id, c.seq)) == index:
                    del self.inflight[(c.client_id, c.seq)]
        if index:
            got = results.get(index)
            if got is None:  # applied before we registered: read the outcome from the window
                got = [applier.stored_outcome(c.client_id, c.seq) if isinstance(c, ClientCall)
                       else applier.stored_outcome(None, 0) for _, c in rows_of]
            for (i, _), res in zip(rows_of, got, strict=True):
                out[i] = res
        for i, _, cid, seq in waits:
            out[i] = applier.stored_outcome(cid, seq)
