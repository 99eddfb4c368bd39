"""Fixtures of the engine test suite.

* :class:`FakeClock` and the ``clock`` fixture: a controllable engine clock (epoch ms) for
  TTL tests (``ts.open(..., clock=clock)``).
* ``make_engine``: opens embedded engines with any option and closes them at teardown.
* ``engine``: THE backend-parametrized fixture. Every semantic test written against it runs
  once per backend in :data:`BACKENDS`: ``"embedded"`` (``ts.open``) and ``"remote"``
  (``ts.connect`` to a ``tstreams serve`` subprocess on 127.0.0.1, stopped by PID).
* ``run_worker``/``start_worker``: run ``tests/engine/workers.py`` in a real subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tstreams_embedded as ts

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKERS = HERE / "workers.py"

# --------------------------------------------------------------------------- backends
# To add a backend, append its name here and handle it in ``_open_backend`` below.
try:  # the network layer (tstreams_embedded/net) is optional at this point of the project
    from tstreams_embedded.net import connect as _net_connect  # noqa: F401

    HAVE_NET = True
except ImportError:  # pragma: no cover - only before the network layer lands
    HAVE_NET = False

BACKENDS = ["embedded"] + (["remote"] if HAVE_NET else [])


class FakeClock:
    """A manual clock in epoch milliseconds (int), for ``ts.open(..., clock=FakeClock())``."""

    START_MS = 1_700_000_000_000

    def __init__(self, start_ms: int = START_MS) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> int:
        assert ms >= 0, "the clock never goes back"
        self.ms += ms
        return self.ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    d = tmp_path / "data"
    d.mkdir()
    return str(d)


@pytest.fixture
def make_engine(tmp_path: Path) -> Iterator[Callable[..., ts.Engine]]:
    """``make_engine(path=None, **options)`` -> an embedded engine, closed at teardown."""
    opened: list[ts.Engine] = []
    counter = iter(range(1_000_000))

    def make(path: str | os.PathLike | None = None, **options: Any) -> ts.Engine:
        if path is None:
            path = tmp_path / f"engine-{next(counter)}"
        options.setdefault("compaction_interval", None)
        e = ts.open(path, **options)
        opened.append(e)
        return e

    yield make
    for e in opened:
        e.close()


# --------------------------------------------------------------------------- server
class Server:
    """A ``tstreams serve`` subprocess on 127.0.0.1 (port picked by the OS)."""

    def __init__(self, data: str, workdir: Path, durability: str = "sync") -> None:
        self.ready = workdir / "server.ready"
        self.log_path = workdir / "server.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tstreams_embedded.net.cli", "serve", "--data", data,
             "--bind", "tcp://127.0.0.1:*", "--durability", durability, "--ready-file", str(self.ready),
             "--log-level", "WARNING"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=str(REPO),
        )
        deadline = time.monotonic() + 60
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tstreams serve did not start: {self.log_path.read_text()}")
            time.sleep(0.02)
        self.endpoint = self.ready.read_text().split()[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


def _open_backend(kind: str, tmp_path: Path) -> tuple[ts.Engine, Callable[[], None]]:
    data = tmp_path / f"{kind}-data"
    data.mkdir(exist_ok=True)
    if kind == "embedded":
        e = ts.open(data, durability="sync", compaction_interval=None)
        return e, e.close
    if kind == "remote":
        server = Server(str(data), tmp_path)
        e = ts.connect(server.endpoint, timeout=30.0)

        def close() -> None:
            try:
                e.close()
            finally:
                server.stop()

        return e, close
    raise AssertionError(f"unknown backend {kind!r}")


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ts.Engine]:
    """An engine on each backend in :data:`BACKENDS` (same API, same expected behaviour)."""
    e, close = _open_backend(request.param, tmp_path)
    e.kind = request.param  # type: ignore[attr-defined]
    yield e
    close()


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[ts.Engine]:
    """An embedded engine only (for tests that need the Core: commit log, stats, map size)."""
    e, close = _open_backend("embedded", tmp_path)
    yield e
    close()


# --------------------------------------------------------------------------- workers
def worker_cmd(*args: Any) -> list[str]:
    return [sys.executable, str(WORKERS), *map(str, args)]


def start_worker(*args: Any, **popen: Any) -> subprocess.Popen:
    """Start ``workers.py ARGS`` with its stdout as a text pipe (line-buffered)."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(worker_cmd(*args), text=True, bufsize=1, cwd=str(REPO), **popen)


def run_worker(*args: Any, timeout: float = 120) -> list[str]:
    """Run ``workers.py ARGS`` to completion; return its stdout lines (fails on non-zero exit)."""
    r = subprocess.run(worker_cmd(*args), capture_output=True, text=True, timeout=timeout, cwd=str(REPO))
    assert r.returncode == 0, f"worker {args} failed ({r.returncode}):\n{r.stderr}"
    return r.stdout.splitlines()


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL a worker by PID and reap it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
