"""Fixtures for the cluster tests: one real ZooKeeper per module, a fresh 3-node cluster
(real ``tstreams serve --cluster`` processes) per test."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tstreams_embedded.cluster.zk import init_cluster
from tstreams_embedded.testing import ClusterNodeProcess, ZooKeeperServer, eventually

SESSION = 3.0  # ZooKeeper session timeout of the nodes (s): short, yet not expired by a loaded machine
_paths = itertools.count(1)


class ClusterNode(ClusterNodeProcess):
    """``tstreams serve --cluster`` in a child process, with the tests' session timeout."""

    def __init__(self, node_id: str, data: Path, workdir: Path, url: str, acks: str | None = None,
                 session: float = SESSION) -> None:
        super().__init__(node_id, data, workdir, url, session_timeout=session, acks=acks)


class Cluster:
    def __init__(self, zk: ZooKeeperServer, root: Path, n: int = 3, acks: str | None = None,
                 session: float = SESSION, **config: Any) -> None:
        """``config``: more cluster settings for ``init_cluster`` (e.g. ``log_retain_entries``)."""
        self.url = f"zk://{zk.address}/c{next(_paths)}"
        self.root = root
        self.session = session
        self.closers: list[Any] = []  # clients to close at stop (also when a test fails)
        init_cluster(self.url, n, **config)
        self.nodes = [ClusterNode(f"n{i}", root / f"n{i}", root / "logs", self.url, acks, session)
                      for i in range(1, n + 1)]

    def start(self) -> Cluster:
        """Start every node; if one fails to start, stop those started and re-raise."""
        try:
            for node in self.nodes:
                node.start()
        except BaseException:
            self.stop()
            raise
        return self

    def leader(self, timeout: float = 15.0) -> ClusterNode:
        def find() -> ClusterNode | None:
            leaders = [n for n in self.nodes if n.is_leader()]
            return leaders[0] if len(leaders) == 1 else None

        found: ClusterNode = eventually(find, timeout, 0.05, message="one serving leader")
        return found

    def add_node(self, node_id: str) -> ClusterNode:
        """A new node with an empty data directory (not started)."""
        node = ClusterNode(node_id, self.root / node_id, self.root / "logs", self.url, session=self.session)
        self.nodes.append(node)
        return node

    def followers(self, leader: ClusterNode) -> list[ClusterNode]:
        return [n for n in self.nodes if n is not leader]

    def connect(self, **options: Any) -> Any:
        import tstreams_embedded as ts

        options.setdefault("timeout", 30.0)
        return ts.connect(self.url, **options)

    def converged(self) -> dict[str, Any] | None:
        """The common state of all nodes once every node applied the same entries."""
        states = [n.state() for n in self.nodes]
        statuses = [n.status() for n in self.nodes]
        if any("digest" not in s for s in states):  # (503 while a node swaps in a snapshot)
            return None
        if len({s["digest"] for s in states}) == 1 and len({s["applied"] for s in statuses}) == 1:
            return states[0]
        return None

    def stop(self) -> None:
        for close in self.closers:
            close()
        for node in self.nodes:
            node.stop()


@pytest.fixture(scope="module")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk"))
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def cluster(zk: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(zk, tmp_path).start()
    yield c
    c.stop()


@pytest.fixture
def connect(cluster: Cluster) -> Iterator[Callable[..., Any]]:
    """``cluster.connect`` whose engines are closed at teardown, even after a failure (an
    open cluster client's ZooKeeper thread would keep the test process alive)."""
    opened: list[Any] = []

    def make(**options: Any) -> Any:
        engine = cluster.connect(**options)
        opened.append(engine)
        return engine

    yield make
    for engine in opened:
        engine.close()
