"""One cluster node: a small coordinator of role objects (see ``docs/CLUSTER.md``).

A :class:`Node` owns the node's log, its injected I/O (a :class:`~.coordinator.Coordinator`
for ZooKeeper, a :class:`~.transport.Transport` for its peers, a
:class:`~.timesource.TimeSource`) and the lifecycle of its parts, each doing one job:

* :class:`~.election.Election` -- take the lock, bump the epoch, check the others' logs,
  lead (building a fresh :class:`~.leader.LeaderState` for the epoch);
* :class:`~.replication.ReplicationService` -- the replication endpoint: hellos, fetches,
  snapshot requests;
* :class:`~.follower.Follower` -- pull entries from the leader, or catch up by snapshot;
* :class:`~.applier.Applier` -- apply committed entries in log order, deterministically,
  with the replicated de-duplication window;
* :class:`~.writes.Writes` -- client writes on the leader (one log entry per burst,
  answered once committed and applied);
* the coordinator loop here -- publish this node's position, learn the leader and the
  newest epoch, renew the leader's lease.

The role is one :class:`~.roles.Role` value; leader-only state exists only while leading
(:attr:`Node.leader_state`).

* **Fencing**: the epoch is bumped in ZooKeeper (versioned set) by every new leader and
  carried by every entry and message; nodes refuse older epochs. A leader stops
  acknowledging and serving at once when the coordinator reports the session
  ``SUSPENDED``/``LOST``, and in any case when its *lease* ran out: the lease is renewed by
  reading the epoch from ZooKeeper and lasts ``0.75 × session timeout`` from the moment the
  read was sent, a time before which ZooKeeper cannot have expired its session (so no other
  leader can exist). The session timeout is the one ZooKeeper *granted*.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import lmdb
import zmq

from .. import errors
from ..engine.protocol import ops as O
from ..engine.storage.core import Core
from ..net.auth import PeerKeys
from ..retry import RetryPolicy
from . import snapshot as snap
from .applier import Applier, Outcome
from .clock import StateClock
from .coordinator import CONNECT_TIMEOUT, Coordinator, ElectionLock, KazooCoordinator, NodeIdInUse, SessionState
from .counters import NodeCounters
from .election import CLOCK_TICK, Election
from .follower import FETCH_TIMEOUT, Follower
from .leader import LeaderState, commit_candidate
from .log import ReplicatedLog
from .membership import settings_changed
from .messages import DEDUP_WINDOW
from .replication import ReplicationService
from .retention import Retention
from .roles import Role
from .runtime import REAL, Runtime, Task
from .timesource import SystemTime, TimeSource
from .transport import ReplicationServer, Transport, ZmqTransport
from .writes import Writes
from .zk import ACKS, ZkAddress, required_acks

__all__ = ["CLOCK_TICK", "DEDUP_WINDOW", "Node", "Role"]

log = logging.getLogger(__name__)

CLUSTER_ID_FILE = "cluster-id"  # in the data directory: the id of the cluster it joined
SESSION_FILE = "node-session"  # in the data directory: the ZooKeeper session of its last process
READY_SLACK = 1000  # committed entries a ready follower may still have to apply
LOG_MAP_SIZE = 1 << 34  # address space for the log (sparse; its size is bounded by the retention)
#: Publishing this node's record while another session holds its id: every 0.1 s until that
#: session has expired (the deadline, the granted session timeout plus a second, is set per call).
CLAIM_RETRY = RetryPolicy(retry_on=(NodeIdInUse,), delay=0.1, backoff=1.0, max_delay=0.1)
#: Acknowledgement levels from the weakest to the strongest (a node's ``--acks`` may only strengthen).
ACKS_STRENGTH = {"leader": 0, "quorum": 1, "all": 2}


def sync_state(core: Core) -> None:
    """Flush the engine's state to disk (the default ``state_fsync``)."""
    core.store.sync()


class Node:
    """A cluster member around one :class:`Core` (see the module docstring)."""

    def __init__(self, core: Core, zk_url: str | Coordinator, node_id: str, endpoint: str, repl_bind: str,
                 http: str | None = None, acks: str | None = None, session_timeout: float = 4.0,
                 ack_timeout: float = 10.0, context: zmq.Context[Any] | None = None,
                 peer_keys: PeerKeys | None = None, transport: Transport | None = None,
                 timer: TimeSource | None = None, log_fsync: Callable[[lmdb.Environment], None] | None = None,
                 state_fsync: Callable[[Core], None] | None = None, runtime: Runtime | None = None) -> None:
        """``zk_url`` is the cluster's ``zk://`` address, or a :class:`.coordinator.Coordinator`
        (tests pass an in-memory one); ``transport`` the peer transport (by default ZeroMQ on
        ``context``, CURVE with ``peer_keys``); ``timer`` the clocks (by default the system's);
        ``log_fsync`` flushes the log to disk (tests inject one that fails: a node whose log
        could not be synced stops leading and following until restarted); ``state_fsync``
        flushes the engine's state (by default ``core.store.sync()``; applies are not synced,
        see :mod:`.applier`: tests inject one that also keeps what a power loss would leave);
        ``runtime`` its threads, waits and locks (by default real threads: :mod:`.runtime`; the
        deterministic simulation passes its own)."""
        if not isinstance(node_id, str) or not node_id or "/" in node_id:
            raise errors.InvalidArgument(f"node id must be a non-empty name without '/', got {node_id!r}")
        if acks is not None and acks not in ACKS:
            raise errors.InvalidArgument(f"acks must be one of {ACKS}, got {acks!r}")
        if not 1.0 <= float(session_timeout) <= 60.0:
            raise errors.InvalidArgument(f"session_timeout must be 1 to 60 seconds, got {session_timeout!r}")
        if not isinstance(core.clock, StateClock):
            raise errors.InvalidArgument("a cluster node's Core must read time from a StateClock: "
                                         "Core(path, clock=StateClock())")
        self.core = core
        self.runtime: Runtime = runtime or REAL
        self.clock: StateClock = core.clock
        self.coordinator: Coordinator = (KazooCoordinator(ZkAddress.parse(zk_url), float(session_timeout))
                                         if isinstance(zk_url, str) else zk_url)
        self.timer: TimeSource = timer or SystemTime()
        self.transport: Transport = transport or ZmqTransport(context, peer_keys)
        self.node_id = node_id
        self.endpoint = endpoint
        self.http = http
        self.acks_override = acks
        self.session_timeout = float(session_timeout)
        self.ack_timeout = float(ack_timeout)
        if snap.discard_partial(core.path):
            log.warning("deleted an unfinished snapshot download (the node stopped during a transfer)")
        self.state_fsync: Callable[[Core], None] = state_fsync or sync_state
        self.log = ReplicatedLog(os.path.join(core.path, "cluster-log"), map_size=LOG_MAP_SIZE, fsync=log_fsync,
                                   runtime=self.runtime)
        self.applier = Applier(self)
        position = self.applier.position
        if position is not None and self.log.epoch_at(position.index) != position.epoch:
            # the state came from a snapshot and the node stopped before its log restarted after it
            log.warning("state installed from a snapshot at index %d: the log restarts after it", position.index)
            self.log.reset(position.index, position.epoch, position.now_ms)
        elif self.applied > self.log.last_index:
            self.log.close()
            raise errors.NodeDiverged(f"state applied up to {self.applied} but the log ends at {self.log.last_index}")
        self.log.set_commit(self.applied)
        # reads judge time as apply does: by the last applied entry (cluster/clock.py)
        self.clock.advance(position.now_ms if position is not None else (self.log.now_at(self.applied) or 0))
        self.retention = Retention()  # catch-up and trimming (docs/CLUSTER.md, "Snapshots and log trimming")
        self.need_snapshot = False  # the leader's log cannot bring this node up to date
        self.diverged = False
        self.snapshots_installed = 0
        self.snapshot_bytes_received = 0  # bytes of the snapshots installed by this process
        self.last_snapshot: dict[str, float] = {}  # bytes and seconds of the last snapshot installed
        # role and epochs (known_epoch, role and leader_state change under self.log.lock)
        self.known_epoch = 0
        self.role = Role.FOLLOWER
        self.leader_state: LeaderState | None = None
        self.config: dict[str, Any] = {"nodes": 1, "acks": "quorum"}
        self.leader_info: dict[str, Any] = {}
        self.last_now = 0  # the latest entry time this node appended (never decreases)
        self.cv = self.runtime.condition()  # commit / applied / leadership changes
        self.stopping = self.runtime.event()
        self.zk_ok = False
        #: the coordinator session as last reported (LOST before :meth:`start`: no session yet)
        self.session_state = SessionState.LOST
        self.elections = 0
        self.commits = 0
        self.counters = NodeCounters()  # histograms for /metrics
        self.last_contact = 0.0  # follower: monotonic time of the leader's last fetch answer (follower reads)
        self.lock_attempt: ElectionLock | None = None
        self._closed = False
        self._published: dict[str, Any] = {}
        #: another running node holds this node's id: it neither leads nor follows
        self.identity_conflict = False
        try:
            with open(os.path.join(core.path, SESSION_FILE), encoding="ascii") as f:
                self.previous_session: str | None = f.read().strip() or None
        except FileNotFoundError:
            self.previous_session = None
        try:
            self.server: ReplicationServer = self.transport.listen(repl_bind)
        except BaseException:
            self.log.close()
            raise
        self.repl_endpoint = self.server.endpoint
        self.replication = ReplicationService(self)
        self.snapshot_server = snap.SnapshotServer(self.replication.send)  # leader: snapshots being sent
        self.election = Election(self)
        self.follower = Follower(self)
        self.writes = Writes(self)
        self.coordinator.add_state_listener(self._on_session)
        self._threads: list[Task] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = CONNECT_TIMEOUT) -> None:
        """Open the coordinator session (waiting at most ``timeout`` seconds: then
        ``ClusterUnavailable``), check the cluster and this node's identity, start the threads."""
        self.coordinator.start(timeout)
        self.zk_ok = True
        self.session_state = SessionState.CONNECTED
        try:
            granted = self.coordinator.granted_session_timeout
            if granted is None:
                raise errors.ClusterUnavailable(
                    "cannot learn the session timeout ZooKeeper granted (the leader's lease depends on it)")
            if granted != self.session_timeout:
                log.warning("ZooKeeper granted a %g s session for the %g s asked (its minSessionTimeout/"
                            "maxSessionTimeout): the leader's lease is %g s", granted, self.session_timeout,
                            self.lease_seconds)
            config = self.coordinator.read_config()
            if config is None:
                raise errors.InvalidArgument(
                    f"no cluster at {self.coordinator.description}: run 'tstreams cluster init' first")
            self.config = config
            self._check_cluster_id(self.coordinator.cluster_id())
            self._check_acks_override()
            self.retention = Retention.from_config(self.config)
            if self.applier.members is None:  # no membership entry applied yet: the size the cluster was made with
                self.applier.members = int(self.config.get("nodes", 1))
            self.coordinator.watch_config(self._on_config)
            self.known_epoch = self.coordinator.read_epoch()
            self._claim_node_id()
        except BaseException:
            self.coordinator.close()
            raise
        for name, fn in (("repl", self.replication.run), ("fetch", self.follower.run), ("apply", self.applier.run),
                         ("zk", self._coordinator_loop), ("election", self.election.run)):
            self._threads.append(self.runtime.spawn(f"cluster-{name}", fn))

    def stop(self) -> None:
        """Step down, leave ZooKeeper (closing the session at once), stop the threads and
        close the node's sockets and log. Safe to call again, and before :meth:`start`."""
        if self._closed:
            return
        self._closed = True
        self.stopping.set()
        self.step_down("stopping")
        if self.lock_attempt is not None:
            self.lock_attempt.cancel()  # (only sets a flag and wakes the waiter: never fails)
        self.wake()
        with self.cv:
            self.cv.notify_all()
        for t in self._threads:
            t.join(5)
        self.coordinator.close()
        self.snapshot_server.close()
        self.server.close()
        self.log.close()

    # ------------------------------------------------------------------ role and state
    @property
    def leading(self) -> bool:
        return self.leader_state is not None

    @property
    def epoch(self) -> int:
        """The epoch this node leads, 0 when not leading."""
        state = self.leader_state
        return state.epoch if state is not None else 0

    @property
    def match(self) -> dict[str, int]:
        """Leader: what each follower holds (empty when not leading)."""
        state = self.leader_state
        return state.match if state is not None else {}

    @property
    def parked_fetches(self) -> int:
        """Leader: fetches waiting for new entries (at most :data:`.replication.MAX_PARKED`)."""
        state = self.leader_state
        return len(state.parked) if state is not None else 0

    @property
    def applied(self) -> int:
        return self.applier.applied

    @property
    def log_trimmed(self) -> int:
        return self.applier.log_trimmed

    @property
    def nodes(self) -> int:
        """The size quorums are counted on: a leader's own membership entry from the moment
        it is in its log, else the last applied one, else the configuration's (:mod:`.membership`)."""
        state = self.leader_state
        if state is not None and state.pending_members is not None:
            return state.pending_members[1]
        if self.applier.members is not None:
            return self.applier.members
        return int(self.config.get("nodes", 1))

    @property
    def acks(self) -> str:
        """The acknowledgement level: the cluster's, or this node's ``--acks`` if stronger (an
        override can only strengthen it, so the guarantee never depends on which node leads)."""
        configured = str(self.config.get("acks", "quorum"))
        override = self.acks_override
        if override is None or ACKS_STRENGTH.get(override, 0) < ACKS_STRENGTH.get(configured, 1):
            return configured
        return override

    def _check_cluster_id(self, cluster_id: str) -> None:
        """Refuse a data directory of another cluster: the id of the cluster a directory
        joined is kept in ``DATA/cluster-id`` (written on its first join; a directory from
        before this file existed is taken as this cluster's, with a warning)."""
        path = os.path.join(self.core.path, CLUSTER_ID_FILE)
        try:
            with open(path, encoding="ascii") as f:
                recorded = f.read().strip()
        except FileNotFoundError:
            if self.log.last_index > 0 or self.applied > 0:
                log.warning("the data directory %s records no cluster id but holds log entries: it is taken as "
                            "the directory of cluster %s", self.core.path, cluster_id)
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="ascii") as f:
                f.write(cluster_id + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return
        if recorded != cluster_id:
            raise errors.InvalidArgument(
                f"the data directory {self.core.path} belongs to another cluster (id {recorded}, its "
                f"{CLUSTER_ID_FILE} file) than {self.coordinator.description} (id {cluster_id}): start this node "
                f"on an empty directory (it catches up from the leader), or on this cluster's own")

    def _check_acks_override(self) -> None:
        configured = str(self.config.get("acks", "quorum"))
        override = self.acks_override
        if override is not None and ACKS_STRENGTH[override] < ACKS_STRENGTH.get(configured, 1):
            raise errors.InvalidArgument(
                f"--acks {override} is weaker than the cluster's acks {configured!r}: a node may only "
                f"strengthen it (else the guarantee would depend on which node leads)")

    @property
    def granted_session_timeout(self) -> float:
        """Seconds of the ZooKeeper session as granted by the server (the requested timeout
        until a session exists)."""
        granted = self.coordinator.granted_session_timeout
        return self.session_timeout if granted is None else granted

    @property
    def lease_seconds(self) -> float:
        """How long a leader's lease lasts after the epoch read that renewed it: 3/4 of the
        *granted* session timeout, before which ZooKeeper cannot have expired the session."""
        return 0.75 * self.granted_session_timeout

    def step_down(self, why: str) -> None:
        """Stop leading (if leading): the epoch's :class:`LeaderState` is dropped."""
        with self.log.lock:
            state = self.leader_state
            self.leader_state = None
            self.role = Role.FOLLOWER
            if state is not None:
                state.ended.set()
        if state is not None:
            log.warning("stepped down: %s", why)
            if self.zk_ok and not self.stopping.is_set():
                self.runtime.spawn("cluster-drop-leader", self.coordinator.drop_leader, self.node_id)
        with self.cv:
            self.cv.notify_all()

    def advance_commit(self) -> None:
        """Leader: commit the highest index held by ``required_acks`` nodes, if of this epoch."""
        state = self.leader_state
        if state is None:
            return
        n = self.nodes
        candidate = commit_candidate(self.log.durable_index, state.match, n, required_acks(self.acks, n))
        if candidate > self.log.commit_index and self.log.epoch_at(candidate) == state.epoch:
            if self.log.set_commit(candidate):
                self.commits += 1
                state.commit_moved_at = now = self.timer.monotonic()
                if len(state.committed_at) < 4096:
                    state.committed_at[candidate] = now
                with self.cv:
                    self.cv.notify_all()
                # (no wake of the replication loop: the next entries carry the new commit index,
                # else its poll timeout sends it alone after COMMIT_LINGER)

    def wake(self) -> None:
        """Wake the replication loop (new entries or a new commit index for parked fetches)."""
        self.server.wake()

    def next_now(self) -> int:
        """The time of the next entry this node appends: the wall clock, never decreasing."""
        self.last_now = max(self.last_now, self.timer.wall_ms())
        return self.last_now

    # ------------------------------------------------------------------ coordinator
    def _on_config(self, config: dict[str, Any]) -> None:
        """The coordinator's watch on the configuration (its own thread: no coordinator calls
        here). ``acks``, retention and the compaction interval apply at once; a new size is
        replicated by the leader as a membership entry (:meth:`.Election.change_membership`)."""
        if self._closed:
            return
        changed = settings_changed(self.config, config)
        if changed:
            log.info("cluster configuration changed: %s", ", ".join(changed))
        self.config = config
        self.retention = Retention.from_config(config)

    def _on_session(self, state: SessionState) -> None:
        """The coordinator's session listener (its own thread: no coordinator calls here)."""
        self.session_state = state
        if state is not SessionState.CONNECTED:
            self.zk_ok = False
            if self.leading:
                log.warning("ZooKeeper session %s: stepping down at once", state.value)
                self.step_down(f"ZooKeeper session {state.value}")
        else:
            self.zk_ok = True

    def info(self) -> dict[str, Any]:
        return {"node": self.node_id, "role": str(self.role), "endpoint": self.endpoint, "repl": self.repl_endpoint,
                "http": self.http, "epoch": self.epoch or self.known_epoch, "last_index": self.log.last_index,
                "last_epoch": self.log.last_epoch, "commit": self.log.commit_index, "applied": self.applied,
                "members": self.nodes, "clock_ms": self.log.now_at(self.log.last_index) or 0,
                "diverged": self.diverged, "log_first": self.log.first_index, "needs_snapshot": self.need_snapshot,
                "snapshots_sent": self.snapshot_server.started, "snapshots_installed": self.snapshots_installed,
                "last_snapshot": self.last_snapshot, "session_timeout": self.session_timeout,
                "session_timeout_granted": self.granted_session_timeout, "lease_seconds": self.lease_seconds}

    def _claim_node_id(self) -> None:
        """Publish this node's record, claiming its id: if another session holds it (not
        this directory's previous process, whose record is replaced), wait for that session
        to end (a crashed process's expires within the session timeout); a live one is a
        duplicate ``--node-id``: refuse to start."""
        policy = replace(CLAIM_RETRY, deadline=self.granted_session_timeout + 1.0)
        policy.call(lambda: self._publish(force=True), clock=self.timer.monotonic, sleep=self.stopping.wait,
                    stop=self.stopping.is_set)

    def _publish(self, force: bool = False) -> None:
        # (the time of the last log entry changes with every entry: /status only)
        info = {k: v for k, v in self.info().items() if k != "clock_ms"}
        token = self.coordinator.session_token
        if not force and info == self._published and token == self.previous_session:
            return
        self.coordinator.publish_node(self.node_id, info, self.previous_session)
        self._published = info
        if token is not None and token != self.previous_session:
            path = os.path.join(self.core.path, SESSION_FILE)
            with open(path + ".tmp", "w", encoding="ascii") as f:
                f.write(token + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
            self.previous_session = token

    def _coordinator_loop(self) -> None:
        """Publish this node's position, learn the leader and the newest epoch, renew the lease."""
        while not self.stopping.wait(0.1):
            renew = max(0.1, self.granted_session_timeout / 8)
            if not self.zk_ok:
                continue
            state = self.leader_state
            try:
                if state is not None:
                    sent = self.timer.monotonic()
                    live = self.coordinator.live_nodes()
                    state.live_nodes = live
                    state.owners = self.coordinator.node_owners()
                    for gone in [f for f in list(state.match) if f not in live]:
                        # a removed or stopped node leaves the lag tracking (it is added back
                        # by its next fetch; commit indexes never move back)
                        state.match.pop(gone, None)
                    current = self.coordinator.read_epoch(fresh=True)
                    if current != state.epoch:
                        self.step_down(f"epoch moved to {current}")
                    elif self.zk_ok:
                        state.lease_until = sent + self.lease_seconds
                else:
                    self.leader_info = self.coordinator.read_leader()
                    epoch = self.coordinator.read_epoch()
                    with self.log.lock:
                        self.known_epoch = max(self.known_epoch, epoch)
                self._publish()
            except NodeIdInUse as exc:
                if not self.identity_conflict:
                    log.error("%s; this node stops leading and following", exc)
                    self.identity_conflict = True
                    self.step_down("node id in use by another node")
            except Exception as exc:  # noqa: BLE001 - connection trouble: the listener handles it
                log.debug("ZooKeeper loop: %s", exc)
            if self.leading:
                self.stopping.wait(renew - 0.1 if renew > 0.1 else 0)

    # ------------------------------------------------------------------ client side
    def leader_hint(self) -> str:
        """Who leads, as this node knows it, for error messages. Without a ZooKeeper session
        it names no leader: the one it last saw may have lost its lease meanwhile."""
        info = self.leader_info
        if self.leading:
            return f"leader: {self.node_id} at {self.endpoint}"
        if not self.zk_ok:
            return (f"ZooKeeper unavailable to this node (session {self.session_state.value}): "
                    f"no leader can be confirmed")
        if info.get("node") and info.get("node") != self.node_id:
            return f"leader: {info.get('node')} at {info.get('endpoint')}"
        return "no leader is known yet"

    def serving(self) -> bool:
        """Whether this node may serve reads now: leader, lease valid, own epoch applied."""
        state = self.leader_state
        return (state is not None and self.zk_ok and self.timer.monotonic() < state.lease_until
                and self.applied >= state.start_index and self.log.failed is None)

    def ready(self) -> bool:
        """``/health/ready``: the serving leader, or a follower that heard from its leader
        within :data:`.follower.FETCH_TIMEOUT` and has applied to within
        :data:`READY_SLACK` entries of the commit index that leader told it then (a node that
        never reached its leader is not ready, even with nothing to apply)."""
        if self.serving():
            return True
        return (self.role is Role.FOLLOWER and not self.diverged and not self.need_snapshot
                and not self.identity_conflict and bool(self.leader_info) and self.last_contact > 0
                and self.timer.monotonic() - self.last_contact < FETCH_TIMEOUT
                and self.log.commit_index - self.applied < READY_SLACK)

    def check_serving(self) -> None:
        if not self.serving():
            raise errors.NotLeader(f"node {self.node_id} is not the leader ({self.role}); {self.leader_hint()}")

    def submit_batch(self, calls: Sequence[Sequence[Any]]) -> list[Outcome]:
        """The server's ``submit`` batch function (:meth:`.writes.Writes.submit_batch`)."""
        return self.writes.submit_batch(calls)

    def submit_maintenance(self, ops: Sequence[O.Compact | O.FireSchedule]) -> Outcome:
        """Replicate engine maintenance (:meth:`.writes.Writes.submit_maintenance`)."""
        return self.writes.submit_maintenance(ops)

    def stored_outcome(self, cid: str | None, seq: int) -> Outcome:
        return self.applier.stored_outcome(cid, seq)
