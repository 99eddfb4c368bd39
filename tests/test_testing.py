"""The public test helpers (tstreams_embedded.testing): eventually, processes, the served
engine, FakeClock, strategies, and a real ZooKeeper."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import tstreams_embedded as ts
from tstreams_embedded.testing import (
    FakeClock,
    ServeProcess,
    ZooKeeperServer,
    eventually,
    four_letter_word,
    stop_process,
    stop_processes,
    wait_port,
    wait_until,
    zookeeper_classpath,
)
from tstreams_embedded.testing import strategies as tst


# ----------------------------------------------------------------------------- eventually
def test_eventually_returns_the_first_truthy_value() -> None:
    calls = iter([0, None, [], 7, 8])
    assert eventually(lambda: next(calls), timeout=5, interval=0) == 7


def test_eventually_timeout_names_the_last_value() -> None:
    def never() -> int:
        return 0

    with pytest.raises(AssertionError, match=r"never not true after .* last value: 0") as info:
        eventually(never, timeout=0.05, interval=0.01, message="waiting for nothing")
    assert str(info.value).startswith("waiting for nothing: ")


def test_eventually_ignores_listed_exceptions_and_reports_the_last_one() -> None:
    def down() -> bool:
        raise ConnectionError("still down")

    with pytest.raises(AssertionError, match="last exception: ConnectionError..still down") as info:
        eventually(down, timeout=0.05, interval=0.01, ignore=(ConnectionError,))
    assert isinstance(info.value.__cause__, ConnectionError)
    with pytest.raises(KeyError):  # not ignored: propagates at once
        eventually(lambda: {}["x"], timeout=5)


def test_wait_until_returns_a_bool() -> None:
    assert wait_until(lambda: True, 1)
    assert not wait_until(lambda: False, 0.05, 0.01)


# ------------------------------------------------------------------------------ processes
def test_stop_process_escalates_to_sigkill(tmp_path: Path) -> None:
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    t0 = time.monotonic()
    assert stop_process(proc, timeout=0.3) == -signal.SIGKILL
    assert time.monotonic() - t0 < 10
    assert stop_process(proc) == -signal.SIGKILL  # already gone: only reaped
    proc.stdout.close()


def test_stop_process_continues_a_paused_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc.send_signal(signal.SIGSTOP)
    assert stop_process(proc, timeout=10) == -signal.SIGTERM


def test_stop_processes_stops_several_side_by_side() -> None:
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    stubborn = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"
    paused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    paused.send_signal(signal.SIGSTOP)
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    t0 = time.monotonic()
    assert stop_processes([stubborn, paused, None, plain], timeout=0.3) == [
        -signal.SIGKILL, -signal.SIGTERM, None, -signal.SIGTERM]
    assert time.monotonic() - t0 < 10
    stubborn.stdout.close()


def test_serve_process_kill_pause_and_restart(tmp_path: Path) -> None:
    with ServeProcess(tmp_path / "data", tmp_path) as server:
        wait_port(server.port)
        e = server.connect(timeout=2.0)
        try:
            e.create_stream("s")
            tid = e.producer("s").instant([b"before"])
            server.pause()
            with pytest.raises(ts.errors.RemoteError):
                e.get_stream("s")  # a hung server: no reply in time
            server.resume()
            assert eventually(lambda: e.get_stream("s"), 30, ignore=(ts.errors.RemoteError,)).name == "s"
            assert server.kill() == -signal.SIGKILL
            assert not server.alive()
            server.start()  # same port, same data: the client reconnects by itself
            info = eventually(lambda: e.get_stream("s"), 30, ignore=(ts.errors.RemoteError,))
            assert info.name == "s"
            assert e.backend.get_transaction("s", 0, tid).items == [b"before"]
            server.restart()
            assert eventually(lambda: e.backend.get_transaction("s", 0, tid), 30,
                              ignore=(ts.errors.RemoteError,)).items == [b"before"]
        finally:
            e.close()
    assert server.returncode == 0  # SIGTERM: a graceful stop
    assert "serve" in repr(server) or "stopped" in repr(server)


def test_serve_process_that_cannot_start_shows_its_log(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "data", tmp_path, extra_args=["--no-such-option"])
    with pytest.raises(RuntimeError, match="tstreams serve exited with status 2") as info:
        server.start(timeout=60)
    assert "serve.log" in str(info.value) and "no-such-option" in str(info.value)


# --------------------------------------------------------------------------- fixtures
def test_engine_fixture_runs_on_both_backends(tstreams_engine: ts.Engine, tstreams_backend: str) -> None:
    tstreams_engine.create_stream("s")
    tid = tstreams_engine.producer("s").instant([b"x"])
    c = tstreams_engine.consumer("s", name="c")
    t = c.get_transaction(0)
    assert t is not None and t.id == tid and t.items == [b"x"]
    assert tstreams_backend in ("embedded", "served")


def test_fake_clock_drives_transaction_expiry(tstreams_make_engine, tstreams_clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    engine = tstreams_make_engine(clock=tstreams_clock, txn_ttl=1.0, keepalive_interval=None)
    engine.create_stream("s")
    txn = engine.producer("s", batch_size=1).new_transaction()
    txn.send(b"x")
    txn.flush()  # registered: its 1 s TTL runs on the fake clock
    tstreams_clock.advance(999)
    assert engine.consumer("s", name="c").get_transaction(0) is None  # still open
    tstreams_clock.advance(seconds=1.0)
    with pytest.raises(ts.errors.TransactionExpired):
        txn.checkpoint()
    with pytest.raises(ValueError):
        tstreams_clock.advance(-1)
    assert tstreams_clock() == FakeClock.START_MS + 1999


# ------------------------------------------------------------------------- strategies
@settings(max_examples=50, deadline=None)
@given(txns=tst.partitioned_transactions(3, max_transactions=5), crash=tst.crash_points(10),
       plan=tst.crash_plans(10))
def test_strategies_respect_their_bounds(txns: list[tuple[int, list[bytes]]], crash: int, plan: list[int]) -> None:
    assert len(txns) <= 5
    for part, items in txns:
        assert 0 <= part < 3 and 1 <= len(items) <= 8 and all(len(i) <= 64 for i in items)
    assert 0 <= crash <= 10
    assert plan == sorted(set(plan)) and all(0 <= p <= 10 for p in plan)


# -------------------------------------------------------------------------- ZooKeeper
def test_zookeeper_server_smoke(zookeeper: ZooKeeperServer) -> None:
    assert zookeeper_classpath(), "make test installs Debian's zookeeper package"
    assert four_letter_word(zookeeper.port, "ruok") == "imok"
    client = zookeeper.client()
    client.start(timeout=20)
    try:
        client.ensure_path("/tstreams/smoke")
        client.set("/tstreams/smoke", b"hello")
        assert client.get("/tstreams/smoke")[0] == b"hello"
    finally:
        client.stop()
        client.close()


def test_zookeeper_server_stops_by_pid(tmp_path: Path) -> None:
    zk = ZooKeeperServer(tmp_path / "zk")
    with zk:
        assert zk.is_ready()
        pid = zk.pid
    assert not zk.alive() and zk.returncode is not None
    assert four_letter_word(zk.port) == ""
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(pid, 0)


# ------------------------------------------------------- README "Testing your application"
def copy_batches(engine: ts.Engine, crash_after: int | None = None) -> bool:
    """The code under test: copy "in" to "out" exactly once; "crashes" after N batches."""
    consumer = engine.consumer("in", name="copier")
    producer = engine.producer("out", partition=0)
    done = 0
    while (t := consumer.get_transaction(0)) is not None:
        out = producer.new_transaction()
        out.send_many(t.items)
        if done == crash_after:
            return False  # crash: output staged, nothing committed
        ts.CheckpointGroup(producer, consumer).checkpoint()
        done += 1
    return True


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=tst.transaction_lists(max_transactions=8), crash_after=tst.crash_points(max_operations=8))
def test_copy_is_exactly_once(tstreams_make_engine, tstreams_clock, batches, crash_after):  # type: ignore[no-untyped-def]
    engine = tstreams_make_engine(clock=tstreams_clock, txn_ttl=1.0, keepalive_interval=None)
    engine.create_stream("in")
    engine.create_stream("out")
    for items in batches:
        engine.producer("in").instant(items)
    if not copy_batches(engine, crash_after):
        tstreams_clock.advance(seconds=2)  # the crashed run's open output transaction expires
        assert copy_batches(engine)  # restart from the stored offsets
    out = engine.consumer("out", name="check")
    got = []
    while (t := out.get_transaction(0)) is not None:
        got.extend(t.items)
    assert got == [item for items in batches for item in items]


def test_serve_process_whose_picked_port_was_taken_starts_on_another(tmp_path: Path) -> None:
    """``free_port`` races with other processes: a first start whose port was taken in the
    meantime retries on a new free port (the server reported ``BindFailed``)."""
    import socket

    server = ServeProcess(tmp_path / "data", tmp_path)
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", server.port))
        thief.listen()
        taken = server.port
        with server:
            assert server.port != taken
            assert "BindFailed" in server.log()
            e = server.connect(timeout=30)
            try:
                e.create_stream("s", 1)
                assert [s.name for s in e.list_streams()] == ["s"]
            finally:
                e.close()
    explicit = ServeProcess(tmp_path / "data2", tmp_path / "w2", port=taken)
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", taken))
        thief.listen()
        with pytest.raises(RuntimeError, match="BindFailed"):  # a port the caller chose is never changed
            explicit.start(timeout=60)


def test_the_stream_test_driver_is_exported_here_and_imported_only_when_asked() -> None:
    code = ("import sys, tstreams_embedded.testing as t; assert 'tstreams_embedded.streams' not in sys.modules; "
            "from tstreams_embedded.testing import TestDriver; from tstreams_embedded.streams import TestDriver as D; "
            "assert TestDriver is D and 'TestDriver' in t.__all__")
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
