"""A private ``redis-server`` on a free loopback port (benchmarks and comparison tests)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .ports import LOOPBACK, free_port
from .processes import ManagedProcess


class RedisServer(ManagedProcess):
    """``redis-server`` on ``host:port`` (a free port by default) with its data in
    ``directory``: snapshots off, append-only file on with ``appendfsync`` = ``everysec``,
    ``always`` or ``no``. Its own log goes to ``directory/redis.log``. Ready when it answers
    ``PING`` (needs the ``redis`` client package). Stopped by PID (SIGTERM, then SIGKILL
    after 10 s).
    """

    name = "redis-server"
    start_timeout = 10.0
    stop_timeout = 10.0

    def __init__(self, directory: str | os.PathLike[str] | None = None, appendfsync: str = "everysec", *,
                 port: int | None = None, host: str = LOOPBACK, executable: str | None = None) -> None:
        if appendfsync not in ("everysec", "always", "no"):
            raise ValueError(f"appendfsync must be everysec, always or no, not {appendfsync!r}")
        self.directory = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="tstreams-redis-"))
        super().__init__(self.directory / "redis.log")
        exe = executable or shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.executable = exe
        self.appendfsync = appendfsync
        self.host = host
        self.port = port or free_port(host)

    def command(self) -> list[str]:
        return [self.executable, "--bind", self.host, "--port", str(self.port), "--save", "",
                "--appendonly", "yes", "--appendfsync", self.appendfsync, "--dir", str(self.directory),
                "--daemonize", "no", "--logfile", str(self.log_path), "--protected-mode", "yes"]

    def is_ready(self) -> bool:
        import redis

        client = redis.Redis(host=self.host, port=self.port, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.exceptions.RedisError:
            return False
        finally:
            client.close()
