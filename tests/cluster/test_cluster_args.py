"""Bad input to the cluster's public entry points gets specific errors (no processes)."""

from __future__ import annotations

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.cluster import ZkAddress, init_cluster
from tstreams_embedded.cluster.zk import required_acks
from tstreams_embedded.testing import ZooKeeperServer


@pytest.mark.parametrize("url", ["", "tcp://h:1/x", "zk://", "zk://h:1", "zk://h:1/", "zk://h/x", "zk://h:p/x", 7])
def test_bad_addresses(url: object) -> None:
    with pytest.raises(errors.InvalidArgument):
        ZkAddress.parse(url)


def test_address_list() -> None:
    a = ZkAddress.parse("zk://h1:2181,h2:2182/a/b/")
    assert (a.hosts, a.path, a.leader) == ("h1:2181,h2:2182", "/a/b", "/a/b/leader")


def test_required_acks() -> None:
    assert [required_acks(a, 3) for a in ("quorum", "all", "leader")] == [2, 3, 1]
    assert required_acks("quorum", 5) == 3


def test_init_and_connect_errors(zk: ZooKeeperServer) -> None:
    with pytest.raises(errors.InvalidArgument):
        init_cluster(f"zk://{zk.address}/x", 0)
    with pytest.raises(errors.InvalidArgument):
        init_cluster(f"zk://{zk.address}/x", 3, acks="most")
    with pytest.raises(errors.InvalidArgument, match="cluster init"):
        ts.connect(f"zk://{zk.address}/never-initialised", timeout=5)
    assert init_cluster(f"zk://{zk.address}/x", 3) == {"nodes": 3, "acks": "quorum"}
