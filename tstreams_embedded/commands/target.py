"""Where an operator command works: a data directory (embedded) or a server or cluster.

:func:`target_options` adds ``--data``, ``--connect``, ``--curve-dir`` and ``--timeout`` to
a click command and hands it a :class:`Target`; :meth:`Target.open` gives the ``Engine``.
Every command opens an existing data directory only (a mistyped ``--data`` is
:class:`~tstreams_embedded.errors.DataDirectoryNotFound`, nothing is created), except the
commands decorated with :func:`creating_target_options` (``streams create``).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from ..connecting import connect
from ..engine.api.engine import Engine
from ..engine.embedded import open_engine
from ..tools.params import MAX_TIMEOUT, seconds

F = TypeVar("F", bound=Callable[..., Any])
SCHEMES = ("tcp://", "ipc://", "inproc://", "zk://")


@dataclass(frozen=True)
class Target:
    """A data directory (``data``) or an endpoint (``connect``): exactly one of them."""

    data: str | None = None
    connect: str | None = None
    curve_dir: str | None = None
    timeout: float = 10.0
    create: bool = False  # whether a missing data directory is created

    @property
    def embedded(self) -> bool:
        return self.data is not None

    def open(self) -> Engine:
        """An engine handle on the target (close it when done)."""
        if self.data is not None:
            return open_engine(self.data, compaction_interval=None, create=self.create)
        assert self.connect is not None
        if self.connect.startswith("zk://"):
            # kazoo logs every failed connection attempt; the command reports one line instead
            logging.getLogger("kazoo").setLevel(logging.CRITICAL + 1)
        options: dict[str, Any] = {"timeout": self.timeout}
        if self.curve_dir is not None:
            options["curve_dir"] = self.curve_dir
        return connect(self.connect, **options)


def _options(create: bool) -> Callable[[F], F]:
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def command(*args: Any, data: str | None, connect: str | None, curve_dir: str | None, timeout: float,
                    **kwargs: Any) -> Any:
            return fn(*args, target=make_target(data, connect, curve_dir, timeout, create=create), **kwargs)

        for option in reversed([
            click.option("--data", type=click.Path(file_okay=False, exists=not create), default=None,
                         help="Data directory (embedded engine; created if missing)." if create
                         else "Data directory (embedded engine; it must exist)."),
            click.option("--connect", default=None, metavar="URL",
                         help="A server (tcp://host:port) or a cluster (zk://host:port/path) instead of --data."),
            click.option("--curve-dir", type=click.Path(file_okay=False, exists=True), default=None,
                         help="CURVE keys directory for --connect (made by 'tstreams keys generate')."),
            click.option("--timeout", type=seconds(0, MAX_TIMEOUT, min_open=True), default=10.0, show_default=True,
                         metavar="SECONDS",
                         help="Seconds each request to --connect may take (connecting included)."),
        ]):
            command = option(command)
        return command  # type: ignore[return-value]

    return decorate


#: Add the target options to a click command; it receives ``target: Target`` (an existing
#: data directory or an endpoint).
target_options = _options(create=False)
#: :data:`target_options` for a command that may create the data directory.
creating_target_options = _options(create=True)


def make_target(data: str | None, connect: str | None, curve_dir: str | None = None, timeout: float = 10.0,
                create: bool = False) -> Target:
    """Check the target options (a click usage error when they do not name one target)."""
    if (data is None) == (connect is None):
        raise click.UsageError("give exactly one of --data DIR and --connect URL")
    if data is not None and not os.fspath(data):
        raise click.BadParameter("the data directory must not be empty (use . for the current directory)",
                                 param_hint="'--data'")
    if connect is not None and not connect.startswith(SCHEMES):
        raise click.BadParameter(f"expected a tcp://, ipc:// or zk:// URL, got {connect!r}", param_hint="--connect")
    if curve_dir is not None and connect is None:
        raise click.UsageError("--curve-dir goes with --connect")
    return Target(os.fspath(data) if data is not None else None, connect, curve_dir, timeout, create)
