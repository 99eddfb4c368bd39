"""Fixtures of the network tests: real ``tstreams serve`` subprocesses on 127.0.0.1.

Every server binds a port picked for it, and is stopped by PID at teardown (SIGTERM, then
SIGKILL if it does not exit in time).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


class ServerProc:
    """``tstreams serve`` in a subprocess (``python -m tstreams_embedded.net.cli serve``)."""

    def __init__(self, data: str | Path, workdir: Path, port: int | None = None, durability: str = "sync",
                 extra: list[str] | None = None, name: str = "server") -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.data = str(data)
        self.port = port or free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.ready = workdir / f"{name}.ready"
        self.log_path = workdir / f"{name}.log"
        self.args = [sys.executable, "-m", "tstreams_embedded.net.cli", "serve", "--data", self.data,
                     "--bind", self.endpoint, "--durability", durability, "--ready-file", str(self.ready),
                     "--log-level", "WARNING", *(extra or [])]
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self, timeout: float = 60.0) -> None:
        if self.ready.exists():
            self.ready.unlink()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, cwd=str(REPO))
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tstreams serve did not start:\n{self.log_path.read_text()}")
            time.sleep(0.02)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; return the exit status."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGTERM)
        rc = self.proc.wait(timeout)
        self._log.close()
        return rc

    def kill(self) -> None:
        """SIGKILL by PID and reap."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self._log.close()

    def stop(self) -> None:
        if self.alive():
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if not self._log.closed:
            self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., ServerProc]]:
    """``make_server(data=None, **kw)`` -> a running :class:`ServerProc`, stopped at teardown."""
    started: list[ServerProc] = []
    counter = iter(range(1000))

    def make(data: str | Path | None = None, **kw: Any) -> ServerProc:
        n = next(counter)
        if data is None:
            data = tmp_path / f"data-{n}"
        kw.setdefault("name", f"server-{n}")
        s = ServerProc(data, tmp_path / "srv", **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def server(make_server: Callable[..., ServerProc]) -> ServerProc:
    return make_server()


@pytest.fixture
def remote(server: ServerProc) -> Iterator[Any]:
    """An engine connected to ``server``."""
    from tstreams_embedded.net import connect

    e = connect(server.endpoint, timeout=20.0)
    yield e
    e.close()
