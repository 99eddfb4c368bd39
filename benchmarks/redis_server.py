"""Start and stop a real ``redis-server`` on 127.0.0.1 for one benchmark run."""

from __future__ import annotations

from tstreams_embedded.testing import RedisServer as _RedisServer
from tstreams_embedded.testing import free_port


class RedisServer(_RedisServer):
    """A private ``redis-server`` process with an append-only file.

    Binds 127.0.0.1 on a free port, keeps its data in ``directory``, snapshots disabled,
    AOF on with ``appendfsync`` = ``everysec`` or ``always``. Stopped by PID (SIGTERM, then
    SIGKILL after 10 s) in :meth:`stop` or on leaving the ``with`` block
    (:class:`tstreams_embedded.testing.RedisServer`).
    """

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        """PID of the running server, ``None`` when it is not running."""
        return self.proc.pid if self.proc is not None and self.alive() else None

    def start(self, timeout: float | None = None) -> RedisServer:
        last_error: Exception | None = None
        for _attempt in range(3):  # a free port can be taken between probing and binding
            try:
                return super().start(timeout)
            except RuntimeError as e:
                last_error = e
                self.port = free_port()
        raise RuntimeError(f"redis-server did not start: {last_error}")

    def aof_bytes(self) -> int:
        """Bytes of the append-only file(s)."""
        from benchmarks.measure import disk_bytes

        d = self.directory / "appendonlydir"
        return disk_bytes(d) if d.exists() else 0


class ReplicaRedisServer(RedisServer):
    """A ``redis-server`` replica of ``primary`` (``--replicaof``), with the same AOF
    settings. :meth:`start` returns once the replica is connected and in sync."""

    def __init__(self, directory, primary: RedisServer, appendfsync: str = "everysec") -> None:  # noqa: ANN001
        super().__init__(directory, appendfsync=appendfsync)
        self.primary = primary

    def command(self) -> list[str]:
        return [*super().command(), "--replicaof", self.primary.host, str(self.primary.port)]

    def is_ready(self) -> bool:
        if not super().is_ready():
            return False
        import redis

        client = redis.Redis(host=self.host, port=self.port, socket_connect_timeout=0.5)
        try:
            info = client.info("replication")
        except redis.exceptions.RedisError:
            return False
        finally:
            client.close()
        return info.get("master_link_status") == "up" and not info.get("master_sync_in_progress")
