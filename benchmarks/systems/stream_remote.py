"""The windowed count of the ``streams`` suite through the network (issue 21, "Apps over the
network"): the same job program (:mod:`benchmarks.streams.jobs.ours_job`) in its own
process, its engine ``ts.connect(...)`` to

* ``ours-streams-serve``: one ``tstreams serve --durability sync`` on 127.0.0.1;
* ``ours-streams-cluster``: a real ZooKeeper and 3 ``tstreams serve --cluster`` nodes
  (``--durability sync``, quorum acks), ``ts.connect("zk://…")``.

The servers are started and the input written before the timed run (untimed); rate = N /
wall time of the job process, as embedded; peak RSS is the job process's own (the servers'
is in ``server_peak_rss``). The output is read back through the same connection and checked
exactly against the plain-Python reference.
"""

from __future__ import annotations

from typing import Any

from benchmarks.systems.cluster import SESSION_TIMEOUT, ZK_TICK_MS, OursCluster
from benchmarks.systems.stream_jobs import OursStreams


class OursStreamsServe(OursStreams):
    name = "ours-streams-serve"
    label = "ours through one tstreams serve"
    description = "the embedded job with ts.connect('tcp://…') to one tstreams serve --durability sync"

    url = ""

    def open(self) -> None:
        from tstreams_embedded.testing import ServeProcess

        self.server = ServeProcess(self.workdir / "server", self.workdir, durability="sync", name="streams").start(60)
        self.url = self.server.endpoint

    def close(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            self.server = None
            server.stop()

    def server_pids(self) -> list[int]:
        server = getattr(self, "server", None)
        return [server.pid] if server is not None else []

    def open_engine(self) -> Any:
        import tstreams_embedded as ts

        return ts.connect(self.url, timeout=60)

    def job_spec(self) -> dict[str, Any]:
        return {**super().job_spec(), "connect": self.url}


class OursStreamsCluster(OursStreamsServe):
    name = "ours-streams-cluster"
    label = "ours through a 3-node cluster"
    description = (f"the embedded job with ts.connect('zk://…') to ZooKeeper + 3 tstreams serve --cluster "
                   f"--durability sync, quorum acks, session {SESSION_TIMEOUT:g} s")

    def open(self) -> None:
        from tstreams_embedded.cluster.zk import init_cluster
        from tstreams_embedded.testing import LocalCluster, ZooKeeperServer

        self.zk = ZooKeeperServer(self.workdir / "zk", tick_time_ms=ZK_TICK_MS).start()
        self.url = f"zk://{self.zk.address}/streams"
        init_cluster(self.url, 3)
        self.cluster = LocalCluster(self.url, self.workdir, 3, session_timeout=SESSION_TIMEOUT, log_level="WARNING")
        self.cluster.start()
        self.cluster.ready()

    def close(self) -> None:
        for attr in ("cluster", "zk"):
            part = getattr(self, attr, None)
            if part is not None:
                setattr(self, attr, None)
                part.stop()

    def server_pids(self) -> list[int]:
        cluster = getattr(self, "cluster", None)
        return [n.pid for n in cluster.nodes if n.alive()] if cluster is not None else []

    @classmethod
    def available(cls) -> str | None:
        return OursStreams.available() or OursCluster.available()
