"""One cluster node: election, replication, commit, deterministic apply, fencing.

See ``docs/CLUSTER.md`` for the design. In short:

* The **leader** (the holder of a kazoo ``Lock`` under ``P/election`` that bumped the epoch
  and passed the handshake) appends each burst of client submits as ONE log entry
  ``[epoch, now_ms, calls]`` to its replicated log (synced), and answers the clients once
  the entry is **committed** (held durably by ``--acks`` nodes) and **applied**.
* **Followers** pull entries from the leader over the replication channel (a ZeroMQ ROUTER
  on ``--repl``, separate from the client port): ``fetch(from, last_epoch)``. A fetch also
  acknowledges everything before ``from``: the follower syncs what it received before it
  asks for more.
* **Every node** applies committed entries in log order with
  :meth:`~tstreams_embedded.engine.core.Core.apply_committed` at the entry's ``now_ms``, so
  all nodes compute the same transaction IDs, deadlines and results. Nothing uncommitted
  is ever applied, so nothing uncommitted is ever readable (no dirty reads) and a deposed
  leader only has to truncate its log.
* **Fencing**: the epoch is bumped in ZooKeeper (versioned set) by every new leader and
  carried by every entry and message; nodes refuse older epochs. A leader stops
  acknowledging and serving at once when kazoo reports ``SUSPENDED``/``LOST``, and in any
  case when its *lease* ran out: the lease is renewed by reading the epoch from ZooKeeper
  and lasts ``0.75 × session timeout`` from the moment the read was sent, a time before
  which ZooKeeper cannot have expired its session (so no other leader can exist). The
  session timeout is the one ZooKeeper *granted* (it clamps the requested one to its
  ``[minSessionTimeout, maxSessionTimeout]``), learned when the session is created.
* **Epochs from peers are checked against ZooKeeper**: a ``hello`` or ``fetch`` naming an
  epoch newer than this node knows is believed only if ``P/epoch`` in ZooKeeper has reached
  it, so a forged message cannot make the nodes refuse every real election.
* **Election safety**: after bumping the epoch the candidate asks every live node for its
  log position (``hello``; a node that answers refuses the older epochs from then on). It
  leads only if a majority answered (itself included) and no answer is ahead of its own
  ``(last epoch, last index)``; otherwise it releases the lock for a better node.
* **Idempotent retries**: client submits carry ``(client_id, seq)``; the apply step keeps
  the outcomes of the last :data:`DEDUP_WINDOW` requests of each client in the replicated
  state (a named database of the state environment, written in the same LMDB transaction
  as the effects) and answers a repeated request with its first outcome.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

import lmdb
import zmq

from .. import errors
from ..engine import ops as O
from ..engine.core import Core
from ..net.auth import PeerKeys
from . import snapshot as snap
from .channel import Channel
from .clock import StateClock
from .coordinator import Coordinator, ElectionLock, KazooCoordinator, SessionState
from .counters import NodeCounters
from .log import Entry, ReplicatedLog
from .membership import read_members, settings_changed, write_members
from .messages import (
    ClientCall,
    ErrorReply,
    Fetch,
    FetchReply,
    Hello,
    HelloReply,
    MaintenanceCall,
    MembershipCall,
    Reply,
    ReplyStatus,
    SnapshotBegin,
    SnapshotChunk,
    SnapshotHead,
    decode_call,
    decode_request,
    pack,
    reply_rid,
    unpack,
)
from .retention import Retention, trim_point
from .timesource import SystemTime, TimeSource
from .transport import PeerLink, ReplicationServer, Transport, ZmqTransport
from .zk import ACKS, ZkAddress, quorum_of, required_acks

log = logging.getLogger(__name__)

DEDUP_WINDOW = 64
LOG_MAP_SIZE = 1 << 34  # address space for the log (sparse; its size is bounded by the retention)
CLOCK_TICK = 1.0  # seconds: an idle leader appends an empty entry this often (the state clock moves on)
FETCH_PARK = 0.25  # seconds a fetch with nothing new waits on the leader
FETCH_TIMEOUT = 2.0  # seconds a follower waits for a fetch reply before reconnecting
MAX_PARKED = 256  # parked fetches (at most one per peer connection); beyond, a fetch is answered at once
EPOCH_CHECK_TIMEOUT = 2.0  # seconds to read P/epoch when a peer names a newer epoch
#: Acknowledgement levels from the weakest to the strongest (a node's ``--acks`` may only strengthen).
ACKS_STRENGTH = {"leader": 0, "quorum": 1, "all": 2}


def outcome_to_wire(ok: bool, value: Any) -> list[Any]:
    if ok:
        return [True, value]
    name, message = errors.error_to_wire(value)
    return [False, name, message]


def outcome_from_wire(w: Sequence[Any]) -> tuple[bool, Any]:
    if w[0]:
        return True, w[1]
    return False, errors.error_from_wire(str(w[1]), str(w[2]))


def _plain(row: list[Any]) -> list[Any]:
    return [bytes(v) if isinstance(v, (memoryview, bytearray)) else v for v in row]


class Node:
    """A cluster member around one :class:`Core` (see the module docstring)."""

    def __init__(self, core: Core, zk_url: str | Coordinator, node_id: str, endpoint: str, repl_bind: str,
                 http: str | None = None, acks: str | None = None, session_timeout: float = 4.0,
                 ack_timeout: float = 10.0, context: zmq.Context[Any] | None = None,
                 peer_keys: PeerKeys | None = None, transport: Transport | None = None,
                 timer: TimeSource | None = None) -> None:
        """``zk_url`` is the cluster's ``zk://`` address, or a :class:`.coordinator.Coordinator`
        (tests pass an in-memory one); ``transport`` the peer transport (by default ZeroMQ on
        ``context``, CURVE with ``peer_keys``); ``timer`` the clocks (by default the system's)."""
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
        self.clock: StateClock = core.clock
        self.coordinator: Coordinator = (KazooCoordinator(ZkAddress.parse(zk_url), float(session_timeout))
                                          if isinstance(zk_url, str) else zk_url)
        self.timer: TimeSource = timer or SystemTime()
        self.node_id = node_id
        self.endpoint = endpoint
        self.http = http
        self.acks_override = acks
        self.session_timeout = float(session_timeout)
        self.ack_timeout = float(ack_timeout)
        self.transport: Transport = transport or ZmqTransport(context, peer_keys)
        if snap.discard_partial(core.path):
            log.warning("deleted an unfinished snapshot download (the node stopped during a transfer)")
        self.log = ReplicatedLog(os.path.join(core.path, "cluster-log"), map_size=LOG_MAP_SIZE)
        self.cdb = core.store.env.open_db(b"cluster")
        with core.store.read() as txn:
            self.applied, position = snap.read_applied(txn, self.cdb)
            #: the size quorums are counted on, from the last applied membership entry
            #: (:mod:`.membership`; ``None`` until one was applied: then ``P/config``'s)
            self.members: int | None = read_members(txn, self.cdb)
        self.pending_members: tuple[int, int] | None = None  # leader: (index, size) of a membership entry
        if position is not None and self.log.epoch_at(position.index) != position.epoch:
            # the state came from a snapshot and the node stopped before its log restarted after it
            log.warning("state installed from a snapshot at index %d: the log restarts after it", position.index)
            self.log.reset(position.index, position.epoch, position.now_ms)
        elif self.applied > self.log.last_index:
            raise errors.NodeDiverged(f"state applied up to {self.applied} but the log ends at {self.log.last_index}")
        self.log.set_commit(self.applied)
        # catch-up and trimming (docs/CLUSTER.md, "Snapshots and log trimming")
        self.retention = Retention()
        self.need_snapshot = False  # the leader's log cannot bring this node up to date
        self.live_nodes: set[str] | None = None  # leader: nodes with a ZooKeeper session (None: unknown yet)
        self._apply_lock = threading.Lock()  # applying entries / swapping the state for a snapshot
        self.snapshots_installed = 0
        self.last_snapshot: dict[str, float] = {}  # bytes and seconds of the last snapshot installed
        self.log_trimmed = 0
        # reads judge time as apply does: by the last applied entry (cluster/clock.py)
        self.clock.advance(position.now_ms if position is not None else self._entry_now(self.applied))
        # roles and epochs (guarded by self.log.lock for known_epoch / appends)
        self.known_epoch = 0
        self.epoch = 0  # the epoch this node leads, 0 when not leading
        self.role = "follower"
        self.leading = False
        self.epoch_start = 0  # index of this leadership's first entry
        self.lease_until = 0.0
        self.diverged = False
        self.config: dict[str, Any] = {"nodes": 1, "acks": "quorum"}
        self.leader_info: dict[str, Any] = {}
        self.match: dict[str, int] = {}
        self._last_now = 0
        self._last_append = 0.0  # monotonic time of this leader's last append
        self._cv = threading.Condition()  # commit / applied / leadership changes
        self._waiting: dict[int, list[tuple[bool, Any]] | None] = {}
        self._inflight: dict[tuple[str, int], int] = {}
        self._stop = threading.Event()
        self._closed = False
        self._stepdown = threading.Event()
        self._zk_ok = False
        self.elections = 0
        self.commits = 0
        self.counters = NodeCounters()  # histograms for /metrics
        self.last_contact = 0.0  # follower: monotonic time of the leader's last fetch answer (follower reads)
        # replication endpoint
        try:
            self._server: ReplicationServer = self.transport.listen(repl_bind)
        except BaseException:
            self.log.close()
            raise
        self.repl_endpoint = self._server.endpoint
        self._parked: dict[bytes, tuple[Fetch, float]] = {}  # peer identity -> (fetch, deadline)
        self._epoch_refusals = 0  # hello/fetch epochs refused because ZooKeeper never reached them
        self.snapshot_server = snap.SnapshotServer(self._send)  # leader: snapshots being sent
        self.coordinator.add_state_listener(self._zk_state)
        self._threads: list[threading.Thread] = []
        self._lock_recipe: ElectionLock | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 30.0) -> None:
        self.coordinator.start(timeout)
        self._zk_ok = True
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
            self._check_acks_override()
            self.retention = Retention.from_config(self.config)
            if self.members is None:  # no membership entry applied yet: the size the cluster was made with
                self.members = int(self.config.get("nodes", 1))
            self.coordinator.watch_config(self._on_config)
            self.known_epoch = self.coordinator.read_epoch()
            self._publish(force=True)
        except BaseException:
            self.coordinator.close()
            raise
        for name, fn in (("repl", self._repl_loop), ("fetch", self._follow_loop), ("apply", self._apply_loop),
                         ("zk", self._zk_loop), ("election", self._election_loop)):
            t = threading.Thread(target=fn, name=f"cluster-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Step down, leave ZooKeeper (closing the session at once), stop the threads and
        close the node's sockets and log. Safe to call again, and before :meth:`start`."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._step_down("stopping")
        if self._lock_recipe is not None:
            try:
                self._lock_recipe.cancel()
            except Exception:  # noqa: BLE001
                pass
        self._wake()
        with self._cv:
            self._cv.notify_all()
        for t in self._threads:
            t.join(5)
        self.coordinator.close()
        self.snapshot_server.close()
        self._server.close()
        self.log.close()

    @property
    def nodes(self) -> int:
        """The size quorums are counted on: a leader's own membership entry from the moment
        it is in its log, else the last applied one, else ``P/config``'s (:mod:`.membership`)."""
        pending = self.pending_members
        if pending is not None and self.leading:
            return pending[1]
        if self.members is not None:
            return self.members
        return int(self.config.get("nodes", 1))

    def _on_config(self, config: dict[str, Any]) -> None:
        """The coordinator's watch on the configuration (its own thread: no coordinator calls
        here). ``acks``, retention and the compaction interval apply at once; a new size is
        replicated by the leader as a membership entry (:meth:`_change_membership`)."""
        if self._closed:
            return
        changed = settings_changed(self.config, config)
        if changed:
            log.info("cluster configuration changed: %s", ", ".join(changed))
        self.config = config
        self.retention = Retention.from_config(config)

    def _change_membership(self, epoch: int) -> None:
        """Leader: if ``P/config`` asks for another size and no change is under way, append a
        membership entry one node towards it; acks are counted on the new size from then on."""
        wanted = int(self.config.get("nodes", 0) or 0)
        current = self.nodes
        if wanted < 1 or wanted == current or not self.serving():
            return
        pending = self.pending_members
        if pending is not None and self.applied < pending[0]:
            return  # one change at a time: the previous one is not applied yet
        size = current + 1 if wanted > current else current - 1
        with self.log.lock:
            if not self.leading or self.epoch != epoch:
                return
            index = self.log.append(epoch, self._next_now(), [MembershipCall(size).to_wire()])
            self.pending_members = (index, size)
            self._last_append = self.timer.monotonic()
        log.info("membership: %d -> %d nodes at log index %d", current, size, index)
        self._wake()
        self._advance_commit()

    @property
    def acks(self) -> str:
        """The acknowledgement level: the cluster's, or this node's ``--acks`` if stronger (an
        override can only strengthen it, so the guarantee never depends on which node leads)."""
        configured = str(self.config.get("acks", "quorum"))
        override = self.acks_override
        if override is None or ACKS_STRENGTH.get(override, 0) < ACKS_STRENGTH.get(configured, 1):
            return configured
        return override

    def _check_acks_override(self) -> None:
        configured = str(self.config.get("acks", "quorum"))
        override = self.acks_override
        if override is not None and ACKS_STRENGTH[override] < ACKS_STRENGTH.get(configured, 1):
            raise errors.InvalidArgument(
                f"--acks {override} is weaker than the cluster's acks {configured!r}: a node may only "
                f"strengthen it (else the guarantee would depend on which node leads)")

    @property
    def parked_fetches(self) -> int:
        """Leader: fetches waiting for new entries (at most :data:`MAX_PARKED`)."""
        return len(self._parked)

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

    # ------------------------------------------------------------------ ZooKeeper
    def _zk_state(self, state: SessionState) -> None:
        """The coordinator's session listener (its own thread: no coordinator calls here)."""
        if state is not SessionState.CONNECTED:
            self._zk_ok = False
            if self.leading:
                log.warning("ZooKeeper session %s: stepping down at once", state.value)
                self._step_down(f"ZooKeeper session {state.value}")
        else:
            self._zk_ok = True

    def info(self) -> dict[str, Any]:
        return {"node": self.node_id, "role": self.role, "endpoint": self.endpoint, "repl": self.repl_endpoint,
                "http": self.http, "epoch": self.epoch or self.known_epoch, "last_index": self.log.last_index,
                "last_epoch": self.log.last_epoch, "commit": self.log.commit_index, "applied": self.applied,
                "members": self.nodes, "clock_ms": self.log.now_at(self.log.last_index) or 0,
                "diverged": self.diverged, "log_first": self.log.first_index, "needs_snapshot": self.need_snapshot,
                "snapshots_sent": self.snapshot_server.started, "snapshots_installed": self.snapshots_installed,
                "last_snapshot": self.last_snapshot, "session_timeout": self.session_timeout,
                "session_timeout_granted": self.granted_session_timeout, "lease_seconds": self.lease_seconds}

    _published: dict[str, Any] = {}

    def _publish(self, force: bool = False) -> None:
        # (the time of the last log entry changes with every entry: /status only)
        info = {k: v for k, v in self.info().items() if k != "clock_ms"}
        if not force and info == self._published:
            return
        self.coordinator.publish_node(self.node_id, info)
        self._published = info

    def _zk_loop(self) -> None:
        """Publish this node's position, learn the leader and the newest epoch, renew the lease."""
        while not self._stop.wait(0.1):
            renew = max(0.1, self.granted_session_timeout / 8)
            if not self._zk_ok:
                continue
            try:
                if self.leading:
                    sent = self.timer.monotonic()
                    self.live_nodes = self.coordinator.live_nodes()
                    current = self.coordinator.read_epoch(fresh=True)
                    if current != self.epoch:
                        self._step_down(f"epoch moved to {current}")
                    elif self._zk_ok:
                        self.lease_until = sent + self.lease_seconds
                else:
                    self.leader_info = self.coordinator.read_leader()
                    epoch = self.coordinator.read_epoch()
                    with self.log.lock:
                        self.known_epoch = max(self.known_epoch, epoch)
                self._publish()
            except Exception as exc:  # noqa: BLE001 - connection trouble: the listener handles it
                log.debug("ZooKeeper loop: %s", exc)
            if self.leading:
                self._stop.wait(renew - 0.1 if renew > 0.1 else 0)

    # ------------------------------------------------------------------ election
    def _election_loop(self) -> None:
        while not self._stop.is_set():
            if not self._zk_ok or self.diverged or self.need_snapshot:
                self._stop.wait(0.1)
                continue
            lock = self.coordinator.election_lock(self.node_id)
            self._lock_recipe = lock
            try:
                if not lock.acquire():
                    continue
            except Exception as exc:  # noqa: BLE001 - session trouble or cancelled
                log.debug("election: %s", exc)
                self._stop.wait(0.1)
                continue
            stepped_aside = False
            try:
                if not self._stop.is_set():
                    stepped_aside = not self._lead()
            except Exception:  # noqa: BLE001
                log.exception("leadership failed")
            finally:
                self._step_down("leadership ended")
                for _ in range(3):
                    try:
                        lock.release()
                        break
                    except Exception:  # noqa: BLE001
                        if not self._zk_ok:
                            break
                        self._stop.wait(0.1)
            if stepped_aside:
                self._stop.wait(0.3)  # let the better node take the lock

    def _lead(self) -> bool:
        """Holding the election lock: become leader. False if this node must step aside."""
        self.config = self.coordinator.read_config() or self.config
        self.retention = Retention.from_config(self.config)
        new = self.coordinator.bump_epoch()
        with self.log.lock:
            self.known_epoch = max(self.known_epoch, new)
            self.role = "candidate"
        self.elections += 1
        answers = self._handshake(new)
        mine = self.log.position()
        need = quorum_of(self.nodes)
        if 1 + len(answers) < need:
            log.info("epoch %d: only %d of %d nodes answered; not leading", new, 1 + len(answers), self.nodes)
            return False
        ahead = [n for n, pos in answers.items() if pos > mine]
        if ahead:
            log.info("epoch %d: %s hold newer log entries; stepping aside", new, ahead)
            return False
        if self._stop.is_set() or not self._zk_ok:
            return True
        with self.log.lock:
            if self.known_epoch != new or self.need_snapshot:
                return False
            self._last_now = max(self._last_now, self._entry_now(self.log.last_index))
            now = self._next_now()
            self.epoch_start = self.log.append(new, now, [])  # commits every older entry with it
            self._last_append = self.timer.monotonic()
            self.match = {}
            self.snapshot_server.reset()
            self.live_nodes = None
            self.epoch = new
            self.pending_members = None
            self.lease_until = self.timer.monotonic() + 0.5 * self.granted_session_timeout
            self._stepdown.clear()
            self.leading = True
            self.role = "leader"
        self.coordinator.publish_leader({"node": self.node_id, "epoch": new, "endpoint": self.endpoint,
                                         "repl": self.repl_endpoint, "http": self.http})
        log.info("leading epoch %d from log index %d", new, self.epoch_start)
        self._advance_commit()
        self._wake()
        while not self._stepdown.wait(min(0.2, CLOCK_TICK)):
            if self._stop.is_set():
                break
            self._change_membership(new)
            self._tick(new)
        return True

    def _tick(self, epoch: int) -> None:
        """Leader: append an empty entry if nothing was appended for :data:`CLOCK_TICK`
        seconds, so that the state clock (see :mod:`.clock`) moves on without writes."""
        if self.timer.monotonic() - self._last_append < CLOCK_TICK or not self.serving():
            return
        with self.log.lock:
            if not self.leading or self.epoch != epoch:
                return
            self.log.append(epoch, self._next_now(), [])
            self._last_append = self.timer.monotonic()
        self._wake()
        self._advance_commit()

    def _step_down(self, why: str) -> None:
        with self.log.lock:
            was = self.leading
            self.leading = False
            self.lease_until = 0.0
            self.epoch = 0
            if self.role != "follower":
                self.role = "follower"
            self._stepdown.set()
        if was:
            log.warning("stepped down: %s", why)
            if self._zk_ok and not self._stop.is_set():
                threading.Thread(target=self._drop_leader_node, daemon=True).start()
        with self._cv:
            self._cv.notify_all()

    def _drop_leader_node(self) -> None:
        self.coordinator.drop_leader(self.node_id)

    def _handshake(self, epoch: int) -> dict[str, tuple[int, int]]:
        """Send ``hello(epoch)`` to every other live node; return their log positions."""
        peers = {node: str(info["repl"]) for node, info in self.coordinator.node_records().items()
                 if node != self.node_id and info.get("repl")}
        answers: dict[str, tuple[int, int]] = {}
        links: dict[str, PeerLink] = {}
        try:
            for node, ep in peers.items():
                link = self.transport.connect(ep)
                links[node] = link
                link.send(pack(Hello(epoch, self.node_id).to_wire()))
            deadline = self.timer.monotonic() + min(2.0, self.granted_session_timeout / 2)
            waiting = dict(links)
            while waiting:
                remaining = deadline - self.timer.monotonic()
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

    # ------------------------------------------------------------------ replication server
    def _wake(self) -> None:
        self._server.wake()

    def _repl_loop(self) -> None:
        self.snapshot_server.attach(self._server)
        while not self._stop.is_set():
            try:
                received = self._server.poll(0.05)
            except zmq.ZMQError:
                return
            self.snapshot_server.serve()
            for ident, body in received:
                try:
                    request = decode_request(body)
                except errors.ProtocolError as exc:
                    self._send(ident, ErrorReply(str(exc)))
                    continue
                try:
                    self._on_repl(ident, request)
                except Exception:  # noqa: BLE001
                    log.exception("replication request failed")
            self._answer_parked()

    def _send(self, ident: bytes, reply: Reply) -> None:
        self._server.reply(ident, pack(reply.to_wire()))

    def _on_repl(self, ident: bytes, req: Hello | Fetch | SnapshotBegin | SnapshotChunk) -> None:
        if isinstance(req, Hello):
            self._on_hello(ident, req)
        elif isinstance(req, Fetch):
            self._on_fetch(ident, req)
        elif isinstance(req, SnapshotChunk):  # see snapshot.SnapshotServer
            self.snapshot_server.chunk(ident, req)
        elif not self.leading:
            self._send(ident, SnapshotHead(req.rid, ReplyStatus.NOT_LEADER))
        else:
            self.snapshot_server.begin(ident, req, self.epoch, self.core.store, self.cdb,
                                       self.log.epoch_at(self.applied), self.log.now_at(self.applied))

    def _on_hello(self, ident: bytes, req: Hello) -> None:
        epoch = req.epoch
        if epoch > self.known_epoch and not self._epoch_reached(epoch, f"a hello from {req.node!r}"):
            self._send(ident, HelloReply(False, self.known_epoch, rid=req.rid))
            return
        with self.log.lock:
            if epoch < self.known_epoch:
                self._send(ident, HelloReply(False, self.known_epoch, rid=req.rid))
                return
            self.known_epoch = epoch
            last_epoch, last_index = self.log.position()
        if self.leading and self.epoch < epoch:
            self._step_down(f"{req.node} runs for epoch {epoch}")
        self._send(ident, HelloReply(True, 0, last_epoch, last_index, rid=req.rid))

    def _on_fetch(self, ident: bytes, req: Fetch) -> None:
        rid = req.rid
        if not self.leading:
            self._send(ident, FetchReply(rid, ReplyStatus.NOT_LEADER))
            return
        if req.known > self.epoch:
            if not self._epoch_reached(req.known, f"a fetch from {req.node!r}"):
                return  # a forged epoch: no answer (the follower, if real, asks again)
            self._send(ident, FetchReply(rid, ReplyStatus.FENCED))
            self._step_down(f"{req.node} knows epoch {req.known}")
            return
        prev = req.from_index - 1
        if prev < self.log.base_index:  # trimmed: only a snapshot can bring this follower up to date
            self.match.pop(req.node, None)
            self._send(ident, FetchReply(rid, ReplyStatus.SNAPSHOT, self.epoch, first=self.log.first_index))
            return
        if prev > self.log.last_index or self.log.epoch_at(prev) != req.last_epoch:
            bound = self.log.last_index if prev > self.log.last_index else prev - 1
            to = max(0, min(bound, self.log.end_of_epoch(req.last_epoch)))
            self._send(ident, FetchReply(rid, ReplyStatus.TRUNCATE, self.epoch, to=to))
            return
        node = req.node
        self.match[node] = prev
        self.snapshot_server.fetched(node)
        self._advance_commit()
        self._parked.pop(ident, None)  # a newer fetch from the same peer replaces its parked one
        if not self._reply_fetch(ident, req, force=len(self._parked) >= MAX_PARKED):
            self._parked[ident] = (req, self.timer.monotonic() + FETCH_PARK)

    def _epoch_reached(self, epoch: int, what: str) -> bool:
        """Whether ZooKeeper's ``P/epoch`` has reached ``epoch`` (named by ``what``, a peer's
        message): a real candidate bumps it before it says hello, so a larger one is forged
        (or from another cluster) and is ignored. Unknown (ZooKeeper unreachable): False."""
        try:
            current = self.coordinator.read_epoch(fresh=True, timeout=EPOCH_CHECK_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: believe nothing new
            log.debug("cannot check epoch %d of %s: %s", epoch, what, exc)
            return False
        if epoch <= current:
            return True
        self._epoch_refusals += 1
        if self._epoch_refusals & (self._epoch_refusals - 1) == 0:  # 1st, 2nd, 4th, 8th…: bounded logging
            log.warning("ignored %s naming epoch %d: ZooKeeper's epoch is %d (%d such messages so far)",
                        what, epoch, current, self._epoch_refusals)
        return False

    def _reply_fetch(self, ident: bytes, req: Fetch, force: bool = False) -> bool:
        start = req.from_index
        entries = self.log.read(start) if start <= self.log.last_index else []
        commit = self.log.commit_index
        if not entries and commit <= req.commit and not force:
            return False
        self._send(ident, FetchReply(req.rid, ReplyStatus.OK, self.epoch, commit, [e.to_wire() for e in entries]))
        return True

    def _answer_parked(self) -> None:
        if not self._parked:
            return
        now = self.timer.monotonic()
        for ident, (req, deadline) in list(self._parked.items()):
            if not self.leading:
                self._send(ident, FetchReply(req.rid, ReplyStatus.NOT_LEADER))
            elif not self._reply_fetch(ident, req, force=now >= deadline):
                continue
            del self._parked[ident]

    def _advance_commit(self) -> None:
        """Leader: the highest index held by ``required_acks`` nodes, if of this epoch."""
        if not self.leading:
            return
        n = self.nodes
        positions = sorted([self.log.durable_index, *self.match.values()], reverse=True)
        positions += [0] * max(0, n - len(positions))
        need = required_acks(self.acks, n)
        candidate = positions[need - 1]
        if candidate > self.log.commit_index and self.log.epoch_at(candidate) == self.epoch:
            if self.log.set_commit(candidate):
                self.commits += 1
                with self._cv:
                    self._cv.notify_all()
                self._wake()

    # ------------------------------------------------------------------ follower
    def _follow_loop(self) -> None:
        sock: PeerLink | None = None
        target: tuple[str, int] | None = None
        rid = 0
        try:
            while not self._stop.is_set():
                info = self.leader_info
                if (self.leading or self.role == "candidate" or not info
                        or info.get("node") == self.node_id or int(info.get("epoch", 0)) < self.known_epoch):
                    self._stop.wait(0.05)
                    continue
                want = self._leader_target(info)
                if sock is None or target != want:
                    if sock is not None:
                        sock.close()
                    sock = self.transport.connect(want[0])
                    target = want
                if self.need_snapshot:
                    def next_rid() -> int:
                        nonlocal rid
                        rid += 1
                        return rid

                    try:
                        installed = self._resync(Channel(sock, next_rid, self._stop))
                    except Exception:  # noqa: BLE001 - e.g. a damaged copy: start the transfer again
                        log.exception("installing a snapshot failed")
                        installed = False
                    if not installed:
                        sock.close()
                        sock, target = None, None
                        self._stop.wait(0.2)
                    continue
                rid += 1
                with self.log.lock:
                    req = Fetch(self.node_id, self.known_epoch, self.log.last_index + 1, self.log.last_epoch,
                                self.log.commit_index, rid)
                sock.send(pack(req.to_wire()))
                rep: FetchReply | None = None
                deadline = self.timer.monotonic() + FETCH_TIMEOUT
                while rep is None and not self._stop.is_set():
                    if self._leader_target() != target:
                        break  # a new leader: ask it at once, not after this fetch's timeout
                    remaining = deadline - self.timer.monotonic()
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
                self._on_fetched(req, rep)
        finally:
            if sock is not None:
                sock.close()

    def _resync(self, channel: Channel) -> bool:
        """Receive a snapshot of the leader's state (:func:`.snapshot.receive`) and swap it in;
        the log then restarts after the snapshot's position. False if the transfer failed
        (it is retried from the start)."""
        sink = snap.receive(channel, self.core.path, self.node_id, self.known_epoch)
        if sink is None:
            return False
        position = sink.position
        try:
            with self._apply_lock:
                with self.log.lock:
                    if self.leading or self.role == "candidate":
                        sink.abort()
                        return False
                snap.install(self.core, sink)
                self.cdb = self.core.store.env.open_db(b"cluster")
                with self.core.store.read() as txn:
                    self.members = read_members(txn, self.cdb) or self.members
                with self.log.lock:
                    self.log.reset(position.index, position.epoch, position.now_ms)
                self.clock.advance(position.now_ms)
                with self._cv:
                    self.applied = position.index
                    self._cv.notify_all()
                self.need_snapshot = False
                self.diverged = False
                self.snapshots_installed += 1
                self.last_snapshot = {"index": position.index, "bytes": sink.received,
                                      "seconds": self.timer.monotonic() - sink.started,
                                      "transfer_seconds": sink.transferred - sink.started}
        except BaseException:
            sink.abort()
            raise
        log.info("installed a snapshot at index %d (%d bytes); following from there", position.index,
                 sink.received)
        return True

    def _leader_target(self, info: dict[str, Any] | None = None) -> tuple[str, int]:
        """``(replication endpoint, epoch)`` of the leader published in ZooKeeper."""
        info = self.leader_info if info is None else info
        return str(info.get("repl")), int(info.get("epoch", 0))

    def _on_fetched(self, req: Fetch, rep: FetchReply) -> None:
        status = rep.status
        if status not in (ReplyStatus.OK, ReplyStatus.TRUNCATE, ReplyStatus.SNAPSHOT):
            self._stop.wait(0.05)
            return
        with self.log.lock:
            if rep.epoch < self.known_epoch or self.leading:
                return  # a deposed leader's answer
            self.last_contact = self.timer.monotonic()
            if self.log.last_index + 1 != req.from_index:
                return
            if status is ReplyStatus.SNAPSHOT:
                log.info("the leader's log starts at %s, after this node's %d: catching up by snapshot",
                         rep.first, self.log.last_index)
                self.need_snapshot = True
                return
            if status is ReplyStatus.TRUNCATE:
                to = rep.to
                if to < self.applied:
                    self.diverged = True
                    self.need_snapshot = True
                    log.error("the leader's log diverges below this node's applied index %d (at %d): this "
                              "node re-syncs from a snapshot", self.applied, to)
                    return
                removed = self.log.truncate_after(to)
                log.warning("truncated %d uncommitted log entries after index %d", removed, to)
                return
            entries = [Entry.from_wire(w) for w in rep.entries]
            self.log.append_entries(entries)
            moved = self.log.set_commit(rep.commit)
        if moved:
            with self._cv:
                self._cv.notify_all()

    # ------------------------------------------------------------------ apply
    def _apply_loop(self) -> None:
        while not self._stop.is_set():
            with self._cv:
                if self.log.commit_index <= self.applied:
                    self._cv.wait(0.5)
                    continue
            with self._apply_lock:
                commit = self.log.commit_index
                failed = False
                for e in self.log.read(self.applied + 1, limit=256):
                    if e.index > commit or self._stop.is_set():
                        break
                    try:
                        outcomes = self._apply_entry(e)
                    except Exception:  # noqa: BLE001 - e.g. the engine closed under us
                        log.exception("applying log entry %d failed", e.index)
                        failed = True
                        break
                    self.clock.advance(e.now_ms)
                    with self._cv:
                        self.applied = e.index
                        if e.index in self._waiting:
                            self._waiting[e.index] = outcomes
                        self._cv.notify_all()
                try:
                    self._trim_log()
                except Exception:  # noqa: BLE001 - trimming is retried after the next apply
                    log.exception("trimming the log failed")
            if failed:
                self._stop.wait(0.5)

    def _trim_log(self) -> None:
        """Trim the log to the retention (:mod:`.retention`): never past the applied index;
        on the leader, keep what live followers and snapshots in flight still need."""
        r = self.retention
        lg = self.log
        needed: list[int] = []
        if self.leading:
            live = self.live_nodes
            needed = [m + 1 for n, m in list(self.match.items()) if live is None or n in live]
            needed += self.snapshot_server.needed_from()
        bytes_upto = lg.index_to_fit(r.bytes - r.bytes // 8) if lg.size_bytes > r.bytes else None
        upto = trim_point(r, lg.base_index, lg.last_index, lg.size_bytes, self.applied, needed, bytes_upto)
        if upto > lg.base_index:
            self.log_trimmed += lg.trim_upto(upto)

    def _apply_entry(self, e: Entry) -> list[tuple[bool, Any]]:
        """Apply one committed entry; deterministic from the state and the entry alone."""
        windows: dict[str, dict[int, Any]] = {}
        outcomes: list[tuple[bool, Any] | None] = [None] * len(e.calls)
        same_as: dict[int, int] = {}  # a repeat inside the entry -> the call it repeats
        first: dict[tuple[str, int], int] = {}
        todo: list[tuple[int, list[O.Operation] | O.MaintenanceBatch]] = []
        members: int | None = None
        calls: list[ClientCall | MaintenanceCall | None] = []
        with self.core.store.read() as txn:
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

        def finish(wtxn: lmdb.Transaction, results: list[tuple[bool, Any]]) -> None:
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

        results = self.core.apply_committed(e.now_ms, [ops for _, ops in todo], finish)
        if members is not None:
            self.members = members
            log.info("membership: %d nodes from log index %d", members, e.index)
        for (i, _), res in zip(todo, results, strict=True):
            outcomes[i] = res
        for i, j in same_as.items():
            outcomes[i] = outcomes[j]
        return [o if o is not None else (False, errors.TStreamsError("no outcome")) for o in outcomes]

    # ------------------------------------------------------------------ client side (leader)
    def leader_hint(self) -> str:
        info = self.leader_info
        if self.leading:
            return f"leader: {self.node_id} at {self.endpoint}"
        if info.get("node") and info.get("node") != self.node_id:
            return f"leader: {info.get('node')} at {info.get('endpoint')}"
        return "no leader is known yet"

    def serving(self) -> bool:
        """Whether this node may serve reads now: leader, lease valid, own epoch applied."""
        return (self.leading and self._zk_ok and self.timer.monotonic() < self.lease_until
                and self.applied >= self.epoch_start)

    def check_serving(self) -> None:
        if not self.serving():
            raise errors.NotLeader(f"node {self.node_id} is not the leader ({self.role}); {self.leader_hint()}")

    def _entry_now(self, index: int) -> int:
        return self.log.now_at(index) or 0

    def _next_now(self) -> int:
        self._last_now = max(self._last_now, self.timer.wall_ms())
        return self._last_now

    def submit_batch(self, calls: Sequence[Sequence[Any]]) -> list[tuple[bool, Any]]:
        """The server's ``submit`` batch function: ``[ops, durable, client_id, seq]`` per call.
        Appends them as one log entry, waits for it to be committed and applied."""
        out: list[tuple[bool, Any] | None] = [None] * len(calls)
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
                if cid is not None and (cid, seq) in self._inflight:
                    waits.append((i, self._inflight[(cid, seq)], cid, seq))
                    continue
                rows_of.append((i, ClientCall(cid, seq, durable, [_plain(O.encode(op)) for op in ops])))
            except errors.TStreamsError as exc:
                out[i] = (False, exc)
        if rows_of or waits:
            try:
                self._replicate(rows_of, waits, out)
            except errors.TStreamsError as exc:
                for i in [r[0] for r in rows_of] + [w[0] for w in waits]:
                    if out[i] is None:
                        out[i] = (False, exc)
        return [o if o is not None else (False, errors.ClusterUnavailable("no outcome")) for o in out]

    def submit_maintenance(self, ops: Sequence[O.Compact]) -> tuple[bool, Any]:
        """Leader: replicate engine maintenance (``Compact`` records) as one log entry that
        every node applies alike; wait until it is committed and applied here. Returns
        ``(True, results)`` or ``(False, exception)``; raises ``NotLeader`` or
        ``ClusterUnavailable`` as a client write would."""
        row = MaintenanceCall([_plain(O.encode(op)) for op in O.check_maintenance_batch(ops)])
        out: list[tuple[bool, Any] | None] = [None]
        self._replicate([(0, row)], [], out)
        return out[0] if out[0] is not None else (False, errors.ClusterUnavailable("no outcome"))

    def _replicate(self, rows_of: Sequence[tuple[int, ClientCall | MaintenanceCall]],
                   waits: list[tuple[int, int, str, int]],
                   out: list[tuple[bool, Any] | None]) -> None:
        self.check_serving()
        epoch = self.epoch
        index = 0
        started = self.timer.monotonic()
        if rows_of:
            with self.log.lock:
                if not self.leading or self.epoch != epoch:
                    raise errors.NotLeader(f"node {self.node_id} stopped leading; {self.leader_hint()}")
                with self._cv:
                    self._waiting[self.log.last_index + 1] = None
                index = self.log.append(epoch, self._next_now(), [c.to_wire() for _, c in rows_of], sync=False)
                self._last_append = self.timer.monotonic()
            self.counters.group_size.observe(len(rows_of))
            for _, c in rows_of:
                if isinstance(c, ClientCall) and c.client_id is not None:
                    self._inflight[(c.client_id, c.seq)] = index
            self._wake()  # followers fetch the entry while this node syncs it
            self.log.sync()
            self._advance_commit()
        indexes = {index} if index else set()
        indexes.update(w[1] for w in waits)
        for ix in indexes:
            with self._cv:
                self._waiting.setdefault(ix, None)
        deadline = self.timer.monotonic() + self.ack_timeout
        try:
            with self._cv:
                while not all(self.applied >= ix for ix in indexes):
                    if not self.leading or self.epoch != epoch:
                        raise errors.ClusterUnavailable(
                            f"node {self.node_id} stopped leading before the write was committed; its outcome is "
                            f"unknown (retry it); {self.leader_hint()}")
                    remaining = deadline - self.timer.monotonic()
                    if remaining <= 0:
                        raise errors.ClusterUnavailable(
                            f"the write was not acknowledged by {required_acks(self.acks, self.nodes)} of "
                            f"{self.nodes} nodes within {self.ack_timeout:g} s; its outcome is unknown (retry it)")
                    self._cv.wait(min(remaining, 0.2))
                # acknowledge only while this node surely still leads (lease from ZooKeeper)
                if not (self.leading and self._zk_ok and self.timer.monotonic() < self.lease_until):
                    raise errors.ClusterUnavailable(
                        f"node {self.node_id} cannot confirm its leadership; the outcome is unknown (retry it)")
                results = {ix: self._waiting.get(ix) for ix in indexes}
            self.counters.ack_seconds.observe(self.timer.monotonic() - started)
        finally:
            with self._cv:
                for ix in indexes:
                    self._waiting.pop(ix, None)
            for _, c in rows_of:
                if isinstance(c, ClientCall) and c.client_id is not None \
                        and self._inflight.get((c.client_id, c.seq)) == index:
                    del self._inflight[(c.client_id, c.seq)]
        if index:
            got = results.get(index)
            if got is None:  # applied before we registered: read the outcome from the window
                got = [self.stored_outcome(c.client_id, c.seq) if isinstance(c, ClientCall)
                       else self.stored_outcome(None, 0) for _, c in rows_of]
            for (i, _), res in zip(rows_of, got, strict=True):
                out[i] = res
        for i, _, cid, seq in waits:
            out[i] = self.stored_outcome(cid, seq)

    def stored_outcome(self, cid: str | None, seq: int) -> tuple[bool, Any]:
        if cid is None:
            return (False, errors.ClusterUnavailable("the outcome of this write is not known; retry it"))
        with self.core.store.read() as txn:
            raw = txn.get(b"c" + cid.encode(), db=self.cdb)
        w = dict(unpack(raw)) if raw else {}
        if seq in w:
            return outcome_from_wire(w[seq])
        return (False, errors.ClusterUnavailable("the outcome of this write is not known; retry it"))

