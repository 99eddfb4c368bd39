"""Fixtures for the cluster tests: one real ZooKeeper per session, a fresh 3-node cluster
(real ``tstreams serve --cluster`` processes) per test."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tstreams_embedded.cluster.zk import init_cluster
from tstreams_embedded.testing import ClusterNodeProcess, ZooKeeperServer
from tstreams_embedded.testing.cluster import LocalCluster

SESSION = 3.0  # ZooKeeper session timeout of the nodes (s): short, yet not expired by a loaded machine
_paths = itertools.count(1)


#: A ``tstreams serve --cluster`` child process (the tests' name for it).
ClusterNode = ClusterNodeProcess


class Cluster(LocalCluster):
    """A fresh cluster on the module's ZooKeeper: ``n`` nodes with the tests' session
    timeout, and the clients to close when it stops (also when a test fails)."""

    def __init__(self, zk: ZooKeeperServer, root: Path, n: int = 3, acks: str | None = None,
                 session: float = SESSION, extra_args: Sequence[str] = (), **config: Any) -> None:
        """``config``: more cluster settings for ``init_cluster`` (e.g. ``log_retain_entries``);
        ``extra_args``: more ``tstreams serve`` options for every node."""
        url = f"zk://{zk.address}/c{next(_paths)}"
        init_cluster(url, n, **config)
        super().__init__(url, root, n, session_timeout=session, acks=acks, extra_args=extra_args)
        self.root = root
        self.session = session
        self.closers: list[Any] = []

    def add_node(self, node_id: str) -> ClusterNode:
        """A new node with an empty data directory (not started)."""
        node = ClusterNode(node_id, self.root / node_id, self.root / "logs", self.url, session_timeout=self.session)
        self.nodes.append(node)
        return node

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
        super().stop()


@pytest.fixture(scope="session")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for every cluster test (each cluster has a path of its own in it;
    tests that pause it resume it before they end)."""
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
