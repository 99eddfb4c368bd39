"""pytest fixtures for applications built on tstreams-embedded.

Installed with the package as the ``pytest11`` entry point, so the fixtures are there in
every pytest run; a project that disables plugin autoloading lists it in a ``conftest.py``::

    pytest_plugins = ["tstreams_embedded.testing.pytest_plugin"]

Fixtures (function scope unless said otherwise):

``tstreams_engine``
    An engine on a fresh directory, **once per backend**: the test runs embedded
    (``ts.open``) and served (``tstreams serve`` + ``ts.connect``). Its backend is the
    ``tstreams_backend`` fixture. Restrict the backends with ``--tstreams-backend=embedded``
    (repeatable) or ``@pytest.mark.parametrize("tstreams_backend", ["embedded"], indirect=True)``;
    override ``tstreams_engine_options`` to pass options.
``tstreams_embedded_engine``
    An embedded engine only.
``tstreams_make_engine``
    ``make(path=None, **options)`` opens embedded engines (closed at teardown).
``tstreams_server`` / ``tstreams_make_server``
    A running :class:`~tstreams_embedded.testing.ServeProcess` / a factory
    ``make(data=None, **ServeProcess options)`` of them; stopped by PID at teardown.
``tstreams_clock``
    A :class:`~tstreams_embedded.testing.FakeClock`: ``tstreams_make_engine(clock=tstreams_clock)``.
``zookeeper`` (session)
    A running :class:`~tstreams_embedded.testing.ZooKeeperServer`; skipped without
    Java/ZooKeeper.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .backends import BACKENDS, engine_on
from .clock import FakeClock
from .server_process import ServeProcess
from .zookeeper import ZooKeeperServer, zookeeper_classpath

if TYPE_CHECKING:
    from tstreams_embedded.engine.api.engine import Engine


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tstreams", "tstreams-embedded fixtures")
    group.addoption("--tstreams-backend", action="append", choices=BACKENDS, default=None,
                    help="run tstreams_engine tests only on this backend (repeatable; default: all)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "tstreams_backends(*names): backends for the tstreams_engine fixture")


@pytest.fixture(params=BACKENDS)
def tstreams_backend(request: pytest.FixtureRequest) -> str:
    """The backend of ``tstreams_engine``: ``"embedded"`` or ``"served"``."""
    backend: str = request.param
    chosen = request.config.getoption("--tstreams-backend", None)
    marker = request.node.get_closest_marker("tstreams_backends")
    if chosen and backend not in chosen:
        pytest.skip(f"backend {backend} not selected (--tstreams-backend)")
    if marker is not None and backend not in marker.args:
        pytest.skip(f"backend {backend} not used by this test")
    return backend


@pytest.fixture
def tstreams_engine_options() -> dict[str, Any]:
    """Options for ``tstreams_engine`` (override this fixture to change them)."""
    return {"durability": "sync"}


@pytest.fixture
def tstreams_engine(tstreams_backend: str, tstreams_engine_options: dict[str, Any],
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """An engine on a fresh directory, on each backend of ``tstreams_backend``."""
    directory = tmp_path_factory.mktemp(f"tstreams-{tstreams_backend}")
    with engine_on(tstreams_backend, directory, **tstreams_engine_options) as engine:
        yield engine


@pytest.fixture
def tstreams_embedded_engine(tstreams_engine_options: dict[str, Any],
                             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """An embedded engine on a fresh directory."""
    with engine_on("embedded", tmp_path_factory.mktemp("tstreams-embedded"), **tstreams_engine_options) as engine:
        yield engine


@pytest.fixture
def tstreams_make_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Engine]]:
    """``make(path=None, **options)``: ``ts.open`` on ``path`` (a fresh directory by default),
    closed at teardown."""
    import tstreams_embedded as ts

    opened: list[Engine] = []

    def make(path: str | os.PathLike[str] | None = None, **options: Any) -> Engine:
        engine = ts.open(path if path is not None else tmp_path_factory.mktemp("tstreams-engine"), **options)
        opened.append(engine)
        return engine

    yield make
    for engine in reversed(opened):
        engine.close()


@pytest.fixture
def tstreams_make_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ServeProcess]]:
    """``make(data=None, **options)``: a started :class:`ServeProcess` (options as its
    constructor's), stopped at teardown. Servers made by one test share a work directory
    (logs ``server-N.log``); ``data`` defaults to a fresh directory."""
    started: list[ServeProcess] = []
    counter = itertools.count()
    workdir: list[Path] = []

    def make(data: str | os.PathLike[str] | None = None, **options: Any) -> ServeProcess:
        if not workdir:
            workdir.append(tmp_path_factory.mktemp("tstreams-serve"))
        n = next(counter)
        options.setdefault("name", f"server-{n}")
        server = ServeProcess(data if data is not None else workdir[0] / f"data-{n}", workdir[0], **options)
        started.append(server)
        return server.start()

    yield make
    for server in reversed(started):
        server.stop()


@pytest.fixture
def tstreams_server(tstreams_make_server: Callable[..., ServeProcess]) -> ServeProcess:
    """A running ``tstreams serve`` on a fresh directory."""
    return tstreams_make_server()


@pytest.fixture
def tstreams_clock() -> FakeClock:
    """A :class:`FakeClock` at :attr:`FakeClock.START_MS`."""
    return FakeClock()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper for the whole session (skipped if Java or the jars are missing)."""
    if not zookeeper_classpath():
        pytest.skip("ZooKeeper jars not found (Debian: apt-get install zookeeper)")
    try:
        server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    except RuntimeError as exc:  # no java
        pytest.skip(str(exc))
    with server:
        yield server
