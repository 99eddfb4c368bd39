"""The leader cut from its followers only, with real processes, in a network namespace.

Everything (ZooKeeper, three ``tstreams serve --cluster`` nodes, the client) runs inside a
fresh namespace (``ip netns``) whose loopback gets an HTB root qdisc; u32 filters send the
packets to and from the leader's replication port into a class whose queue holds nothing
(``pfifo limit 0``), so the followers cannot reach the leader while ZooKeeper and the client
port still can (no netem or iptables needed). CheckQuorum must make the leader step down
and the two followers elect another one within the session timeout + 1 s (#20).

The outer test creates the namespace and runs the inner one in it (``ip netns exec``); it
skips, saying why, where namespaces cannot be made (not root, no ``ip``/``tc``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tstreams_embedded.testing import eventually

from .conftest import Cluster
from .test_cluster import converged, items_on

INNER = "TSTREAMS_TEST_IN_NETNS"
SESSION = 3.0


def _namespace_or_skip() -> str:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    name = f"tsns{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {made.stderr.strip()}")
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    return name


def _run_inner(test: str, timeout: float) -> None:
    name = _namespace_or_skip()
    try:
        got = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-m", "pytest", "-q", "-x",
                              "-p", "no:cacheprovider", f"{__file__}::{test}"],
                             env={**os.environ, INNER: "1"}, capture_output=True, text=True, timeout=timeout)
        assert got.returncode == 0, got.stdout[-6000:] + got.stderr[-2000:]
        assert " passed" in got.stdout and "skipped" not in got.stdout, got.stdout[-2000:]
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_leader_cut_from_its_followers_in_a_namespace() -> None:
    _run_inner("test_inner_leader_cut_from_its_followers", 240)


@pytest.mark.soak
@pytest.mark.parametrize("round_", range(20))
def test_leader_cut_from_its_followers_in_a_namespace_soak(round_: int) -> None:
    _run_inner("test_inner_leader_cut_from_its_followers", 240)


def _cut_port(port: int) -> None:
    """Every packet to or from ``port`` on this namespace's loopback goes to a class that
    queues nothing (dropped)."""
    for cmd in (["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "10"],
                ["tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit"],
                ["tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:20", "htb", "rate", "8bit",
                 "ceil", "8bit"],
                ["tc", "qdisc", "add", "dev", "lo", "parent", "1:20", "handle", "20:", "pfifo", "limit", "0"],
                ["tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                 "match", "ip", "dport", str(port), "0xffff", "flowid", "1:20"],
                ["tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                 "match", "ip", "sport", str(port), "0xffff", "flowid", "1:20"]):
        subprocess.run(cmd, check=True, capture_output=True)


def _heal() -> None:
    subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], check=True, capture_output=True)


@pytest.mark.skipif(not os.environ.get(INNER), reason="runs inside the namespace the outer test makes")
def test_inner_leader_cut_from_its_followers(zk: Any, tmp_path: Path) -> None:
    cluster = Cluster(zk, tmp_path, session=SESSION).start()
    try:
        engine = cluster.connect(timeout=60)
        cluster.closers.append(engine.close)
        engine.create_stream("s")
        producer = engine.producer("s")
        producer.instant([b"before"])
        acked = ["before"]
        old = cluster.leader(timeout=60)
        epoch = old.status()["epoch"]
        port = int(str(old.status()["repl"]).rsplit(":", 1)[1])
        _cut_port(port)
        cut = time.monotonic()

        def new_leader() -> Any:
            leaders = [n for n in cluster.nodes if n is not old and n.is_leader()]
            return leaders[0] if leaders else None

        eventually(new_leader, SESSION + 10, 0.05, message="the followers elect a new leader")
        producer.instant([b"during"])
        acked.append("during")
        took = time.monotonic() - cut
        print(f"writes resumed {took:.2f} s after the cut")
        assert took < SESSION + 1, f"writes resumed {took:.1f} s after the cut"
        assert old.status()["role"] != "leader"
        _heal()
        producer.instant([b"after"])
        acked.append("after")
        eventually(lambda: old.status()["role"] == "follower" and old.status()["epoch"] > epoch, 30, 0.1,
                   message="the old leader follows the new epoch")
        converged(cluster)
        for node in cluster.nodes:
            assert sorted(items_on(node)) == sorted(acked)
    finally:
        cluster.stop()
