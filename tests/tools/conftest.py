"""Fixtures of the command-line tests.

``site``: THE parametrized fixture: each test runs once on a data directory (``--data``,
the embedded engine) and once through a real ``tstreams serve`` child process
(``--connect tcp://…``). It gives an engine on the same data for setting up and checking
state, and runs ``tstreams`` commands through click's ``CliRunner`` with the site's target
options. ``shared_site`` is the same, one per module and kind.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import tstreams_embedded as ts
from tstreams_embedded.cli import main
from tstreams_embedded.testing import ServeProcess, engine_on


@dataclass
class Site:
    """Where the commands run: ``kind`` is ``embedded`` or ``served``."""

    kind: str
    data: Path
    engine: ts.Engine
    server: ServeProcess | None = None

    @property
    def target(self) -> list[str]:
        """The target options of every command."""
        return ["--data", str(self.data)] if self.server is None else ["--connect", self.server.endpoint]

    def run(self, *args: str, input: bytes | str | None = None) -> Result:
        """``tstreams ARGS --data …`` (or ``--connect …``) through CliRunner."""
        return CliRunner().invoke(main, [*args, *self.target], input=input, catch_exceptions=True)

    def ok(self, *args: str, input: bytes | str | None = None) -> Result:
        """:meth:`run`, asserting exit status 0."""
        result = self.run(*args, input=input)
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
        return result

    def json(self, *args: str, input: bytes | str | None = None) -> list[Any]:
        """The JSON lines a command prints with ``--json``."""
        return [json.loads(line) for line in self.ok(*args, "--json", input=input).stdout.splitlines()]

    def argv(self, *args: str) -> list[str]:
        """The command line of ``tstreams ARGS`` with the target options, for a child process."""
        return [sys.executable, "-m", "tstreams_embedded.cli", *args, *self.target]


def _site(kind: str, directory: Path) -> Iterator[Site]:
    servers: list[ServeProcess] = []
    options: dict[str, Any] = {"compaction_interval": None} if kind == "embedded" else {}
    with engine_on(kind, directory, on_server=servers.append, **options) as engine:
        yield Site(kind, directory / "data", engine, servers[0] if servers else None)


@pytest.fixture(params=["embedded", "served"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    yield from _site(request.param, tmp_path)


@pytest.fixture(scope="module", params=["embedded", "served"])
def shared_site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A :func:`site` shared by the tests of a module (one server per module, not per test): for
    the many cases of a test that only checks that bad input is refused and writes nothing."""
    yield from _site(request.param, tmp_path_factory.mktemp(f"site-{request.param}"))
