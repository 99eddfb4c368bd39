"""Where a command works, when that is wrong: a data directory that is not one, a malformed
or dead ``--connect`` address, ``--timeout`` against a dead server or ZooKeeper, and a
CURVE-secured server (``--curve-dir``) for every command, ``streams create`` included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.cli import main
from tstreams_embedded.testing import ServeProcess, free_port
from tstreams_embedded.testing.server_process import child_environment

READ_ONLY = [
    ["streams", "list"], ["streams", "describe", "s"], ["streams", "delete", "s"], ["stats"],
    ["consume", "s"], ["produce", "s"], ["consumers", "list"], ["consumers", "describe", "s", "g"],
    ["consumers", "reset", "s", "g", "--to", "oldest"], ["consumers", "delete", "s", "g"],
]


@pytest.mark.parametrize("args", READ_ONLY + [["check"]], ids=lambda a: " ".join(a))
def test_a_directory_that_is_not_a_data_directory_is_refused_and_left_alone(tmp_path: Path,
                                                                            args: list[str]) -> None:
    wrong = tmp_path / "wrongdir"
    wrong.mkdir()
    (wrong / "notes.txt").write_text("mine")
    result = CliRunner().invoke(main, [*args, "--data", str(wrong)], input="x\n")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stderr == f"Error: DataDirectoryNotFound: {str(wrong)!r} is not a tstreams data directory " \
                            "(no data.mdb with data in it)\n"
    assert sorted(os.listdir(wrong)) == ["notes.txt"]  # nothing created


@pytest.mark.parametrize("args", READ_ONLY + [["streams", "create", "s"]], ids=lambda a: " ".join(a))
def test_an_empty_data_option_is_refused(tmp_path: Path, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [*args, "--data", ""])
    assert result.exit_code == 2 and result.stderr.startswith("Error: Invalid value for '--data'"), result.stderr
    assert result.stderr.count("\n") == 1 and os.listdir(tmp_path) == []


def test_streams_create_creates_the_data_directory_and_the_others_then_open_it(tmp_path: Path) -> None:
    data = str(tmp_path / "new")
    assert CliRunner().invoke(main, ["streams", "create", "s", "--data", data]).exit_code == 0
    listed = CliRunner().invoke(main, ["streams", "list", "--data", data, "--json"])
    assert listed.exit_code == 0 and '"name":"s"' in listed.stdout


@pytest.mark.parametrize("url", ["tcp://127.0.0.1:abc", "ipc://", "tcp://"])
def test_a_malformed_connect_address_is_one_line(url: str) -> None:
    result = CliRunner().invoke(main, ["streams", "list", "--connect", url])
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert result.stderr.startswith(f"Error: InvalidArgument: endpoint {url!r} is not a valid ZeroMQ address")
    assert result.stderr.count("\n") == 1
    with pytest.raises(errors.InvalidArgument, match="not a valid ZeroMQ address"):
        ts.connect(url)


def test_a_call_against_a_dead_server_fails_within_its_timeout() -> None:
    """The client fails a request at its deadline, not at the I/O thread's next heartbeat
    tick (2 s)."""
    engine = ts.connect(f"tcp://127.0.0.1:{free_port()}", timeout=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(errors.RemoteError, match="not connected"):
            engine.list_streams()
        assert time.monotonic() - started < 1.5
    finally:
        engine.close()


def test_a_dead_zookeeper_is_one_line_within_the_timeout() -> None:
    pytest.importorskip("kazoo")
    started = time.monotonic()
    result = CliRunner().invoke(main, ["streams", "list", "--connect", f"zk://127.0.0.1:{free_port()}/x",
                                       "--timeout", "2"])
    elapsed = time.monotonic() - started
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stderr.startswith("Error: ClusterUnavailable: cannot reach ZooKeeper at 127.0.0.1:")
    assert result.stderr.count("\n") == 1, result.stderr  # no kazoo log lines
    assert elapsed < 6, elapsed  # was 11.6 s: the 10 s ZooKeeper default, not --timeout


def test_every_command_works_against_a_curve_secured_server(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    made = CliRunner().invoke(main, ["keys", "generate", str(keys)])
    assert made.exit_code == 0, made.stderr
    with ServeProcess(tmp_path / "data", tmp_path, extra_args=["--curve-dir", str(keys)]) as server:
        secured = ["--connect", server.endpoint, "--curve-dir", str(keys), "--timeout", "30"]

        def ok(*args: str, input: str | None = None) -> str:
            result = CliRunner().invoke(main, [*args, *secured], input=input)
            assert result.exit_code == 0, (result.stdout, result.stderr)
            return result.stdout

        assert "created stream secret" in ok("streams", "create", "secret", "--partitions", "2")
        assert "wrote 3 item(s)" in ok("produce", "secret", "--partition", "1", "--txn-size", "2", input="a\nb\nc\n")
        assert ok("consume", "secret") == "a\nb\nc\n"
        denied = CliRunner().invoke(main, ["streams", "list", "--connect", server.endpoint, "--timeout", "1"])
        assert denied.exit_code == 1 and denied.stderr.startswith("Error: RemoteError"), denied.stderr


def test_a_full_disk_is_one_line_and_a_non_zero_exit(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    data = tmp_path / "data"
    with ts.open(data) as engine:
        engine.create_stream("s")
        engine.producer("s").instant([b"x" * 100_000])
    for args in (["stats", "--json"], ["streams", "list"], ["consume", "s"], ["check", "--json"]):
        with open("/dev/full", "wb") as full:
            done = subprocess.run([sys.executable, "-m", "tstreams_embedded.cli", *args, "--data", str(data)],
                                  stdout=full, stderr=subprocess.PIPE, env=child_environment(), timeout=60)
        err = done.stderr.decode()
        assert done.returncode == 1, err
        assert err == "Error: cannot write the output: No space left on device\n", err


def test_check_json_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ts.open(data) as engine:
        engine.create_stream("s")
        engine.producer("s").instant([b"x"])
    result = CliRunner().invoke(main, ["check", "--data", str(data), "--json"])
    assert result.exit_code == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["ok"] is True


@pytest.mark.parametrize("data", ["/proc/x", "{tmp}/d"])
def test_a_data_directory_that_cannot_be_made_or_opened_is_one_line(tmp_path: Path, data: str) -> None:
    (tmp_path / "d" / "data.mdb").mkdir(parents=True)
    result = CliRunner().invoke(main, ["streams", "create", "s", "--data", data.format(tmp=tmp_path)])
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert result.stderr.startswith("Error: DataDirectoryUnusable: ") and result.stderr.count("\n") == 1
