"""A leader cut from ZooKeeper cannot release the election lock: it says so (the lock then
goes with its session) instead of swallowing the error, and the cluster elects another
leader (cluster/election.py, RELEASE_RETRY)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tstreams_embedded.testing import eventually
from tstreams_embedded.testing.memory_cluster import MemoryCluster


def test_a_leader_cut_from_zookeeper_reports_the_lock_it_could_not_release(tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tstreams_embedded.cluster.election")
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        acked = [c.instant("s", 0, [b"before"])]
        old = c.leader()
        c.zk.cut(old.node_id)
        eventually(lambda: any("could not release the election lock" in r.getMessage() for r in caplog.records),
                   20, message="the failed release was not reported")
        new = c.leader(timeout=c.session_timeout + 30, exclude=old.node_id)
        acked.append(c.instant("s", 0, [b"after"], node=new))
        c.zk.heal(old.node_id)
        c.converged()
        for node in c.nodes.values():
            assert [t.id for t in node.core.transactions_range("s", 0, 0, 2**63 - 1)] == acked
