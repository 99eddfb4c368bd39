"""Membership changes on a running cluster, one node at a time (docs/CLUSTER.md, "Add a node /
remove a node"; :mod:`tstreams_embedded.cluster.membership`): ``cluster init --nodes N±1``
is picked up by the nodes' watch on ``P/config``, the leader replicates the new size as a
log entry, and quorums are counted on it from then on."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tstreams_embedded import errors
from tstreams_embedded.cli import main
from tstreams_embedded.cluster.zk import init_cluster
from tstreams_embedded.testing import ZooKeeperServer, eventually

from .conftest import Cluster, ClusterNode
from .writers import ItemWriter, items_on

pytestmark = pytest.mark.timeout(180)


def members(node: ClusterNode) -> int:
    return int(node.status()["members"])


def converged(c: Cluster, timeout: float = 30) -> dict[str, Any]:
    state: dict[str, Any] = eventually(c.converged, timeout, 0.1, message="all live nodes reach the same state",
                                       ignore=(OSError,))
    return state


def test_init_refuses_a_size_change_of_more_than_one(zk: ZooKeeperServer) -> None:
    url = f"zk://{zk.address}/sizes"
    init_cluster(url, 3)
    with pytest.raises(errors.InvalidArgument, match="one node at a time"):
        init_cluster(url, 5)
    with pytest.raises(errors.InvalidArgument, match="--nodes 2"):
        init_cluster(url, 1)
    result = CliRunner().invoke(main, ["cluster", "init", url, "--nodes", "5"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "InvalidArgument" in lines[0] and "--force" in lines[0], result.output
    assert init_cluster(url, 4)["nodes"] == 4  # one step is fine
    assert init_cluster(url, 2, force=True)["nodes"] == 2


def writing(c: Cluster) -> tuple[ClusterNode, Any, ItemWriter]:
    """Once ``c`` is ready: its leader, a ``zk://`` engine, and an :class:`ItemWriter` on
    its stream ``s`` whose writes flow."""
    leader = c.ready()
    engine = c.connect(timeout=60)
    c.closers.append(engine.close)
    engine.create_stream("s")
    writer = ItemWriter(engine)
    writer.start()
    eventually(lambda: len(writer.acked) >= 20, 30, 0.05, message="writes flow")
    return leader, engine, writer


def test_grow_from_3_to_4_with_writes_running(zk: ZooKeeperServer, tmp_path: Path) -> None:
    # (a long session: the leader keeps leading without a quorum for seconds at the end,
    # which CheckQuorum allows only for an election timeout, 3/4 of the session)
    c = Cluster(zk, tmp_path, session=9.0).start()
    try:
        leader, engine, writer = writing(c)
        init_cluster(c.url, 4)  # grow: first the configuration, then the new node
        eventually(lambda: members(leader) == 4, 30, 0.05, message="the leader counts on 4 nodes")
        n4 = c.add_node("n4").start()  # brand-new, empty
        eventually(lambda: members(n4) == 4 and n4.status()["applied"] >= leader.status()["commit"] - 5, 60, 0.1,
                   message="the new node caught up", ignore=(OSError,))
        written = len(writer.acked)
        eventually(lambda: len(writer.acked) >= written + 20, 30, 0.05, message="writes still flow")
        writer.stop()
        converged(c)
        assert sorted(items_on(n4)) == sorted(writer.acked), "every acknowledged write, exactly once"
        assert all(members(n) == 4 for n in c.nodes)

        # quorum is now 3 of 4: with two followers stopped, leader + one follower commit nothing
        leader = c.leader()
        followers = c.followers(leader)
        paused, live = followers[:2], followers[2]
        pool = concurrent.futures.ThreadPoolExecutor(1)
        for f in paused:
            f.pause()
        try:
            fut = pool.submit(engine.producer("s").instant, [b"needs-three"])
            top = max(int(leader.status()["match"].get(f.node_id, 0)) for f in paused)  # frozen now
            last = eventually(lambda: (st := leader.status())["last_index"] >= top + 3 and st["last_index"], 30, 0.05,
                              message="the leader appends (the write, clock entries)")
            eventually(lambda: int(leader.status()["match"].get(live.node_id, 0)) >= last, 30, 0.05,
                       message="the live follower holds the leader's log")
            st = leader.status()
            assert st["commit"] <= top < st["match"][live.node_id], st  # 2 of 4 hold it: not committed
            assert not fut.done()
        finally:
            for f in paused:
                f.resume()
        assert fut.result(timeout=60) > 0
        pool.shutdown()
        state = converged(c)
        assert items_on(leader).count("needs-three") == 1
        assert state["transactions"] == len(writer.acked) + 1
    finally:
        c.stop()


def test_shrink_from_4_to_3_with_one_node_stopped(zk: ZooKeeperServer, tmp_path: Path) -> None:
    c = Cluster(zk, tmp_path, n=4).start()
    try:
        leader, engine, writer = writing(c)
        gone = c.followers(leader)[-1]
        gone.stop()  # shrink: first stop the node, then the configuration
        c.nodes.remove(gone)
        init_cluster(c.url, 3)
        eventually(lambda: all(members(n) == 3 for n in c.nodes), 30, 0.05, message="every node counts on 3",
                   ignore=(OSError,))
        written = len(writer.acked)
        eventually(lambda: len(writer.acked) >= written + 20, 30, 0.05, message="writes continue")
        # on 3 nodes, leader + one follower are a quorum (on 4 they would not be)
        leader = c.leader()
        stopped = c.followers(leader)[0]
        stopped.pause()
        try:
            written = len(writer.acked)
            eventually(lambda: len(writer.acked) >= written + 10, 30, 0.05,
                       message="writes are acknowledged by 2 of 3 nodes")
        finally:
            stopped.resume()
        writer.stop()
        state = converged(c)
        for node in c.nodes:
            assert sorted(items_on(node)) == sorted(writer.acked), node.node_id
        assert state["transactions"] == len(writer.acked)
    finally:
        c.stop()


def test_acks_change_is_picked_up_by_a_running_cluster(cluster: Cluster) -> None:
    """``cluster init --acks all`` on a running cluster: with one follower stopped, the leader
    and the other follower hold new entries but nothing commits; back to ``--acks quorum``
    (same size), the pending write is acknowledged without restarting anything."""
    leader = cluster.ready()
    engine = cluster.connect(timeout=60)
    cluster.closers.append(engine.close)
    engine.create_stream("s")
    engine.producer("s").instant([b"first"])
    init_cluster(cluster.url, 3, acks="all")
    paused, live = cluster.followers(leader)
    paused.pause()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        top = int(leader.status()["match"].get(paused.node_id, 0))  # frozen now
        fut = pool.submit(engine.producer("s").instant, [b"needs-all"])
        last = eventually(lambda: (st := leader.status())["last_index"] >= top + 3 and st["last_index"], 30, 0.05,
                          message="the leader appends (the write, clock entries)")
        eventually(lambda: int(leader.status()["match"].get(live.node_id, 0)) >= last, 30, 0.05,
                   message="the live follower holds the leader's log")
        st = leader.status()
        assert st["commit"] <= top < st["match"][live.node_id], st  # 2 of 3 is not "all"
        assert not fut.done()
        init_cluster(cluster.url, 3, acks="quorum")
        assert fut.result(timeout=60) > 0  # committed by 2 of 3 while the follower is still stopped
        assert paused.alive()
    finally:
        paused.resume()
        pool.shutdown()
    state = converged(cluster)
    assert state["transactions"] == 2
