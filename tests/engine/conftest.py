"""Fixtures of the engine test suite, on top of the ``tstreams_embedded.testing`` plugin
(loaded by ``tests/conftest.py``).

* ``clock``: a :class:`~tstreams_embedded.testing.FakeClock` for TTL tests
  (``make_engine(clock=clock)``).
* ``make_engine``: opens embedded engines with any option (compaction off by default) and
  closes them at teardown.
* ``engine``: THE backend-parametrized fixture. Every semantic test written against it runs
  once per backend in :data:`BACKENDS`: ``"embedded"`` (``ts.open``) and ``"remote"``
  (``ts.connect`` to a ``tstreams serve`` subprocess on 127.0.0.1, stopped by PID).
  ``shared_engine`` is the same, one per module and backend.
* Worker subprocesses (``tests/engine/workers.py``): see ``procs.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded.testing import FakeClock, engine_on

# --------------------------------------------------------------------------- backends
# Test ids keep the name "remote"; tstreams_embedded.testing calls that backend "served".
BACKENDS = {"embedded": "embedded", "remote": "served"}


@pytest.fixture
def clock(tstreams_clock: FakeClock) -> FakeClock:
    return tstreams_clock


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


def _options(kind: str) -> dict[str, Any]:
    return {"durability": "sync", "compaction_interval": None} if kind == "embedded" else {"durability": "sync"}


@pytest.fixture(params=list(BACKENDS))
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ts.Engine]:
    """An engine on each backend in :data:`BACKENDS` (same API, same expected behaviour)."""
    kind = BACKENDS[request.param]
    with engine_on(kind, tmp_path / f"{request.param}", **_options(kind)) as e:
        e.kind = request.param  # type: ignore[attr-defined]
        yield e


@pytest.fixture(scope="module", params=list(BACKENDS))
def shared_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ts.Engine]:
    """:func:`engine`, one per test module and backend: for the many cases of a test that only
    checks that bad input is refused (one server per module instead of one per case)."""
    kind = BACKENDS[request.param]
    with engine_on(kind, tmp_path_factory.mktemp(f"shared-{request.param}"), **_options(kind)) as e:
        e.kind = request.param  # type: ignore[attr-defined]
        yield e


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[ts.Engine]:
    """An embedded engine only (for tests that need the Core: commit log, stats, map size)."""
    with engine_on("embedded", tmp_path / "embedded", **_options("embedded")) as e:
        yield e
