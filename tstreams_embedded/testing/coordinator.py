"""An in-memory ZooKeeper for cluster nodes in one process: :class:`MemoryZooKeeper` holds
the cluster's records; each node gets a :class:`MemoryCoordinator` (its session), which
implements :class:`tstreams_embedded.cluster.coordinator.Coordinator`.

A test can :meth:`~MemoryZooKeeper.expire` a session (its ephemeral records and its place in
the election queue go, its listener hears ``LOST``; the node's next call opens a new session,
as kazoo does), or :meth:`~MemoryZooKeeper.cut` a node off (calls fail with
``ClusterUnavailable``, its listener hears ``SUSPENDED``; the session lives until the test
expires it or :meth:`~MemoryZooKeeper.heal` reconnects it).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from typing import Any

from .. import errors
from ..cluster.coordinator import NodeIdInUse, SessionState
from ..cluster.runtime import REAL, Runtime


class MemoryZooKeeper:
    """The shared records of one cluster (see the module docstring). Thread-safe."""

    def __init__(self, nodes: int = 3, acks: str = "quorum", session_timeout: float = 2.0,
                 runtime: Runtime = REAL, cluster_id: str | None = None, **settings: Any) -> None:
        """``runtime``: whose condition the records are guarded by (the simulation's, under it);
        ``cluster_id``: the cluster's id (by default a random one)."""
        self.runtime = runtime
        self.lock = runtime.condition()
        self.config: dict[str, Any] | None = {"nodes": nodes, "acks": acks, **settings}
        self.epoch = 0
        self.cluster_id = cluster_id or uuid.uuid4().hex
        self.leader: tuple[int, dict[str, Any]] | None = None  # (owner session, record)
        self.nodes: dict[str, tuple[int, dict[str, Any]]] = {}  # node id -> (owner session, record)
        self.queue: list[tuple[int, str]] = []  # election contenders (session, node id), first holds it
        self.session_timeout = session_timeout
        self._sessions = itertools.count(1)
        self.clients: list[MemoryCoordinator] = []
        self._config_watchers: list[Callable[[dict[str, Any]], None]] = []

    def new_session(self) -> int:
        return next(self._sessions)

    def set_config(self, **changes: Any) -> None:
        """Change the configuration (``tstreams cluster init`` on a running cluster)."""
        with self.lock:
            assert self.config is not None
            self.config = {**self.config, **changes}
            config = dict(self.config)
            watchers = list(self._config_watchers)
        for w in watchers:
            w(config)

    def watch_config(self, callback: Callable[[dict[str, Any]], None]) -> None:
        with self.lock:
            self._config_watchers.append(callback)
            config = dict(self.config or {})
        callback(config)

    def drop_session(self, session: int) -> None:
        """Remove everything ``session`` owns (caller holds :attr:`lock`)."""
        self.nodes = {k: v for k, v in self.nodes.items() if v[0] != session}
        if self.leader is not None and self.leader[0] == session:
            self.leader = None
        self.queue = [q for q in self.queue if q[0] != session]
        self.lock.notify_all()

    def client_of(self, node_id: str) -> MemoryCoordinator:
        """The newest coordinator of node ``node_id`` (a restarted node's, not its stopped one's)."""
        return next(c for c in reversed(self.clients) if c.node_id == node_id)

    def expire(self, node_id: str) -> None:
        """Expire the session of node ``node_id``'s coordinator (see the module docstring)."""
        self.client_of(node_id).expire()

    def cut(self, node_id: str) -> None:
        """Cut node ``node_id`` off from ZooKeeper: it hears ``SUSPENDED``; its session (its
        records and its place in the election queue) lives on until the test expires it, or
        for the session timeout, when ZooKeeper expires it (the node hears ``LOST`` only once
        it is reconnected, as with kazoo)."""
        client = self.client_of(node_id)
        client.set_reachable(False)
        self._expire_when_silent(client)

    def _expire_when_silent(self, client: MemoryCoordinator) -> None:
        """Drop ``client``'s session once it has been unreachable for the session timeout."""
        with self.lock:
            session = client.session

        def expire() -> None:
            self.runtime.sleep(self.session_timeout)
            with self.lock:
                if session is not None and client.session == session and not client.reachable:
                    self.drop_session(session)
                    client.session = None

        self.runtime.spawn(f"zookeeper-expires-{client.node_id}", expire)

    def heal(self, node_id: str) -> None:
        self.client_of(node_id).set_reachable(True)

    def pause(self, node_id: str) -> None:
        """Node ``node_id`` stops hearing from ZooKeeper *without being told* (a paused
        process: no ``SUSPENDED``), and ZooKeeper expires its session once it has been silent
        for the session timeout (until then it holds its records and the election lock, as a
        real session does). :meth:`resume` ends it."""
        client = self.client_of(node_id)
        with self.lock:
            client.reachable = False
        self._expire_when_silent(client)

    def resume(self, node_id: str) -> None:
        """The paused node runs again: it learns its session was ``LOST`` and reconnects."""
        client = self.client_of(node_id)
        client.expire()
        client.set_reachable(True)

    def holder(self) -> str | None:
        """The node id holding the election lock."""
        with self.lock:
            return self.queue[0][1] if self.queue else None


class MemoryLock:
    """One node's attempt at the election lock of a :class:`MemoryZooKeeper`."""

    def __init__(self, client: MemoryCoordinator, node_id: str) -> None:
        self.client = client
        self.node_id = node_id
        self.cancelled = False
        self.entry: tuple[int, str] | None = None

    def acquire(self) -> bool:
        zk = self.client.zk
        with zk.lock:
            self.entry = (self.client.session_or_fail(), self.node_id)
            zk.queue.append(self.entry)
            while not self.cancelled:
                if self.entry not in zk.queue:
                    raise errors.ClusterUnavailable("the session expired while waiting for the lock")
                if zk.queue[0] == self.entry:
                    return True
                zk.lock.wait(0.1)
            if self.entry in zk.queue:
                zk.queue.remove(self.entry)
            return False

    def release(self) -> None:
        """Remove this node from the queue; ``ClusterUnavailable`` without ZooKeeper (the
        lock is then held until the session expires, as kazoo's is)."""
        zk = self.client.zk
        with zk.lock:
            self.client.session_or_fail()
            if self.entry is not None and self.entry in zk.queue:
                zk.queue.remove(self.entry)
                zk.lock.notify_all()

    def cancel(self) -> None:
        with self.client.zk.lock:
            self.cancelled = True
            self.client.zk.lock.notify_all()


class MemoryCoordinator:
    """One node's session with a :class:`MemoryZooKeeper`
    (:class:`~tstreams_embedded.cluster.coordinator.Coordinator`)."""

    def __init__(self, zk: MemoryZooKeeper, node_id: str = "") -> None:
        self.zk = zk
        self.node_id = node_id
        self.session: int | None = None
        self.reachable = True
        self.closed = False
        self._had_session = False
        self._listeners: list[Callable[[SessionState], None]] = []
        zk.clients.append(self)

    @property
    def description(self) -> str:
        return "memory://cluster"

    # -------------------------------------------------------------- session
    def start(self, timeout: float) -> None:
        if not self.reachable:
            raise errors.ClusterUnavailable("cannot reach ZooKeeper at memory://cluster: refused")
        with self.zk.lock:
            self.session = self.zk.new_session()
        self._had_session = True

    def close(self) -> None:
        with self.zk.lock:
            self.closed = True
            if self.session is not None:
                self.zk.drop_session(self.session)
            self.session = None

    @property
    def granted_session_timeout(self) -> float | None:
        return self.zk.session_timeout if self.session is not None or self.closed else None

    def add_state_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._listeners.append(listener)

    def _tell(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            listener(state)

    def expire(self) -> None:
        with self.zk.lock:
            if self.session is not None:
                self.zk.drop_session(self.session)
            self.session = None
        self._tell(SessionState.LOST)
        if self.reachable and not self.closed:  # kazoo opens a new session at once
            with self.zk.lock:
                self.session = self.zk.new_session()
            self._tell(SessionState.CONNECTED)

    def set_reachable(self, reachable: bool) -> None:
        self.reachable = reachable
        if not reachable:
            self._tell(SessionState.SUSPENDED)
            return
        with self.zk.lock:
            expired = self.session is None and not self.closed and self._had_session
            if self.session is None and not self.closed:
                self.session = self.zk.new_session()
        if expired:  # it expired while away: kazoo reports LOST before the new session
            self._tell(SessionState.LOST)
        self._tell(SessionState.CONNECTED)

    def session_or_fail(self) -> int:
        """The live session (caller holds the lock), or ``ClusterUnavailable``."""
        if not self.reachable or self.session is None or self.closed:
            raise errors.ClusterUnavailable("ZooKeeper connection lost (memory://cluster)")
        return self.session

    # -------------------------------------------------------------- records
    def read_config(self) -> dict[str, Any] | None:
        with self.zk.lock:
            self.session_or_fail()
            return dict(self.zk.config) if self.zk.config is not None else None

    def watch_config(self, callback: Callable[[dict[str, Any]], None]) -> None:
        self.zk.watch_config(callback)

    def cluster_id(self) -> str:
        with self.zk.lock:
            self.session_or_fail()
            return self.zk.cluster_id

    def read_epoch(self, fresh: bool = False, timeout: float | None = None) -> int:
        with self.zk.lock:
            self.session_or_fail()
            return self.zk.epoch

    def bump_epoch(self) -> int:
        with self.zk.lock:
            self.session_or_fail()
            self.zk.epoch += 1
            return self.zk.epoch

    def live_nodes(self) -> set[str]:
        with self.zk.lock:
            self.session_or_fail()
            return set(self.zk.nodes)

    def node_records(self) -> dict[str, dict[str, Any]]:
        with self.zk.lock:
            self.session_or_fail()
            return {k: dict(v[1]) for k, v in self.zk.nodes.items()}

    @property
    def session_token(self) -> str | None:
        return f"{self.session:x}" if self.session is not None else None

    def node_owners(self) -> dict[str, str]:
        with self.zk.lock:
            self.session_or_fail()
            return {k: f"{v[0]:x}" for k, v in self.zk.nodes.items()}

    def publish_node(self, node_id: str, record: dict[str, Any], previous_session: str | None = None) -> None:
        with self.zk.lock:
            mine = self.session_or_fail()
            held = self.zk.nodes.get(node_id)
            if held is not None and held[0] != mine and f"{held[0]:x}" != previous_session:
                raise NodeIdInUse(node_id, f"{held[0]:x}")
            self.zk.nodes[node_id] = (mine, dict(record))

    def read_leader(self) -> dict[str, Any]:
        with self.zk.lock:
            self.session_or_fail()
            return dict(self.zk.leader[1]) if self.zk.leader is not None else {}

    def publish_leader(self, record: dict[str, Any]) -> None:
        with self.zk.lock:
            self.zk.leader = (self.session_or_fail(), dict(record))

    def drop_leader(self, node_id: str) -> None:
        with self.zk.lock:
            if self.zk.leader is not None and self.zk.leader[1].get("node") == node_id:
                self.zk.leader = None

    def election_lock(self, node_id: str) -> MemoryLock:
        return MemoryLock(self, node_id)

    def status(self) -> dict[str, Any]:
        with self.zk.lock:
            self.session_or_fail()
            leader = self.zk.leader[1] if self.zk.leader is not None else {}
            return {"cluster": self.description, "config": dict(self.zk.config or {}), "epoch": self.zk.epoch,
                    "leader": leader.get("node"), "leader_endpoint": leader.get("endpoint"),
                    "nodes": {k: dict(v[1]) for k, v in self.zk.nodes.items()}}
