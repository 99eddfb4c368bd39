"""Issue 19 items 14 and 17: endpoint addresses are checked before use.

ZeroMQ parsed ``tcp://127.0.0.1:99999`` as port 34463 (16 bits) and accepted ``:-5``; the
server bound and the client connected to the wrong port silently. Both now refuse such
addresses with ``InvalidArgument``, through the Python API and the CLI. ``serve --data
NEW --bind garbage`` created ``NEW/`` before failing: arguments are now checked first.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from tornado.ioloop import IOLoop

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.cli import main
from tstreams_embedded.net.endpoints import check_endpoint
from tstreams_embedded.net.registry import Registry
from tstreams_embedded.net.serve import serve
from tstreams_embedded.net.server import Server
from tstreams_embedded.testing.server_process import child_environment

BAD_PORTS = ["99999", "65536", "-5", "0", "", "x", "²", "7000x", "+80", " 80"]
BAD_ADDRESSES = ["garbage", "tcp://", "tcp://:7000", "tcp://127.0.0.1", "udp://127.0.0.1:7000", "ipc://"]


@pytest.mark.parametrize("port", BAD_PORTS)
def test_client_refuses_a_port_outside_1_to_65535(port: str) -> None:
    with pytest.raises(errors.InvalidArgument, match="port must be a number in 1-65535"):
        ts.connect(f"tcp://127.0.0.1:{port}", timeout=1).close()


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_client_refuses_a_malformed_address(address: str) -> None:
    with pytest.raises(errors.InvalidArgument, match="is not a valid ZeroMQ address to connect to"):
        ts.connect(address, timeout=1).close()


@pytest.mark.parametrize("port", [p for p in BAD_PORTS if p != "0"])
def test_server_refuses_to_bind_a_port_outside_1_to_65535(port: str) -> None:
    loop = IOLoop(make_current=False)
    try:
        with pytest.raises(errors.InvalidArgument, match="port must be a number in 1-65535"):
            server = Server(Registry(), f"tcp://127.0.0.1:{port}")
            server.start(loop)  # before the fix: bound to port % 65536
            server.stop(0)
    finally:
        loop.close()


@given(st.integers(min_value=-10**6, max_value=10**6))
def test_ports_accepted_are_exactly_1_to_65535(port: int) -> None:
    endpoint = f"tcp://127.0.0.1:{port}"
    if 1 <= port <= 65535:
        assert check_endpoint(endpoint, bind=False) == endpoint
        assert check_endpoint(endpoint, bind=True) == endpoint
    else:
        with pytest.raises(errors.InvalidArgument):
            check_endpoint(endpoint, bind=False)
        if port != 0:  # port 0 (or *) binds any free port
            with pytest.raises(errors.InvalidArgument):
                check_endpoint(endpoint, bind=True)


def test_valid_addresses_pass() -> None:
    for ep in ["tcp://127.0.0.1:7000", "tcp://[::1]:1", "tcp://localhost:65535", "ipc:///tmp/x.sock",
               "inproc://x", "tcp://127.0.0.1:0;127.0.0.1:7000"]:
        assert check_endpoint(ep, bind=False) == ep
    for ep in ["tcp://127.0.0.1:*", "tcp://*:*", "tcp://*:7000", "tcp://127.0.0.1:0"]:
        assert check_endpoint(ep, bind=True) == ep


@pytest.mark.parametrize("bind", ["garbage", "tcp://127.0.0.1:99999", "tcp://127.0.0.1:-5"])
def test_serve_checks_its_binds_before_creating_the_data_directory(tmp_path: Path, bind: str) -> None:
    new = tmp_path / "NEW"
    with pytest.raises(errors.InvalidArgument, match="is not a valid ZeroMQ address to bind"):
        serve(new, bind)  # before the fix: NEW/ created, then BindFailed (or served on a wrapped port)
    assert not new.exists()


@pytest.mark.parametrize("bind", ["garbage", "tcp://127.0.0.1:99999", "tcp://127.0.0.1:-5"])
def test_cli_serve_refuses_a_bad_bind_in_one_line_and_creates_nothing(tmp_path: Path, bind: str) -> None:
    new = tmp_path / "NEW"
    result = subprocess.run([sys.executable, "-m", "tstreams_embedded.cli", "serve", "--data", str(new),
                             "--bind", bind], capture_output=True, text=True, timeout=60, env=child_environment())
    assert result.returncode != 0, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error: InvalidArgument: endpoint "), result.stderr
    assert "Traceback" not in result.stderr
    assert not new.exists()


@pytest.mark.parametrize("port", ["99999", "-5"])
def test_cli_client_refuses_a_bad_port_in_one_line(port: str) -> None:
    result = CliRunner().invoke(main, ["streams", "list", "--connect", f"tcp://127.0.0.1:{port}", "--timeout", "2"])
    assert result.exit_code != 0, result.output
    assert "port must be a number in 1-65535" in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


def test_serve_refuses_a_server_budget_below_the_request_size(tmp_path: Path) -> None:
    """A request may be as large as ``--max-request-size``; a smaller ``--max-server-bytes``
    would answer it ``ServerBusy`` for ever (issue 19 item 4). Refused before anything is
    created."""
    new = tmp_path / "NEW"
    with pytest.raises(errors.InvalidArgument, match="max_server_bytes"):
        serve(new, "tcp://127.0.0.1:*", max_request_size=64 << 20, max_server_bytes=32 << 20)
    assert not new.exists()


def test_cluster_node_takes_the_server_budget_too(tmp_path: Path) -> None:
    """``serve --cluster`` passes ``--max-server-bytes`` and ``--rcvhwm`` on (they were
    accepted and ignored): a budget below the request size is refused at once, before
    ZooKeeper is contacted or the data directory created."""
    new = tmp_path / "NEW"
    result = subprocess.run([sys.executable, "-m", "tstreams_embedded.cli", "serve", "--data", str(new),
                             "--bind", "tcp://127.0.0.1:*", "--cluster", "zk://127.0.0.1:1/nowhere", "--node-id", "n1",
                             "--max-server-bytes", "1024", "--rcvhwm", "1"],
                            capture_output=True, text=True, timeout=60, env=child_environment())
    assert result.returncode != 0, result.stdout + result.stderr
    assert "InvalidArgument: max_server_bytes" in result.stderr.strip().splitlines()[-1], result.stderr
    assert not new.exists()


@pytest.mark.parametrize("cluster", [[], ["--cluster", "zk://127.0.0.1:1/nowhere", "--node-id", "n1"]],
                         ids=["single", "cluster"])
def test_a_non_finite_piece_timeout_is_refused_by_every_server(tmp_path: Path, cluster: list[str]) -> None:
    """``--piece-timeout`` reaches single and cluster nodes alike: ``nan`` is refused at
    once (it would keep an abandoned request for ever), before the data directory exists."""
    new = tmp_path / "NEW"
    result = subprocess.run([sys.executable, "-m", "tstreams_embedded.cli", "serve", "--data", str(new),
                             "--bind", "tcp://127.0.0.1:*", *cluster, "--piece-timeout", "nan"],
                            capture_output=True, text=True, timeout=60, env=child_environment())
    assert result.returncode != 0, result.stdout + result.stderr
    assert re.search(r"piece[-_]timeout", result.stderr.strip().splitlines()[-1]), result.stderr
    assert not new.exists()


def test_serve_on_a_taken_port_creates_no_data_directory(tmp_path: Path) -> None:
    """The socket is bound before the engine is opened: a taken port is ``BindFailed``
    and ``NEW/`` is not created (it was, with its files, before; issue 19 item 17)."""
    import socket

    new = tmp_path / "NEW"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(errors.BindFailed, match=str(port)):
            serve(new, f"tcp://127.0.0.1:{port}")
    assert not new.exists()
