"""State stores on the replicated cluster: a streams App on ``ts.connect("zk://…")``; its
StoreWrite records travel in the replicated log, so after the leader is SIGKILLed the new
leader serves the same state and the app continues from it (no replay)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster.conftest import Cluster  # tests/cluster (pytest puts tests/ on sys.path)

from tstreams_embedded.streams import App, StreamsBuilder
from tstreams_embedded.testing import ZooKeeperServer, eventually

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Iterator[Cluster]:
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zk"))
    zk.start()
    c = Cluster(zk, tmp_path).start()
    try:
        yield c
    finally:
        c.stop()
        zk.cleanup()


def counts_topology() -> object:
    b = StreamsBuilder()
    (b.stream("views", value_serde="json").group_by(lambda k, v: v["page"], key_serde="str")
        .aggregate(lambda: 0, lambda k, v, n: n + 1, store="per-page"))
    return b.build()


def write(engine: object, pages: list[str]) -> None:
    engine.producer("views").instant([json.dumps({"page": p}).encode() for p in pages])  # type: ignore[attr-defined]


def test_state_survives_leader_failover(cluster: Cluster) -> None:
    leader = cluster.leader()
    engine = cluster.connect(timeout=60)
    try:
        engine.create_stream("views")
        write(engine, ["/a", "/b", "/a"])
        with App(engine, application_id="c", topology=counts_topology()) as first:  # type: ignore[arg-type]
            first.run(until_idle=True)  # closing it leaves the group: its task leases are free at once
        leader.kill()
        new_leader = cluster.leader()
        assert new_leader is not leader
        app = App(engine, application_id="c", topology=counts_topology())  # type: ignore[arg-type]
        assert app.store("per-page").all() == {"/a": 2, "/b": 1}  # replicated with the log
        write(engine, ["/b", "/c"])
        app.run(until_idle=True)
        assert app.store("per-page").all() == {"/a": 2, "/b": 2, "/c": 1}
        leader.start()  # rejoins as a follower and catches up
        eventually(cluster.converged, 30, 0.1, message="all nodes reach the same state", ignore=(OSError,))
    finally:
        engine.close()
