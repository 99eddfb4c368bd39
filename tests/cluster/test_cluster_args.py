"""Bad input to the cluster's public entry points gets specific errors (no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.cluster import ZkAddress, init_cluster
from tstreams_embedded.cluster.zk import BoundedZk, required_acks
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
    for bad in ({"log_retain_entries": -1}, {"log_retain_bytes": 1}, {"log_retain_entries": "10"}):
        with pytest.raises(errors.InvalidArgument, match="log_retain"):
            init_cluster(f"zk://{zk.address}/x", 3, **bad)  # type: ignore[arg-type]
    assert init_cluster(f"zk://{zk.address}/x", 3) == {"nodes": 3, "acks": "quorum", "log_retain_entries": 100_000,
                                                       "log_retain_bytes": 256 << 20, "compaction_interval": 60.0}
    with pytest.raises(errors.InvalidArgument, match="compaction_interval"):
        init_cluster(f"zk://{zk.address}/x", 3, compaction_interval=-5)
    assert init_cluster(f"zk://{zk.address}/x", 3, log_retain_entries=5)["log_retain_entries"] == 5


def test_zookeeper_calls_are_bounded(tmp_path: Path) -> None:
    """A ZooKeeper that accepted the connection but does not answer (SIGSTOP) makes a call
    fail with ClusterUnavailable after the bound, instead of hanging (Node.start, init,
    status and the cluster client use these calls)."""
    zk = ZooKeeperServer(tmp_path / "zk")  # its own server: this test stops it
    zk.start()
    client = zk.client(timeout=10)
    try:
        client.start(timeout=10)
        bounded = BoundedZk(client, timeout=1.0)
        assert bounded.exists("/") is not None
        zk.pause()  # returns once the process is stopped
        assert "State:\tT" in Path(f"/proc/{zk.pid}/status").read_text()
        with pytest.raises(errors.ClusterUnavailable, match="did not answer"):
            bounded.get("/zookeeper")
    finally:
        zk.resume()
        client.stop()
        client.close()
        zk.cleanup()
