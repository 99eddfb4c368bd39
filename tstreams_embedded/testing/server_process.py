"""``tstreams serve`` in a child process, for tests of code that talks to a server."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..connecting import connect as connect_engine
from .ports import LOOPBACK, free_port
from .processes import ManagedProcess

if TYPE_CHECKING:
    from tstreams_embedded.engine.api.engine import Engine

#: The directory that holds the ``tstreams_embedded`` package (a checkout or site-packages).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment, with :data:`PACKAGE_ROOT` first on ``PYTHONPATH`` so that
    ``python -m tstreams_embedded…`` finds this very package, installed or not."""
    env = dict(os.environ)
    paths = [str(PACKAGE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(extra or {})
    return env


class ServeProcess(ManagedProcess):
    """``tstreams serve --data DATA --bind tcp://HOST:PORT`` in a child process.

    :meth:`start` waits for the server's ``--ready-file``. The port is fixed when the
    object is made (``port=None``: a free one), so :meth:`restart` (or :meth:`start` after
    :meth:`kill`) brings the server back at the same :attr:`endpoint` on the same data,
    and connected clients reconnect by themselves.

    >>> with ServeProcess(tmp_path / "data") as server:   # doctest: +SKIP
    ...     engine = server.connect(timeout=10)

    ``workdir`` holds the ready file and the log (``NAME.ready``, ``NAME.log``); by default
    a new temporary directory. ``extra_args`` are appended to the command line (for
    example ``["--curve-dir", keys]``).
    """

    name = "tstreams serve"

    def __init__(self, data: str | os.PathLike[str], workdir: str | os.PathLike[str] | None = None, *,
                 port: int | None = None, host: str = LOOPBACK, durability: str = "sync",
                 extra_args: Sequence[str] = (), log_level: str = "WARNING", name: str = "serve",
                 python: str = sys.executable) -> None:
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="tstreams-serve-"))
        super().__init__(self.workdir / f"{name}.log")
        self.data = Path(data)
        self.host = host
        self.port = port or free_port(host)
        self.port_fixed = port is not None  # given by the caller: never changed
        self.durability = durability
        self.extra_args = list(extra_args)
        self.log_level = log_level
        self.python = python
        self.ready_file = self.workdir / f"{name}.ready"

    @property
    def endpoint(self) -> str:
        """``tcp://HOST:PORT``, what :func:`tstreams_embedded.connect` takes."""
        return f"tcp://{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [self.python, "-m", "tstreams_embedded.cli", "serve", "--data", str(self.data),
                "--bind", self.endpoint, "--durability", self.durability, "--ready-file", str(self.ready_file),
                "--log-level", self.log_level, *self.extra_args]

    def environment(self) -> dict[str, str]:
        return child_environment()

    def before_start(self) -> None:
        self.ready_file.unlink(missing_ok=True)

    def is_ready(self) -> bool:
        return self.ready_file.exists()

    def choose_new_ports(self) -> bool:
        if self.port_fixed:
            return False
        self.port = free_port(self.host)
        return True

    def connect(self, **options: Any) -> Engine:
        """``tstreams_embedded.connect(self.endpoint, **options)``."""
        return connect_engine(self.endpoint, **options)
