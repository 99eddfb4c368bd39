"""The follower loop: pull entries from the leader, catch up by snapshot when needed.

A follower asks the leader ZooKeeper names for the entries after its last one
(:class:`~.messages.Fetch`; the fetch also acknowledges everything before it, as the follower
syncs what it received before it asks again). The reply (:class:`~.messages.FetchReply`)
brings entries and the commit index, or tells it to truncate its uncommitted tail, or to catch
up by snapshot (:mod:`.snapshot`) when the leader's log starts after its own.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from .. import errors
from . import snapshot as snap
from .channel import Channel
from .log import Entry
from .messages import Fetch, FetchReply, ReplyStatus, pack, reply_rid, unpack
from .replication import FETCH_PARK
from .roles import Role
from .transport import PeerLink

if TYPE_CHECKING:
    from ..engine.storage.core import Core
    from .applier import Applier
    from .clock import StateClock
    from .coordinator import Coordinator
    from .counters import NodeCounters
    from .log import ReplicatedLog
    from .runtime import Condition, Event, Runtime
    from .timesource import TimeSource
    from .transport import Transport

log = logging.getLogger(__name__)

FETCH_TIMEOUT = 2.0  # seconds a follower waits for a fetch reply before reconnecting (at most; see fetch_timeout)


class FollowerNode(Protocol):
    """What :class:`Follower` uses of its node: :class:`~.node.Node` is one (a protocol,
    so that this module need not import the node's)."""

    applier: Applier
    clock: StateClock
    coordinator: Coordinator
    core: Core
    counters: NodeCounters
    cv: Condition
    diverged: bool
    identity_conflict: bool
    known_epoch: int
    last_contact: float
    last_snapshot: dict[str, float]
    leader_info: dict[str, Any]
    log: ReplicatedLog
    need_snapshot: bool
    node_id: str
    role: Role
    runtime: Runtime
    snapshot_bytes_received: int
    snapshots_installed: int
    stopping: Event
    timer: TimeSource
    transport: Transport

    @property
    def leading(self) -> bool: ...

    @property
    def lease_seconds(self) -> float: ...


class Follower:
    """``node``'s follower loop (one thread, :meth:`run`); see the module docstring."""

    def __init__(self, node: FollowerNode) -> None:
        self.node = node

    def run(self) -> None:
        n = self.node
        sock: PeerLink | None = None
        target: tuple[str, int] | None = None
        rid = 0
        try:
            while not n.stopping.is_set():
                info = n.leader_info
                if (n.leading or n.role is Role.CANDIDATE or n.identity_conflict or not info or n.log.failed is not None
                        or info.get("node") == n.node_id or int(info.get("epoch", 0)) < n.known_epoch):
                    n.stopping.wait(0.05)
                    continue
                want = self.leader_target(info)
                if sock is None or target != want:
                    if sock is not None:
                        sock.close()
                    sock = n.transport.connect(want[0])
                    target = want
                if n.need_snapshot:
                    def next_rid() -> int:
                        nonlocal rid
                        rid += 1
                        return rid

                    try:
                        installed = self.resync(Channel(sock, next_rid, n.stopping, n.runtime.monotonic))
                    except Exception:  # noqa: BLE001 - e.g. a damaged copy: start the transfer again
                        log.exception("installing a snapshot failed")
                        installed = False
                    if not installed:
                        sock.close()
                        sock, target = None, None
                        n.stopping.wait(0.2)
                    continue
                rid += 1
                with n.log.lock:
                    req = Fetch(n.node_id, n.known_epoch, n.log.last_index + 1, n.log.last_epoch,
                                n.log.commit_index, rid, n.coordinator.session_token or "")
                sock.send(pack(req.to_wire()))
                rep: FetchReply | None = None
                deadline = n.timer.monotonic() + self.fetch_timeout()
                while rep is None and not n.stopping.is_set():
                    if self.leader_target() != target:
                        break  # a new leader: ask it at once, not after this fetch's timeout
                    remaining = deadline - n.timer.monotonic()
                    if remaining <= 0:
                        break
                    raw = sock.receive(min(remaining, 0.2))
                    if raw is None:
                        continue
                    got = unpack(raw)
                    if isinstance(got, dict) and reply_rid(got) == rid:
                        try:
                            rep = FetchReply.from_wire(got)
                        except errors.ProtocolError as exc:
                            log.warning("a malformed fetch reply from the leader: %s", exc)
                            break
                if rep is None:
                    sock.close()
                    sock, target = None, None
                    continue
                try:
                    self.on_fetched(req, rep)
                except OSError:  # the log could not be synced: it follows no more (n.log.failed)
                    log.exception("appending fetched entries failed: this node stops following until restarted")
        finally:
            if sock is not None:
                sock.close()

    def fetch_timeout(self) -> float:
        """Seconds to wait for a fetch's reply before asking again: :data:`FETCH_TIMEOUT`, but
        at most half the leader's election timeout (its lease, after which CheckQuorum makes a
        leader that heard from no majority step down), and at least 1.5 ×
        :data:`.replication.FETCH_PARK` (a parked fetch is answered within that). Else one lost
        frame kept a follower silent for longer than that timeout: with a session under
        2.7 s, a leader with a healthy majority stepped down on a lossy network, and the next
        one too (simulation seed 158; test_simulation_schedules)."""
        return min(FETCH_TIMEOUT, max(1.5 * FETCH_PARK, self.node.lease_seconds / 2))

    def resync(self, channel: Channel) -> bool:
        """Receive a snapshot of the leader's state (:func:`.snapshot.receive`) and swap it in;
        the log then restarts after the snapshot's position. False if the transfer failed
        (it is retried from the start)."""
        n = self.node
        sink = snap.receive(channel, n.core.path, n.node_id, n.known_epoch)
        if sink is None:
            return False
        position = sink.position
        try:
            with n.applier.lock:
                with n.log.lock:
                    if n.leading or n.role is Role.CANDIDATE:
                        sink.abort()
                        return False
                snap.install(n.core, sink)
                n.applier.reload()
                with n.log.lock:
                    n.log.reset(position.index, position.epoch, position.now_ms)
                n.clock.advance(position.now_ms)
                with n.cv:
                    n.applier.applied = position.index
                    n.cv.notify_all()
                n.applier.sync_state()  # (installed synced: this marks it, and lets the log be trimmed)
                n.need_snapshot = False
                n.diverged = False
                n.snapshots_installed += 1
                n.snapshot_bytes_received += sink.received
                n.last_snapshot = {"index": position.index, "bytes": sink.received,
                                   "seconds": n.timer.monotonic() - sink.started,
                                   "transfer_seconds": sink.transferred - sink.started}
        except BaseException:
            sink.abort()
            raise
        log.info("installed a snapshot at index %d (%d bytes); following from there", position.index,
                 sink.received)
        return True

    def leader_target(self, info: dict[str, Any] | None = None) -> tuple[str, int]:
        """``(replication endpoint, epoch)`` of the leader published in ZooKeeper."""
        n = self.node
        info = n.leader_info if info is None else info
        return str(info.get("repl")), int(info.get("epoch", 0))

    def on_fetched(self, req: Fetch, rep: FetchReply) -> None:
        n = self.node
        status = rep.status
        if status not in (ReplyStatus.OK, ReplyStatus.TRUNCATE, ReplyStatus.SNAPSHOT):
            n.stopping.wait(0.05)
            return
        with n.log.lock:
            if rep.epoch < n.known_epoch or n.leading:
                return  # a deposed leader's answer
            n.last_contact = n.timer.monotonic()
            if n.log.last_index + 1 != req.from_index:
                return
            if status is ReplyStatus.SNAPSHOT:
                log.info("the leader's log starts at %s, after this node's %d: catching up by snapshot",
                         rep.first, n.log.last_index)
                n.need_snapshot = True
                return
            if status is ReplyStatus.TRUNCATE:
                to = rep.to
                if to < n.applier.applied:
                    n.diverged = True
                    n.need_snapshot = True
                    log.error("the leader's log diverges below this node's applied index %d (at %d): this "
                              "node re-syncs from a snapshot", n.applier.applied, to)
                    return
                removed = n.log.truncate_after(to)
                log.warning("truncated %d uncommitted log entries after index %d", removed, to)
                return
            entries = [Entry.from_wire(w) for w in rep.entries]
            if entries:
                started, synced = n.timer.monotonic(), n.log.sync_seconds
                n.log.append_entries(entries)
                sync = n.log.sync_seconds - synced
                n.counters.steps.observe("follower_log_sync", sync)
                n.counters.steps.observe("follower_append", n.timer.monotonic() - started - sync)
            moved = n.log.set_commit(rep.commit)
        if moved:  # the applier thread applies it (here, it would delay the next acknowledgement)
            with n.cv:
                n.cv.notify_all()
