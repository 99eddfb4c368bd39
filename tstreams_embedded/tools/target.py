"""Where an operator command works: a data directory (embedded) or a server or cluster.

:func:`target_options` adds ``--data``, ``--connect``, ``--curve-dir`` and ``--timeout`` to
a click command and hands it a :class:`Target`; :meth:`Target.open` gives the ``Engine``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from ..engine.engine import Engine

F = TypeVar("F", bound=Callable[..., Any])
SCHEMES = ("tcp://", "ipc://", "inproc://", "zk://")


@dataclass(frozen=True)
class Target:
    """A data directory (``data``) or an endpoint (``connect``): exactly one of them."""

    data: str | None = None
    connect: str | None = None
    curve_dir: str | None = None
    timeout: float = 10.0

    @property
    def embedded(self) -> bool:
        return self.data is not None

    def open(self) -> Engine:
        """An engine handle on the target (close it when done)."""
        import tstreams_embedded as ts

        if self.data is not None:
            return ts.open(self.data, compaction_interval=None)
        assert self.connect is not None
        options: dict[str, Any] = {"timeout": self.timeout}
        if self.curve_dir is not None:
            options["curve_dir"] = self.curve_dir
        engine: Engine = ts.connect(self.connect, **options)
        return engine


def target_options(fn: F) -> F:
    """Add the target options to a click command; it receives ``target: Target``."""

    @functools.wraps(fn)
    def command(*args: Any, data: str | None, connect: str | None, curve_dir: str | None, timeout: float,
                **kwargs: Any) -> Any:
        return fn(*args, target=make_target(data, connect, curve_dir, timeout), **kwargs)

    for option in reversed([
        click.option("--data", type=click.Path(file_okay=False, exists=True), default=None,
                     help="Data directory (embedded engine)."),
        click.option("--connect", default=None, metavar="URL",
                     help="A server (tcp://host:port) or a cluster (zk://host:port/path) instead of --data."),
        click.option("--curve-dir", type=click.Path(file_okay=False, exists=True), default=None,
                     help="CURVE keys directory for --connect (made by 'tstreams keys generate')."),
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
                     metavar="SECONDS",
                     help="Seconds each request to --connect may take."),
    ]):
        command = option(command)
    return command  # type: ignore[return-value]


def make_target(data: str | None, connect: str | None, curve_dir: str | None = None, timeout: float = 10.0) -> Target:
    """Check the target options (a click usage error when they do not name one target)."""
    if (data is None) == (connect is None):
        raise click.UsageError("give exactly one of --data DIR and --connect URL")
    if connect is not None and not connect.startswith(SCHEMES):
        raise click.BadParameter(f"expected a tcp://, ipc:// or zk:// URL, got {connect!r}", param_hint="--connect")
    if curve_dir is not None and connect is None:
        raise click.UsageError("--curve-dir goes with --connect")
    return Target(os.fspath(data) if data is not None else None, connect, curve_dir, timeout)
