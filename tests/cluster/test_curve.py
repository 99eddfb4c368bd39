"""A cluster started with ``--curve-dir`` and byte budgets honours both, on every port.

Regression: ``tstreams serve --cluster`` accepted ``--curve-dir`` and the byte-budget
options and silently ignored them (plaintext client and replication ports, default
budgets). Real ZooKeeper, real node processes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zmq
from zmq.utils.monitor import parse_monitor_message

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.net.auth import load_client_curve, load_server_curve
from tstreams_embedded.testing import ZooKeeperServer, eventually
from tstreams_embedded.testing.server_process import child_environment

from .conftest import Cluster

MAX_REQUEST = 64 * 1024

_FAILED = {zmq.EVENT_HANDSHAKE_FAILED_AUTH: "auth", zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "protocol",
           zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "no detail"}


def _handshake(endpoint: str, curve: tuple[bytes, bytes, bytes] | None) -> str:
    """How a DEALER's handshake with ``endpoint`` ends: "ok" or the failure kind."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = curve
    mon = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                  | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    try:
        sock.connect(endpoint)
        if not mon.poll(20_000):
            return "no event"
        event = parse_monitor_message(mon.recv_multipart())["event"]
        return "ok" if event == zmq.EVENT_HANDSHAKE_SUCCEEDED else _FAILED[event]
    finally:
        sock.disable_monitor()
        mon.close(0)
        sock.close(0)


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    d = tmp_path / "keys"
    subprocess.run([sys.executable, "-m", "tstreams_embedded.cli", "keys", "generate", str(d), "--client", "app"],
                   check=True, env=child_environment(), capture_output=True, timeout=60)
    return d


def test_curve_and_budgets_apply_to_client_and_replication_ports(zk: ZooKeeperServer, tmp_path: Path,
                                                                  keys: Path) -> None:
    cluster = Cluster(zk, tmp_path, extra_args=["--curve-dir", str(keys), "--max-request-size", str(MAX_REQUEST)])
    cluster.start()
    try:
        leader = cluster.ready()  # followers are ready only once they fetch from the leader: over CURVE
        engine = cluster.connect(curve_dir=keys, curve_client="app", timeout=20)
        cluster.closers.append(engine.close)
        engine.create_stream("s", partitions=1)
        tid = engine.producer("s").instant([b"secret"])  # acknowledged by a quorum: replication works
        assert engine.backend.get_transaction("s", 0, tid).items == [b"secret"]
        with pytest.raises(errors.RequestTooLarge):
            engine.producer("s").instant([b"x" * (2 * MAX_REQUEST)])
        state = eventually(cluster.converged, 30, message="equal states on every node")
        assert state["transactions"] == 1

        server_pub, app_pub, app_sec = load_client_curve(keys, "app")
        # the client port: the authorized client is served, a plaintext client is refused
        assert _handshake(leader.endpoint, (server_pub, app_pub, app_sec)) == "ok"
        assert _handshake(leader.endpoint, None) != "ok"
        plain: Any = ts.connect(cluster.url, timeout=3)
        try:
            with pytest.raises(errors.TStreamsError):
                plain.list_streams()
        finally:
            plain.close()
        # the replication port: only the cluster's own keypair; the client keypair is refused
        repl = leader.status()["repl"]
        srv_pub, srv_sec, _ = load_server_curve(keys)
        assert _handshake(repl, (srv_pub, srv_pub, srv_sec)) == "ok"
        assert _handshake(repl, (server_pub, app_pub, app_sec)) == "auth"
        assert _handshake(repl, None) != "ok"
        assert all(n.alive() for n in cluster.nodes)
    finally:
        cluster.stop()
