"""The election part: take the lock, bump the epoch, check the others' logs, then lead.

A node that holds the coordinator's election lock waits until a majority of the nodes have a
coordinator session (after a ZooKeeper outage they come back one by one), bumps the epoch
(versioned), becomes a **candidate**, and asks every live node for its log position
(:class:`~.messages.Hello`; a node that answers refuses the older epochs from then on). It
leads only if a majority answered (itself included) and no answer is ahead of its own
``(last epoch, last index)``; otherwise it releases the lock for a better node. Leading, it
appends an empty entry of its epoch (which commits every older entry with it, as in Raft),
builds a fresh :class:`~.leader.LeaderState`, publishes itself as the leader, and until it
steps down: appends a clock tick when idle, replicates membership changes one node at a
time, and steps down when it has not heard from a majority within an election timeout
(CheckQuorum).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from .. import errors
from ..retry import RetryPolicy
from .coordinator import ElectionLock
from .leader import LeaderState
from .messages import Hello, HelloReply, MembershipCall, pack, unpack
from .retention import Retention
from .roles import Role
from .transport import PeerLink
from .zk import quorum_of

if TYPE_CHECKING:
    from .applier import Applier
    from .coordinator import Coordinator
    from .log import ReplicatedLog
    from .runtime import Event, Runtime
    from .snapshot import SnapshotServer
    from .timesource import TimeSource
    from .transport import Transport

log = logging.getLogger(__name__)

CLOCK_TICK = 1.0  # seconds: an idle leader appends an empty entry this often (the state clock moves on)
HANDSHAKE_GRACE = 0.2  # seconds a candidate still waits for the other answers once a majority answered
#: Releasing the election lock: three tries 0.1 s apart while the session lasts (after that
#: the lock goes with the session).
RELEASE_RETRY = RetryPolicy(retry_on=(errors.ClusterUnavailable,), max_tries=3, delay=0.1, backoff=1.0,
                            max_delay=0.1)


class ElectionNode(Protocol):
    """What :class:`Election` uses of its node: :class:`~.node.Node` is one (a protocol,
    so that this module need not import the node's)."""

    applier: Applier
    config: dict[str, Any]
    coordinator: Coordinator
    diverged: bool
    elections: int
    endpoint: str
    http: str | None
    identity_conflict: bool
    known_epoch: int
    last_now: int
    leader_state: LeaderState | None
    lock_attempt: ElectionLock | None
    log: ReplicatedLog
    need_snapshot: bool
    node_id: str
    repl_endpoint: str
    retention: Retention
    role: Role
    runtime: Runtime
    snapshot_server: SnapshotServer
    stopping: Event
    timer: TimeSource
    transport: Transport
    zk_ok: bool

    @property
    def granted_session_timeout(self) -> float: ...

    @property
    def lease_seconds(self) -> float: ...

    @property
    def nodes(self) -> int: ...

    def advance_commit(self) -> None: ...

    def next_now(self) -> int: ...

    def serving(self) -> bool: ...

    def step_down(self, why: str) -> None: ...

    def wake(self) -> None: ...


class Election:
    """``node``'s election loop (one thread, :meth:`run`) and its leadership."""

    def __init__(self, node: ElectionNode) -> None:
        self.node = node
        #: while holding the lock, how many nodes had a coordinator session when fewer than
        #: a majority did (the election waits for a majority: :meth:`await_majority`); else None
        self.waiting_for_majority: int | None = None

    def run(self) -> None:
        n = self.node
        while not n.stopping.is_set():
            if not n.zk_ok or n.diverged or n.need_snapshot or n.identity_conflict or n.log.failed is not None:
                n.stopping.wait(0.1)
                continue
            lock = n.coordinator.election_lock(n.node_id)
            n.lock_attempt = lock
            try:
                if not lock.acquire():
                    continue  # cancelled (stopping)
            except errors.ClusterUnavailable as exc:  # the session was lost while waiting
                log.debug("election: %s", exc)
                n.stopping.wait(0.1)
                continue
            stepped_aside = False
            try:
                if not n.stopping.is_set():
                    stepped_aside = not self.lead()
            except Exception:  # noqa: BLE001 - last resort of the election thread: log, step down, try again
                log.exception("leadership failed")
            finally:
                n.step_down("leadership ended")
                self.release(lock)
            if stepped_aside:
                n.stopping.wait(0.3)  # let the better node take the lock

    def release(self, lock: ElectionLock) -> None:
        """Give up the election lock (:data:`RELEASE_RETRY`); without ZooKeeper, the lock
        is freed when this node's session expires."""
        n = self.node
        try:
            RELEASE_RETRY.call(lock.release, clock=n.runtime.monotonic, sleep=n.stopping.wait,
                               stop=lambda: not n.zk_ok)
        except errors.ClusterUnavailable as exc:
            log.warning("could not release the election lock (%s); it is freed when the session expires", exc)

    def lead(self) -> bool:
        """Holding the election lock: become leader. False if this node must step aside."""
        n = self.node
        n.config = n.coordinator.read_config() or n.config
        n.retention = Retention.from_config(n.config)
        if not self.await_majority():
            return True
        new = n.coordinator.bump_epoch()
        with n.log.lock:
            n.known_epoch = max(n.known_epoch, new)
            n.role = Role.CANDIDATE
        n.elections += 1
        answers = self.handshake(new)
        mine = n.log.position()
        need = quorum_of(n.nodes)
        if 1 + len(answers) < need:
            log.info("epoch %d: only %d of %d nodes answered; not leading", new, 1 + len(answers), n.nodes)
            return False
        ahead = [node for node, pos in answers.items() if pos > mine]
        if ahead:
            log.info("epoch %d: %s hold newer log entries; stepping aside", new, ahead)
            return False
        if n.stopping.is_set() or not n.zk_ok:
            return True
        owners = n.coordinator.node_owners()
        with n.log.lock:
            if n.known_epoch != new or n.need_snapshot:
                return False
            n.last_now = max(n.last_now, n.log.now_at(n.log.last_index) or 0)
            start = n.log.append(new, n.next_now(), [])  # commits every older entry with it
            now = n.timer.monotonic()
            n.snapshot_server.reset()
            state = LeaderState(new, start, lease_until=now + 0.5 * n.granted_session_timeout, last_append=now,
                                last_started=now, owners=owners, ended=n.runtime.event())
            n.leader_state = state
            n.role = Role.LEADER
        n.coordinator.publish_leader({"node": n.node_id, "epoch": new, "endpoint": n.endpoint,
                                      "repl": n.repl_endpoint, "http": n.http})
        log.info("leading epoch %d from log index %d", new, start)
        n.advance_commit()
        n.wake()
        while not state.ended.wait(min(0.2, CLOCK_TICK)):
            if n.stopping.is_set():
                break
            if self.check_quorum(state):
                return False  # let the majority elect another node
            self.change_membership(state)
            self.tick(state)
        return True

    def await_majority(self) -> bool:
        """Holding the lock, before bumping the epoch: wait until a majority of the
        configured nodes have a coordinator session (their records are live). An election
        before that cannot win, and each would bump the epoch for nothing: after a ZooKeeper
        outage the first node back ran an election every 0.3 s until the others had
        reconnected. False if the node stops or loses its own session meanwhile."""
        n = self.node
        try:
            while not n.stopping.is_set() and n.zk_ok:
                need = quorum_of(n.nodes)
                live = n.coordinator.live_nodes()
                if len(live) >= need:
                    return True
                if self.waiting_for_majority is None:
                    log.info("election: %d of the %d nodes needed have a ZooKeeper session (%s); waiting for "
                             "a majority before bumping the epoch", len(live), need, ", ".join(sorted(live)) or "none")
                self.waiting_for_majority = len(live)
                n.stopping.wait(0.1)
            return False
        finally:
            self.waiting_for_majority = None

    def check_quorum(self, state: LeaderState) -> bool:
        """CheckQuorum: step down (True) if fewer than a majority of the configured nodes
        were heard from within an election timeout (the lease, 3/4 of the session): such a
        leader cannot commit, and while it holds the lock nobody else can lead."""
        n = self.node
        timeout = n.lease_seconds
        need = quorum_of(n.nodes)
        now = n.timer.monotonic()
        if not state.lost_quorum(now, timeout, need):
            return False
        heard = sorted(node for node, at in state.heard.items() if now - at < timeout)
        log.warning("CheckQuorum: heard from %d of the %d nodes needed (itself included) within %g s (%s); "
                    "stepping down and releasing the election lock", 1 + len(heard), need, timeout,
                    ", ".join(heard) or "no follower")
        n.step_down("no quorum (CheckQuorum)")
        return True

    def tick(self, state: LeaderState) -> None:
        """Leader: append an empty entry if nothing was appended for :data:`CLOCK_TICK`
        seconds, so that the state clock (see :mod:`.clock`) moves on without writes."""
        n = self.node
        if n.timer.monotonic() - state.last_append < CLOCK_TICK or not n.serving():
            return
        with n.log.lock:
            if n.leader_state is not state:
                return
            n.log.append(state.epoch, n.next_now(), [])
            state.last_append = n.timer.monotonic()
        n.wake()
        n.advance_commit()

    def change_membership(self, state: LeaderState) -> None:
        """Leader: if the configuration asks for another size and no change is under way,
        append a membership entry one node towards it; acks are counted on the new size from
        then on (:mod:`.membership`)."""
        n = self.node
        wanted = int(n.config.get("nodes", 0) or 0)
        current = n.nodes
        if wanted < 1 or wanted == current or not n.serving():
            return
        pending = state.pending_members
        if pending is not None and n.applier.applied < pending[0]:
            return  # one change at a time: the previous one is not applied yet
        size = current + 1 if wanted > current else current - 1
        with n.log.lock:
            if n.leader_state is not state:
                return
            index = n.log.append(state.epoch, n.next_now(), [MembershipCall(size).to_wire()])
            state.pending_members = (index, size)
            state.last_append = n.timer.monotonic()
        log.info("membership: %d -> %d nodes at log index %d", current, size, index)
        n.wake()
        n.advance_commit()

    def handshake(self, epoch: int) -> dict[str, tuple[int, int]]:
        """Send ``hello(epoch)`` to every other live node; return their log positions. Once a
        majority answered (this node included), wait only :data:`HANDSHAKE_GRACE` more for
        the rest: a node that cannot be reached must not delay the election (a majority none
        of which is ahead is all the safety rule needs)."""
        n = self.node
        peers = {node: str(info["repl"]) for node, info in n.coordinator.node_records().items()
                 if node != n.node_id and info.get("repl")}
        answers: dict[str, tuple[int, int]] = {}
        links: dict[str, PeerLink] = {}
        try:
            for node, ep in peers.items():
                link = n.transport.connect(ep)
                links[node] = link
                link.send(pack(Hello(epoch, n.node_id).to_wire()))
            deadline = n.timer.monotonic() + min(2.0, n.granted_session_timeout / 2)
            waiting = dict(links)
            need = quorum_of(n.nodes)
            while waiting:
                if 1 + len(answers) >= need:
                    deadline = min(deadline, n.timer.monotonic() + HANDSHAKE_GRACE)
                    need = len(links) + 2  # (once)
                remaining = deadline - n.timer.monotonic()
                if remaining <= 0:
                    break
                for node, link in list(waiting.items()):
                    raw = link.receive(min(remaining, 0.01))
                    if raw is None:
                        continue
                    del waiting[node]
                    try:
                        rep = HelloReply.from_wire(unpack(raw))
                    except (errors.ProtocolError, AttributeError, ValueError) as exc:
                        log.warning("election: a malformed hello reply from %s: %s", node, exc)
                        continue
                    if rep.ok:
                        answers[node] = rep.position
        finally:
            for link in links.values():
                link.close()
        return answers
