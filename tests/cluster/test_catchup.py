"""Catch-up and membership (docs/CLUSTER.md, "Snapshots and log trimming"), with a real
ZooKeeper and real node processes: a follower that fell behind the trimmed log and a
brand-new empty node catch up from a streamed snapshot of the leader's state; a live but
lagging follower keeps the entries it needs and catches up from the log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tstreams_embedded.cluster.zk import cluster_status
from tstreams_embedded.testing import ZooKeeperServer, eventually

from .conftest import SESSION, Cluster, ClusterNode
from .test_observe import scrape, value

pytestmark = pytest.mark.timeout(180)

RETAIN = 5  # log entries each node keeps (tiny, so that a few writes trim the log)


@pytest.fixture
def small_log(zk: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(zk, tmp_path, log_retain_entries=RETAIN).start()
    yield c
    c.stop()


def items_on(node: ClusterNode) -> list[str]:
    items: list[str] = node.state(items=True)["items"]
    return items


def converged(c: Cluster, timeout: float = 60) -> dict[str, Any]:
    # (a node swapping in a snapshot answers /state with an error for a moment: ValueError)
    state: dict[str, Any] = eventually(c.converged, timeout, 0.1, message="all nodes reach the same state",
                                       ignore=(OSError, ValueError))
    return state


def wait_session_gone(c: Cluster, node: ClusterNode) -> None:
    """Until ZooKeeper expired the node's session: it no longer counts as a live follower."""
    eventually(lambda: node.node_id not in cluster_status(c.url)["nodes"], SESSION + 20, 0.1,
               message=f"{node.node_id}'s ZooKeeper node expired")


def write_until_trimmed_past(engine: Any, leader: ClusterNode, index: int, written: list[str], tag: str) -> None:
    """Write instants until the leader's log no longer holds entry ``index + 1``."""
    producer = engine.producer("s")
    for i in range(500):
        if leader.status()["log_first"] > index + 1:
            return
        producer.instant([f"{tag}{i}".encode()])
        written.append(f"{tag}{i}")
    raise AssertionError(f"the leader's log was never trimmed past {index}: {leader.status()}")


def test_follower_behind_the_trimmed_log_catches_up_by_snapshot(small_log: Cluster) -> None:
    c = small_log
    leader = c.leader()
    engine = c.connect(timeout=60)
    c.closers.append(engine.close)
    engine.create_stream("s", partitions=2)
    written: list[str] = []
    producer = engine.producer("s")
    for i in range(10):
        producer.instant([f"a{i}".encode()])
        written.append(f"a{i}")
    follower = c.followers(leader)[0]
    held = leader.status()["last_index"]  # the follower holds at most this much
    follower.kill()
    wait_session_gone(c, follower)
    write_until_trimmed_past(engine, leader, held, written, "b")
    consumer = engine.consumer("s", "g")
    got = list(iter(consumer.get_transaction, None))
    consumer.checkpoint()
    assert len(got) == len(written)
    assert leader.status()["log_first"] > held + 1
    sent = leader.status()["snapshots_sent"]  # (a node that started late may have needed one)
    follower.start()  # its log ends before the leader's first entry: only a snapshot can help
    state = converged(c)
    status = follower.status()
    assert status["snapshots_installed"] == 1, status
    assert status["log_first"] > held + 1  # its log restarted after the snapshot's position
    assert leader.status()["snapshots_sent"] == sent + 1
    assert "installed a snapshot at index" in follower.log()
    # /metrics: the snapshot's progress on both sides
    got_metrics, sent_metrics = scrape(follower), scrape(leader)
    assert value(got_metrics, "tstreams_cluster_snapshots_installed_total") == 1
    assert value(got_metrics, "tstreams_cluster_last_snapshot_index") == status["last_snapshot"]["index"] > held
    received = value(got_metrics, "tstreams_cluster_snapshot_received_bytes_total")
    assert received == status["last_snapshot"]["bytes"] > 0
    assert value(sent_metrics, "tstreams_cluster_snapshots_sent_total") == sent + 1
    assert (value(sent_metrics, "tstreams_cluster_snapshot_sent_bytes_total") or 0) >= received
    assert sorted(items_on(follower)) == sorted(written)
    assert state["offsets"] == 2 and state["transactions"] == len(written)
    producer.instant([b"after"])  # and the log carries on from the snapshot's position
    written.append("after")
    converged(c)
    assert sorted(items_on(follower)) == sorted(written)
    # restarting it finds a consistent state and log (no second snapshot)
    follower.kill()
    follower.start()
    converged(c)
    assert follower.status()["snapshots_installed"] == 0  # counts this process's installs
    engine.close()


def test_new_empty_node_replaces_a_dead_one(small_log: Cluster) -> None:
    c = small_log
    leader = c.leader()
    engine = c.connect(timeout=60)
    c.closers.append(engine.close)
    engine.create_stream("s")
    producer = engine.producer("s")
    written: list[str] = []
    for i in range(10):
        producer.instant([f"a{i}".encode()])
        written.append(f"a{i}")
    dead, other = c.followers(leader)
    dead.kill()
    wait_session_gone(c, dead)
    c.nodes.remove(dead)
    write_until_trimmed_past(engine, leader, 1, written, "b")  # the log no longer starts at entry 1
    new = c.add_node("n4")  # an empty data directory and a new name, same cluster size
    new.start()
    converged(c)
    assert new.status()["snapshots_installed"] == 1
    assert sorted(items_on(new)) == sorted(written)
    # once caught up, the new node holds entries for the quorum: with the other old follower
    # down, leader + new node still commit
    other.kill()
    producer.instant([b"needs-the-new-node"])
    written.append("needs-the-new-node")
    eventually(lambda: "needs-the-new-node" in items_on(new), 30, 0.1, message="applied on the new node")
    other.start()
    converged(c)
    assert sorted(items_on(other)) == sorted(written)
    engine.close()


def test_trimming_keeps_what_a_live_lagging_follower_needs(zk: ZooKeeperServer, tmp_path: Path) -> None:
    # sessions of 9 s: the paused follower stays live (its ZooKeeper node exists) while it lags
    c = Cluster(zk, tmp_path, session=9.0, log_retain_entries=RETAIN).start()
    try:
        leader = c.leader(timeout=30)
        engine = c.connect(timeout=60)
        c.closers.append(engine.close)
        engine.create_stream("s")
        producer = engine.producer("s")
        written: list[str] = []
        for i in range(20):
            producer.instant([f"a{i}".encode()])
            written.append(f"a{i}")
        lagging = c.followers(leader)[0]

        def all_up_to_date() -> bool:
            status = leader.status()
            return all(status["match"].get(f.node_id) == status["last_index"] for f in c.followers(leader))

        eventually(all_up_to_date, 60, 0.05, message="every follower is up to date")
        assert leader.status()["log_first"] > 1, "trimmed while every follower kept up"
        sent = leader.status()["snapshots_sent"]  # (a node that started late may have needed one)
        lagging.pause()
        try:
            for i in range(30):
                producer.instant([f"b{i}".encode()])
                written.append(f"b{i}")
            status = leader.status()
            held = status["match"][lagging.node_id]
            assert lagging.node_id in cluster_status(c.url)["nodes"], "still a live follower"
            assert status["log_first"] <= held + 1, f"kept the entries after {held}: {status}"
            assert status["last_index"] - status["log_first"] + 1 > RETAIN + 1, "beyond the retention"
        finally:
            lagging.resume()
        converged(c)
        assert lagging.status()["snapshots_installed"] == 0, "caught up from the log"
        assert leader.status()["snapshots_sent"] == sent
        assert sorted(items_on(lagging)) == sorted(written)
        # once it caught up, the leader trims back to the retention at its next writes
        for i in range(20):
            status = leader.status()
            if status["last_index"] - status["log_first"] + 1 <= RETAIN + 2:
                break
            producer.instant([f"c{i}".encode()])
        else:
            raise AssertionError(f"the leader never trimmed back: {leader.status()}")
        engine.close()
    finally:
        c.stop()


def test_sigkill_during_a_snapshot_transfer(small_log: Cluster) -> None:
    """A follower killed while it receives a snapshot restarts on its old state (the partial
    copy is deleted) and takes the snapshot again."""
    c = small_log
    leader = c.leader()
    engine = c.connect(timeout=60)
    c.closers.append(engine.close)
    engine.create_stream("s")
    producer = engine.producer("s")
    follower = c.followers(leader)[0]
    follower.kill()
    wait_session_gone(c, follower)
    blob = bytes(range(256)) * 4096  # 1 MiB items: a snapshot of tens of MiB takes many chunks
    for i in range(40):
        producer.instant([f"big{i}:".encode() + blob])
    assert leader.status()["log_first"] > 2
    partial = follower.data / "cluster-snapshot.tmp" / "data.mdb"
    follower.start()
    eventually(lambda: partial.exists() and partial.stat().st_size > 0, 60, 0.001,
               message="the follower is receiving the snapshot")
    follower.kill()  # mid-transfer (the snapshot is about 40 MiB, sent in 1 MiB chunks)
    assert partial.exists(), "killed during the transfer"
    assert partial.stat().st_size < 40 << 20
    follower.start()
    converged(c)
    assert follower.status()["snapshots_installed"] == 1
    assert "deleted an unfinished snapshot download" in follower.log()
    assert not partial.parent.exists()


def test_the_byte_bound_trims_even_for_a_live_follower(zk: ZooKeeperServer, tmp_path: Path) -> None:
    """Past --log-retain-bytes the leader trims entries a live (paused) follower still needs;
    that follower then catches up by snapshot."""
    c = Cluster(zk, tmp_path, session=9.0, log_retain_entries=100_000, log_retain_bytes=1 << 16).start()
    try:
        leader = c.leader(timeout=30)
        engine = c.connect(timeout=60)
        c.closers.append(engine.close)
        engine.create_stream("s")
        producer = engine.producer("s")
        producer.instant([b"first"])
        lagging = c.followers(leader)[0]
        eventually(lambda: leader.status()["match"].get(lagging.node_id) == leader.status()["last_index"], 60, 0.05,
                   message="the follower is up to date")
        lagging.pause()
        try:
            held = leader.status()["match"][lagging.node_id]
            for i in range(8):  # 8 entries of 16 KiB: twice the byte bound
                producer.instant([f"big{i}:".encode() + b"x" * (16 << 10)])
            assert lagging.node_id in cluster_status(c.url)["nodes"], "still a live follower"
            status = leader.status()
            assert status["log_first"] > held + 1, f"trimmed past the live follower's position {held}: {status}"
        finally:
            lagging.resume()
        converged(c)
        assert lagging.status()["snapshots_installed"] == 1
    finally:
        c.stop()
