"""Start and stop a real ``redis-server`` on 127.0.0.1 for one benchmark run."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from benchmarks.measure import free_port, stop_process


class RedisServer:
    """A private ``redis-server`` process with an append-only file.

    Binds 127.0.0.1 on a free port, keeps its data in ``directory``, snapshots disabled,
    AOF on with ``appendfsync`` = ``everysec`` or ``always``. Stopped by PID (SIGTERM, then
    SIGKILL after 10 s) in :meth:`stop` or on leaving the ``with`` block.
    """

    def __init__(self, directory: str | os.PathLike, appendfsync: str = "everysec") -> None:
        if appendfsync not in ("everysec", "always", "no"):
            raise ValueError(f"appendfsync must be everysec, always or no, not {appendfsync!r}")
        self.directory = Path(directory)
        self.appendfsync = appendfsync
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 10.0) -> RedisServer:
        import redis

        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.directory.mkdir(parents=True, exist_ok=True)
        last_error: Exception | None = None
        for _attempt in range(3):  # a free port can be taken between probing and binding
            self.port = free_port()
            self.proc = subprocess.Popen(
                [
                    exe, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                    "--appendonly", "yes", "--appendfsync", self.appendfsync,
                    "--dir", str(self.directory), "--daemonize", "no",
                    "--logfile", str(self.directory / "redis.log"), "--protected-mode", "yes",
                ],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
            deadline = time.monotonic() + timeout
            try:
                while time.monotonic() < deadline and self.proc.poll() is None:
                    try:
                        if client.ping():
                            return self
                    except redis.exceptions.RedisError as e:
                        last_error = e
                        time.sleep(0.02)
            finally:
                client.close()
            self.stop()
        raise RuntimeError(f"redis-server did not start: {last_error}")

    def aof_bytes(self) -> int:
        """Bytes of the append-only file(s)."""
        from benchmarks.measure import disk_bytes

        d = self.directory / "appendonlydir"
        return disk_bytes(d) if d.exists() else 0

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc, timeout=10)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
