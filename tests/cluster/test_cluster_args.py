"""Bad input to the cluster's public entry points gets specific errors (no processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.cli import main
from tstreams_embedded.cluster import ZkAddress, init_cluster
from tstreams_embedded.cluster.coordinator import CONNECT_TIMEOUT
from tstreams_embedded.cluster.zk import BoundedZk, required_acks
from tstreams_embedded.testing import ZooKeeperServer, free_port
from tstreams_embedded.testing.server_process import child_environment


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


# ---------------------------------------------------------------------------- audit 10: bad input
BAD_PATHS = ["/a b\x00c", "/a\x01b", "/zookeeper", "/zookeeper/quota", "/a/./b", "/a/../b", "/ok?x=1", "/ok#f",
             "/a//b"]


@pytest.mark.parametrize("url", ["zk://127.0.0.1:99999/x", "zk://127.0.0.1:0/x", "zk://h:1,h:65536/x",
                                 *(f"zk://127.0.0.1:2181{p}" for p in BAD_PATHS)])
def test_bad_ports_and_paths(url: str) -> None:
    """Ports out of range and paths ZooKeeper refuses (or reserves) are refused when parsed,
    before any connection, with InvalidArgument (not kazoo's ValueError/BadArgumentsError)."""
    with pytest.raises(errors.InvalidArgument, match="port|path|ZooKeeper's own"):
        ZkAddress.parse(url)


def test_good_paths_still_parse() -> None:
    for path in ("/a b", "/zk", "/zookeeper2", "/a/.b/c..", "/ünï"):
        assert ZkAddress.parse(f"zk://h:1{path}").path == path
    assert ZkAddress.parse("zk://h:65535/x").hosts == "h:65535"


@pytest.mark.parametrize("path", ["/zookeeper", "/a/./b", "/ok?x=1", "/a b\x00c"])
def test_bad_paths_at_every_entry_point(zk: ZooKeeperServer, path: str) -> None:
    from tstreams_embedded.cluster import cluster_status

    url = f"zk://{zk.address}{path}"
    with pytest.raises(errors.InvalidArgument):
        init_cluster(url, 3)
    with pytest.raises(errors.InvalidArgument):
        cluster_status(url)
    with pytest.raises(errors.InvalidArgument):
        ts.connect(url, timeout=5)


@pytest.mark.parametrize("options", [
    {"timeout": float("nan")}, {"timeout": float("inf")}, {"timeout": -1}, {"timeout": "5"},
    {"request_timeout": "x"}, {"request_timeout": -1}, {"request_timeout": float("nan")},
    {"heartbeat": -1}, {"heartbeat": 0}, {"heartbeat": None},
    {"zk_timeout": "x"}, {"zk_timeout": float("nan")}, {"zk_timeout": 0},
    {"bogus": 1}, {"pipline_data": False},
])
def test_bad_connect_options(zk: ZooKeeperServer, options: dict[str, object]) -> None:
    """Each bad option is named at once (a NaN timeout used to busy-loop forever, unknown
    options and negative timeouts failed later as a misleading "no leader")."""
    init_cluster(f"zk://{zk.address}/opts", 3)
    name = next(iter(options))
    with pytest.raises(errors.InvalidArgument, match=name):
        ts.connect(f"zk://{zk.address}/opts", **options)


def test_kazoo_errors_become_tstreams_errors(zk: ZooKeeperServer) -> None:
    """A ZooKeeper refusal that parsing cannot foresee (here: a child of an ephemeral node)
    is a tstreams error, not a kazoo one."""
    client = zk.client()
    client.start()
    try:
        client.create("/ephemeral-parent", ephemeral=True)
        with pytest.raises((errors.InvalidArgument, errors.ClusterUnavailable), match="ZooKeeper"):
            init_cluster(f"zk://{zk.address}/ephemeral-parent/c", 3)
    finally:
        client.stop()
        client.close()


def _one_line_error(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    output = (result.stdout + result.stderr).strip()
    assert result.exit_code != 0, output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in output
    assert len(output.splitlines()) == 1, output
    return output


@pytest.mark.parametrize("path", ["/x", *BAD_PATHS])
def test_cli_bad_cluster_addresses(path: str) -> None:
    """``tstreams cluster init/status`` answer a bad address with one line, no traceback."""
    port = "99999" if path == "/x" else "2181"
    for command in (["cluster", "init", f"zk://127.0.0.1:{port}{path}", "--nodes", "3"],
                    ["cluster", "status", f"zk://127.0.0.1:{port}{path}"]):
        assert "InvalidArgument" in _one_line_error(command)


def test_cli_zookeeper_refusal_is_one_line(zk: ZooKeeperServer) -> None:
    client = zk.client()
    client.start()
    try:
        client.create("/ephemeral-parent-cli", ephemeral=True)
        line = _one_line_error(["cluster", "init", f"zk://{zk.address}/ephemeral-parent-cli/c", "--nodes", "3"])
        assert "ZooKeeper" in line
    finally:
        client.stop()
        client.close()


def test_serve_with_an_ipc_bind_needs_repl(tmp_path: Path) -> None:
    """The replication endpoint defaults to the first --bind's host on TCP; with an ipc://
    bind there is none, so --repl is required (it used to fail as 'tcp:///path:*': No such device)."""
    line = _one_line_error(["serve", "--data", str(tmp_path / "d"), "--cluster", "zk://127.0.0.1:2181/x",
                            "--node-id", "n1", "--bind", f"ipc://{tmp_path}/x.sock"])
    assert "InvalidArgument" in line and "--repl" in line


def test_a_node_may_only_strengthen_the_cluster_acks(zk: ZooKeeperServer, tmp_path: Path) -> None:
    """``serve --acks`` weaker than the cluster's acks is refused at start (the guarantee
    would depend on which node leads); a stronger one is used."""
    from tstreams_embedded.cluster.clock import StateClock
    from tstreams_embedded.cluster.node import Node
    from tstreams_embedded.engine.storage.core import Core

    url = f"zk://{zk.address}/acks"
    init_cluster(url, 3, acks="quorum")
    for override, expect in (("leader", None), ("all", "all"), ("quorum", "quorum"), (None, "quorum")):
        core = Core(str(tmp_path / f"d-{override}"), clock=StateClock())
        node = Node(core, url, "n1", "tcp://127.0.0.1:1", "tcp://127.0.0.1:*", acks=override, session_timeout=3)
        try:
            if expect is None:
                with pytest.raises(errors.InvalidArgument, match="weaker than the cluster's acks 'quorum'"):
                    node.start()
            else:
                node.start()
                assert node.acks == expect
        finally:
            node.stop()
            core.close()


def test_init_on_an_existing_cluster_changes_only_the_options_given(zk: ZooKeeperServer) -> None:
    """Re-running ``cluster init`` with one option keeps the others (it once reset ``acks``
    and the retention to their defaults); a new cluster needs its size."""
    url = f"zk://{zk.address}/reinit"
    with pytest.raises(errors.InvalidArgument, match="--nodes"):
        init_cluster(url, acks="all")
    init_cluster(url, 3, acks="all", log_retain_entries=500, compaction_interval=5)
    assert init_cluster(url, log_retain_bytes=1 << 30) == {
        "nodes": 3, "acks": "all", "log_retain_entries": 500, "log_retain_bytes": 1 << 30, "compaction_interval": 5.0}
    result = CliRunner().invoke(main, ["cluster", "init", url, "--acks", "leader"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"nodes": 3, "acks": "leader", "log_retain_entries": 500,
                                         "log_retain_bytes": 1 << 30, "compaction_interval": 5.0}


def test_a_refused_zookeeper_connection_says_refused() -> None:
    """kazoo reports every failed connection as a time-out: a port nobody listens on is
    named as refused, within the command's --timeout."""
    port = free_port()
    line = _one_line_error(["cluster", "status", f"zk://127.0.0.1:{port}/x", "--timeout", "2"])
    assert "ClusterUnavailable" in line and "refused" in line, line


def test_a_node_on_a_refused_zookeeper_port_fails_fast_saying_refused(tmp_path: Path) -> None:
    """``tstreams serve --cluster`` on a port nobody listens on took ~33 s and said
    "time-out": it exits non-zero within its connect timeout (``CONNECT_TIMEOUT``, see
    docs/CLUSTER.md) naming the connection as refused, in one line."""
    port = free_port()
    command = [sys.executable, "-m", "tstreams_embedded.cli", "serve", "--data", str(tmp_path / "d"),
               "--cluster", f"zk://127.0.0.1:{port}/x", "--node-id", "n1", "--bind", f"tcp://127.0.0.1:{free_port()}"]
    done = subprocess.run(command, env=child_environment(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=CONNECT_TIMEOUT + 20)  # generous: the bound plus start-up on a loaded machine
    assert done.returncode != 0, done.stderr
    errors_out = [line for line in done.stderr.splitlines() if line.startswith("Error:")]  # (kazoo logs retries)
    assert len(errors_out) == 1, done.stderr
    assert "ClusterUnavailable" in errors_out[0] and "refused" in errors_out[0], done.stderr
    assert "Traceback" not in done.stderr, done.stderr
