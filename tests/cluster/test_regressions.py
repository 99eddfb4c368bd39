"""Regression tests for cluster bugs found by the Jepsen-style test (test_jepsen.py), each
on a real ZooKeeper with real node processes."""

from __future__ import annotations

import json
import time

from tstreams_embedded.cluster.zk import ZkAddress
from tstreams_embedded.testing import ZooKeeperServer

from .conftest import SESSION, Cluster


def test_a_node_restarted_within_the_session_timeout_owns_its_membership_node(zk: ZooKeeperServer,
                                                                              cluster: Cluster) -> None:
    """Bug: a node restarted before its previous process's ZooKeeper session expired
    updated that session's ephemeral ``P/nodes/<id>`` (a plain ``set``) instead of creating
    its own. When the old session expired the node vanished, and the next election did not
    ask this node ("only 1 of 3 nodes answered; not leading"), delaying failover."""
    leader = cluster.leader()
    follower = cluster.followers(leader)[0]
    path = ZkAddress.parse(cluster.url).node(follower.node_id)
    client = zk.client()
    client.start()
    try:
        before = client.get(path)[1].ephemeralOwner
        follower.kill()
        t0 = time.monotonic()
        follower.start()
        assert time.monotonic() - t0 < SESSION, "restarted too slowly to reproduce the bug"
        data, stat = client.get(path)
        assert stat.ephemeralOwner != before, "the membership node still belongs to the killed process's session"
        assert json.loads(data)["node"] == follower.node_id
    finally:
        client.stop()
        client.close()
