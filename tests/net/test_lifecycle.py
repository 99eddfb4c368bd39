"""Server lifecycle as a client sees it: graceful SIGTERM (exit 0, in-flight requests
finished), a server that is gone (timeouts, RemoteError/ConnectionError), reconnection after
a restart, and CURVE authentication."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.net import RemoteBackend
from tstreams_embedded.testing import eventually
from tstreams_embedded.testing.server_process import child_environment


def _instant(i: int) -> list[tuple]:
    return [O.Instant("s", 0, O.pack_items([b"%d" % i]))]


def test_sigterm_finishes_in_flight_requests_and_exits_0(make_server: Any, tmp_path: Path) -> None:
    srv = make_server()
    b = RemoteBackend(srv.endpoint, timeout=60)
    try:
        b.submit([O.CreateStream("s", 1, 86400)])
        futs = [b.submit_async(_instant(i)) for i in range(3000)]  # durable writes in flight
        assert futs[0].wait(30)  # the server is busy with them
        rc = srv.terminate()
        assert rc == 0, srv.log()
        srv.start()  # same data directory, same port: held requests go through after reconnection
        acked = {}
        for i, f in enumerate(futs):
            try:
                acked[i] = f.result(60)[0]
            except errors.RemoteError:
                pass  # lost with the connection: outcome unknown, and allowed
        assert acked, "no write was acknowledged"
        # every acknowledged write is stored, with its payload
        for i, tid in acked.items():
            assert b.get_transaction("s", 0, tid).items == [b"%d" % i]
        assert b.ping() >= 0
    finally:
        b.close()


def test_sigterm_on_idle_server_exits_0(server: Any) -> None:
    e = ts.connect(server.endpoint, timeout=10)
    e.create_stream("s")
    e.close()
    assert server.terminate() == 0


def test_server_gone_gives_remote_error_then_reconnects_after_restart(make_server: Any) -> None:
    srv = make_server()
    e = ts.connect(srv.endpoint, timeout=1.0)
    try:
        e.create_stream("s")
        tid = e.producer("s").instant([b"before"])
        srv.kill()  # SIGKILL
        with pytest.raises(errors.RemoteError) as info:
            e.get_stream("s")
        assert isinstance(info.value, ConnectionError)
        assert "not connected" in str(info.value) or "no reply" in str(info.value)
        with pytest.raises(ConnectionError):
            e.producer("s").instant([b"while down"])
        srv.start()  # same port: the client reconnects on its own
        info2 = eventually(lambda: e.get_stream("s"), 30, ignore=(errors.RemoteError,))
        assert info2.name == "s"
        assert e.backend.get_transaction("s", 0, tid).items == [b"before"]
        tid2 = e.producer("s").instant([b"after"])
        assert e.backend.get_transaction("s", 0, tid2).items == [b"after"]
    finally:
        e.close()


def test_writes_in_flight_when_server_dies_fail_clearly(make_server: Any) -> None:
    srv = make_server()
    b = RemoteBackend(srv.endpoint, timeout=5)
    try:
        b.submit([O.CreateStream("s", 1, 86400)])
        futs = [b.submit_async(_instant(i)) for i in range(5000)]
        srv.kill()
        outcomes = {"ok": 0, "unknown": 0}
        for f in futs:
            try:
                f.result(30)
                outcomes["ok"] += 1
            except errors.RemoteError as exc:  # every future resolves: none hangs
                assert "may or may not" in str(exc) or "not connected" in str(exc) or "not sent" in str(exc)
                outcomes["unknown"] += 1
        assert sum(outcomes.values()) == 5000
    finally:
        b.close()


def test_long_poll_survives_a_graceful_restart(make_server: Any) -> None:
    srv = make_server()
    e = ts.connect(srv.endpoint, timeout=30)
    try:
        e.create_stream("s")
        seen = e.backend.wait_for_commit(-1, 0)
        out: list = []
        base = e.backend.server_stats()["received"]
        th = threading.Thread(target=lambda: out.append(e.backend.wait_for_commit(seen, 60)))
        th.start()
        eventually(lambda: e.backend.server_stats()["received"] >= base + 2)  # the long poll is parked
        assert srv.terminate() == 0  # the parked long poll is answered NOT_EXECUTED and held
        srv.start()
        assert th.is_alive()
        e.producer("s").instant([b"x"])
        th.join(30)
        assert out and out[0] > seen
    finally:
        e.close()


def test_closed_client_raises_engine_closed(server: Any) -> None:
    e = ts.connect(server.endpoint, timeout=5)
    e.close()
    with pytest.raises(errors.EngineClosed):
        e.get_stream("s")
    b = RemoteBackend(server.endpoint)
    b.close()
    with pytest.raises(errors.EngineClosed):
        b.now_ms()


def test_bad_client_arguments() -> None:
    with pytest.raises(errors.InvalidArgument):
        RemoteBackend("localhost:7000")
    with pytest.raises(errors.InvalidArgument):
        RemoteBackend("tcp://127.0.0.1:7000", timeout=0)
    with pytest.raises(errors.InvalidArgument):
        RemoteBackend("tcp://127.0.0.1:7000", server_public_key=b"x" * 40)


# ---------------------------------------------------------------------------- CURVE
def _keys(directory: Path, *clients: str) -> None:
    args = [sys.executable, "-m", "tstreams_embedded.net.cli", "keys", "generate", str(directory)]
    for c in clients:
        args += ["--client", c]
    subprocess.run(args, check=True, env=child_environment(), capture_output=True, timeout=60)


def test_curve_authorized_client_is_served_unknown_client_is_not(make_server: Any, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    _keys(keys, "alice")
    other = tmp_path / "other-keys"
    _keys(other, "mallory")
    srv = make_server(extra_args=["--curve-dir", str(keys)])

    alice = ts.connect(srv.endpoint, timeout=10, curve_dir=keys, curve_client="alice")
    try:
        alice.create_stream("secret")
        tid = alice.producer("secret").instant([b"classified"])
        assert alice.backend.get_transaction("secret", 0, tid).items == [b"classified"]
    finally:
        alice.close()

    # a keypair the server never authorized (it does know the server's public key)
    from tstreams_embedded.net.auth import load_client_curve

    server_pub, _, _ = load_client_curve(keys, "alice")
    _, m_pub, m_sec = load_client_curve(other, "mallory")
    mallory = RemoteBackend(srv.endpoint, timeout=1.5, server_public_key=server_pub,
                            client_public_key=m_pub, client_secret_key=m_sec)
    try:
        with pytest.raises(errors.RemoteError, match="not connected"):
            mallory.get_stream("secret")
    finally:
        mallory.close()
    # no CURVE at all
    plain = RemoteBackend(srv.endpoint, timeout=1.5)
    try:
        with pytest.raises(errors.RemoteError, match="not connected"):
            plain.list_streams()
    finally:
        plain.close()
    assert srv.alive()
    assert srv.terminate() == 0


@pytest.mark.parametrize("taken", ["bind", "http", "cluster-bind", "cluster-http", "cluster-repl"])
def test_a_taken_port_stops_the_server_at_once_with_bind_failed(tmp_path: Path, taken: str) -> None:
    """A server whose port is taken exits with status 1 and a one-line ``BindFailed``.

    (Regression: with the ``--http`` port taken, ``tstreams serve --cluster`` logged "serving
    on …" and then hung for ever in ``zmq.Context.term`` with its client socket still open,
    so a test waited 60 s for a node that never became ready.) No ZooKeeper is needed: the
    ports are bound before the node contacts it."""
    import socket

    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        args = ["--bind", f"tcp://127.0.0.1:{port}" if taken.endswith("bind") else "tcp://127.0.0.1:*"]
        if taken.startswith("cluster"):
            args += ["--cluster", "zk://127.0.0.1:1/nowhere", "--node-id", "n1"]
        if taken.endswith("http"):
            args += ["--http", f"127.0.0.1:{port}"]
        if taken.endswith("repl"):
            args += ["--repl", f"tcp://127.0.0.1:{port}"]
        result = subprocess.run([sys.executable, "-m", "tstreams_embedded.cli", "serve", "--data",
                                 str(tmp_path / "data"), *args], capture_output=True, text=True,
                                timeout=120, env=child_environment())
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: BindFailed: cannot listen"), result.stderr
    assert str(port) in last and "Address already in use" in last and "Traceback" not in result.stderr
