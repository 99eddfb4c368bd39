"""A replicated cluster in one process: real :class:`~tstreams_embedded.cluster.node.Node`
objects on real engines (each in its own directory) over the in-memory coordinator
(:mod:`.coordinator`) and network (:mod:`.network`), in the spirit of hashicorp/raft's
``MakeCluster``. Nodes can be stopped and restarted on their disk, partitioned, cut from
ZooKeeper and have their sessions expired, all without subprocesses or sockets.

    with MemoryCluster(tmp_path, 3) as c:
        leader = c.leader()
        txn_id = c.instant("s", 0, [b"x"])
        c.network.isolate(leader.node_id, c.others(leader.node_id))
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .. import errors
from ..cluster.clock import StateClock
from ..cluster.log import ReplicatedLog
from ..cluster.node import LOG_MAP_SIZE, Node
from ..cluster.runtime import REAL, Runtime
from ..cluster.serve import state_digest
from ..cluster.timesource import TimeSource
from ..engine.protocol import ops as O
from ..engine.storage.core import Core
from .coordinator import MemoryCoordinator, MemoryZooKeeper
from .disk import FaultyDisk, StateDisk
from .network import MemoryNetwork
from .node_time import NemesisTime
from .polling import eventually

T = TypeVar("T")


class MemoryCluster:
    """``n`` nodes ``n1 … nN`` under ``root`` (see the module docstring). ``runtime`` and
    ``clock``: the nodes' threads and clocks (real ones by default; the deterministic
    simulation passes its own); ``map_size``: each node's engine map (bytes)."""

    def __init__(self, root: str | os.PathLike[str], n: int = 3, *, seed: int = 0, session_timeout: float = 1.0,
                 ack_timeout: float = 5.0, acks: str = "quorum", runtime: Runtime = REAL,
                 clock: TimeSource | None = None, cluster_id: str | None = None,
                 map_size: int | None = None, **settings: Any) -> None:
        """``settings``: more of the cluster's configuration (e.g. ``log_retain_entries``)."""
        self.root = Path(root)
        self.runtime = runtime
        self.clock = clock
        self.map_size = map_size
        self.zk = MemoryZooKeeper(nodes=n, acks=acks, session_timeout=session_timeout, runtime=runtime,
                                  cluster_id=cluster_id, **settings)
        self.network = MemoryNetwork(seed, runtime)
        self.session_timeout = session_timeout
        self.ack_timeout = ack_timeout
        self.ids = [f"n{i}" for i in range(1, n + 1)]
        self.nodes: dict[str, Node] = {}
        #: each node's clocks (kept over restarts), which a nemesis jumps or pauses
        self.times = {node_id: NemesisTime(clock) for node_id in self.ids}
        #: each node's log fsync, which a nemesis makes fail
        self.disks = {node_id: FaultyDisk(runtime) for node_id in self.ids}
        #: each node's engine state as of its last fsync (what :meth:`crash` leaves of it)
        self.states: dict[str, StateDisk] = {}
        self._seq = itertools.count(1)
        #: nodes whose process is paused (:meth:`pause`)
        self.paused: set[str] = set()
        for node_id in self.ids:
            self.start(node_id)

    def __enter__(self) -> MemoryCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------- lifecycle
    def start(self, node_id: str, data: str | os.PathLike[str] | None = None, endpoint: str | None = None) -> Node:
        """Start node ``node_id`` on its directory (kept from an earlier run, if any), or on
        ``data``; its replication endpoint is ``mem://<endpoint>`` (by default the node id)."""
        name = endpoint or node_id
        sizes = {} if self.map_size is None else {"map_size": self.map_size}
        core = Core(os.fspath(data if data is not None else self.root / node_id), "sync", clock=StateClock(),
                    compaction_interval=None, fire_schedules=False, **sizes)
        try:
            state_disk = self.states[node_id] = StateDisk(self.root / ".state-images" / node_id)
            state_disk.keep(core)  # what it opens is on disk
            node = Node(core, MemoryCoordinator(self.zk, node_id), node_id, f"mem-client://{name}",
                        f"mem://{name}", session_timeout=self.session_timeout, ack_timeout=self.ack_timeout,
                        transport=self.network.transport(name),
                        timer=self.times.setdefault(node_id, NemesisTime(self.clock)),
                        log_fsync=self.disks.setdefault(node_id, FaultyDisk(self.runtime)).fsync,
                        state_fsync=state_disk.fsync, runtime=self.runtime)
        except BaseException:
            core.close()
            raise
        grouped = getattr(self.runtime, "grouped", None)  # the simulation: the node's tasks are one process
        try:
            if grouped is not None:
                with grouped(node_id):
                    node.start()
            else:
                node.start()
        except BaseException:
            node.stop()
            core.close()
            raise
        self.nodes[node_id] = node
        return node

    def pause(self, node_id: str) -> None:
        """Node ``node_id``'s process stops (SIGSTOP, a long GC pause) and ZooKeeper expires
        its session without telling it (:meth:`.coordinator.MemoryZooKeeper.pause`). Under
        the simulation its tasks stop where they are (the clock goes on; frames to it queue
        up); with real threads, which cannot be stopped, its clocks freeze instead and its
        links are cut both ways. :meth:`resume` ends it; the node learns of its lost session
        only at :meth:`.coordinator.MemoryZooKeeper.resume`."""
        self.paused.add(node_id)
        pause_group = getattr(self.runtime, "pause_group", None)
        if pause_group is not None:
            pause_group(node_id)
        else:
            self.times[node_id].pause()
            self.network.isolate(node_id, self.others(node_id))
        self.zk.pause(node_id)

    def resume(self, node_id: str) -> None:
        """The paused process runs again (before it hears from ZooKeeper; see :meth:`pause`)."""
        if node_id not in self.paused:
            return
        self.paused.discard(node_id)
        resume_group = getattr(self.runtime, "resume_group", None)
        if resume_group is not None:
            resume_group(node_id)
        else:
            self.times[node_id].resume()  # its clocks jump to the real time
            self.network.heal()

    def stop(self, node_id: str) -> None:
        """Stop node ``node_id`` (its session closes; its disk stays)."""
        self.resume(node_id)
        node = self.nodes.pop(node_id)
        node.stop()
        node.core.close()

    def crash(self, node_id: str) -> int:
        """Stop node ``node_id`` as a power loss would: log entries it wrote but had not
        synced (after :attr:`~..cluster.log.ReplicatedLog.durable_index`) are lost, and so are
        the applies made since the last fsync of its engine state (applies are not synced:
        :mod:`~..cluster.applier`). Returns how many log entries were lost."""
        node = self.nodes[node_id]
        durable = node.log.durable_index
        self.stop(node_id)
        self.states[node_id].restore(node.core.path)
        log = ReplicatedLog(node.log.path, map_size=LOG_MAP_SIZE)
        try:
            return log.truncate_after(max(durable, log.base_index))
        finally:
            log.close()

    def close(self) -> None:
        for node_id in list(self.nodes):
            self.stop(node_id)

    # -------------------------------------------------------------- roles
    def others(self, node_id: str) -> list[str]:
        return [n for n in self.ids if n != node_id]

    def leader(self, timeout: float = 20.0, exclude: str | None = None) -> Node:
        """The node serving as leader (waiting up to ``timeout`` seconds for one)."""
        def serving() -> Node | None:
            leaders = [n for n in self.nodes.values() if n.serving() and n.node_id != exclude]
            return leaders[0] if len(leaders) == 1 else None

        node = self.eventually(serving, timeout, 0.02, "one node serves as leader")
        assert node is not None
        return node

    def eventually(self, fn: Callable[[], T | None], timeout: float, interval: float, message: str) -> T | None:
        """:func:`.polling.eventually` on the cluster's runtime (its clock and sleeps)."""
        if self.runtime is REAL:
            return eventually(fn, timeout, interval, message=message)
        rt = self.runtime
        deadline = rt.monotonic() + timeout
        while True:
            got = fn()
            if got:
                return got
            if rt.monotonic() >= deadline:
                raise AssertionError(f"{message}: not true after {timeout:g} s (simulated)")
            rt.sleep(interval)

    # -------------------------------------------------------------- writes and state
    def submit(self, ops: list[O.Operation], node: Node | None = None, client_id: str = "test") -> Any:
        """Submit ``ops`` as one durable client call on ``node`` (the leader by default);
        the outcome's value, or its exception raised."""
        target = node or self.leader()
        ok, value = target.submit_batch([[[O.encode(op) for op in ops], True, client_id, next(self._seq)]])[0]
        if not ok:
            raise value
        return value

    def create_stream(self, name: str, partitions: int = 1) -> None:
        try:
            self.submit([O.CreateStream(name, partitions, 3600)])
        except errors.StreamExists:
            pass

    def instant(self, stream: str, partition: int, items: list[bytes], node: Node | None = None) -> int:
        """Write ``items`` as one instant transaction; its acknowledged transaction ID."""
        got = self.submit([O.Instant(stream, partition, O.pack_items(items))], node)
        txn_id: int = got[0]
        return txn_id

    def digests(self) -> dict[str, str]:
        return {node_id: state_digest(node.core)["digest"] for node_id, node in self.nodes.items()}

    def converged(self, timeout: float = 20.0) -> str:
        """Wait until every running node applied the same log and holds the same state."""
        def same() -> str | None:
            applied = {n.applied for n in self.nodes.values()}
            last = {n.log.last_index for n in self.nodes.values()}
            if len(applied) != 1 or last != applied:
                return None
            digests = set(self.digests().values())
            return digests.pop() if len(digests) == 1 else None

        digest = self.eventually(same, timeout, 0.05, "all nodes reach the same state")
        assert digest is not None
        return digest
