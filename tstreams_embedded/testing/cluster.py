"""A local replicated cluster for tests and benchmarks: ``tstreams serve --cluster`` node
processes (:class:`ClusterNodeProcess`) on one ZooKeeper, managed together
(:class:`LocalCluster`). Every process is stopped by PID."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .polling import eventually
from .ports import free_port
from .processes import stop_processes
from .server_process import ServeProcess


class ClusterNodeProcess(ServeProcess):
    """``tstreams serve --cluster URL --node-id ID --http 127.0.0.1:PORT`` in a child process,
    with its HTTP endpoints as methods (:meth:`status`, :meth:`state`, :meth:`is_leader`)."""

    def __init__(self, node_id: str, data: str | os.PathLike[str], workdir: str | os.PathLike[str], url: str, *,
                 session_timeout: float = 4.0, acks: str | None = None, log_level: str = "INFO",
                 durability: str = "sync", extra_args: Sequence[str] = ()) -> None:
        """``extra_args`` are more ``tstreams serve`` options (e.g. ``["--curve-dir", keys]``)."""
        self.node_id = node_id
        self.url = url
        self.http_port = free_port()
        self.session_timeout = session_timeout
        self.acks = acks
        super().__init__(data, workdir, name=node_id, log_level=log_level, durability=durability,
                         extra_args=extra_args)

    def command(self) -> list[str]:
        args = ["--cluster", self.url, "--node-id", self.node_id, "--http", f"127.0.0.1:{self.http_port}",
                "--session-timeout", str(self.session_timeout)]
        if self.acks:
            args += ["--acks", self.acks]
        return [*super().command(), *args]

    def choose_new_ports(self) -> bool:
        self.http_port = free_port()
        return super().choose_new_ports()

    def http_get(self, path: str, timeout: float = 2.0) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, JSON body)`` of ``GET path`` on the node's ``--http`` port."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=timeout) as r:
                return int(r.status), dict(json.loads(r.read()))
        except urllib.error.HTTPError as e:
            return int(e.code), dict(json.loads(e.read() or b"{}"))

    def status(self) -> dict[str, Any]:
        return self.http_get("/status")[1]

    def state(self, items: bool = False) -> dict[str, Any]:
        return self.http_get("/state?items=1" if items else "/state")[1]

    def is_leader(self) -> bool:
        """Whether this node serves as leader now (its ``/health/leader`` answers 200)."""
        try:
            return self.alive() and self.http_get("/health/leader")[0] == 200
        except (OSError, ValueError):
            return False


class LocalCluster:
    """``n`` node processes in ``root/n1 … root/nN`` for the cluster at ``url`` (which must
    have been initialised: ``tstreams_embedded.cluster.zk.init_cluster``)."""

    def __init__(self, url: str, root: str | os.PathLike[str], n: int = 3, *, session_timeout: float = 4.0,
                 acks: str | None = None, log_level: str = "INFO", extra_args: Sequence[str] = ()) -> None:
        self.url = url
        root = Path(root)
        self.nodes = [ClusterNodeProcess(f"n{i}", root / f"n{i}", root / "logs", url, session_timeout=session_timeout,
                                         acks=acks, log_level=log_level, extra_args=extra_args)
                      for i in range(1, n + 1)]

    def start(self) -> LocalCluster:
        """Start every node (side by side: all are spawned, then each is waited for); if one
        fails to start, stop those started and re-raise."""
        try:
            for node in self.nodes:
                node.spawn()
            for node in self.nodes:
                node.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def leader(self, timeout: float = 30.0) -> ClusterNodeProcess:
        """The one node that serves as leader (waits for it)."""
        def find() -> ClusterNodeProcess | None:
            leaders = [n for n in self.nodes if n.is_leader()]
            return leaders[0] if len(leaders) == 1 else None

        found = eventually(find, timeout, 0.02, message="one serving leader")
        assert found is not None
        return found

    def followers(self, leader: ClusterNodeProcess) -> list[ClusterNodeProcess]:
        return [n for n in self.nodes if n is not leader]

    def ready(self, timeout: float = 60.0) -> ClusterNodeProcess:
        """Wait until every node runs, one leads and every follower is ready; return the leader."""
        def check() -> ClusterNodeProcess | None:
            if not all(n.alive() for n in self.nodes):
                return None
            leaders = [n for n in self.nodes if n.is_leader()]
            if len(leaders) != 1:
                return None
            if any(n.http_get("/health/ready")[0] != 200 for n in self.followers(leaders[0])):
                return None
            return leaders[0]

        found = eventually(check, timeout, 0.05, message="a ready cluster", ignore=(OSError, ValueError))
        assert found is not None
        return found

    def stop(self) -> None:
        """Stop every node by PID, side by side (SIGTERM to all, then SIGKILL to those still
        running after their stop timeout)."""
        stop_processes([node.proc for node in self.nodes], ClusterNodeProcess.stop_timeout)
