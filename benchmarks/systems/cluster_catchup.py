"""Catch-up of an empty cluster node from a leader holding N MiB, against LMDB's own
``env.copy`` of the same environment to local disk (issue 10's figure: goal >= 0.5x).

:meth:`ClusterCatchup.open` starts a real ZooKeeper and one ``tstreams serve --cluster``
leader (a 1-node cluster whose log keeps 2 entries, so a joining node cannot catch up from
the log); ``setup_*`` loads ``size_mib`` MiB into it (1 MiB transactions of 64 KiB items,
untimed, once). Then, per repetition:

* ``run_catchup``: a new node with an empty data directory joins (a new name each time); it
  gets a streamed snapshot of the leader's state (:mod:`tstreams_embedded.cluster.snapshot`)
  and installs it. The rate is the snapshot's size over the time the node measured from its
  first snapshot request to the installed state (transfer, fsync, swap); the time from
  process start to caught up is reported too (``end_to_end_s``). Checked: the new node's
  state digest equals the leader's.
* ``run_env_copy``: ``env.copy(dir, compact=True)`` of the leader's environment (opened by
  this process while the leader runs, as a hot copy) plus an fsync of the copy. The rate is
  the copy's size over that time.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.systems.base import Outcome, System

MIB = 1 << 20
ITEM = 64 << 10
ITEMS_PER_TXN = 16  # 1 MiB per transaction (one log entry)


def _http(port: int, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        got: dict[str, Any] = json.loads(r.read())
        return got


class ClusterCatchup(System):
    name = "cluster-catchup"
    label = "ours cluster"
    description = "tstreams serve --cluster: a leader and joining empty nodes (snapshot catch-up)"
    is_ours = True

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.zk: Any = None
        self.leader: Any = None
        self.leader_http = 0
        self.url = ""
        self.loaded_mib = 0
        self.joins = 0

    @classmethod
    def available(cls) -> str | None:
        try:
            from tstreams_embedded.testing.zookeeper import zookeeper_classpath

            if not zookeeper_classpath():
                return "ZooKeeper jars not found (apt-get install zookeeper)"
        except Exception as exc:  # noqa: BLE001
            return f"ZooKeeper unavailable: {exc}"
        return None

    def _node(self, node_id: str) -> tuple[Any, int]:
        from tstreams_embedded.testing import ServeProcess, free_port

        http = free_port()
        node = ServeProcess(self.workdir / node_id, self.workdir / "logs", name=node_id,
                            extra_args=["--cluster", self.url, "--node-id", node_id, "--http", f"127.0.0.1:{http}",
                                        "--session-timeout", "4"])
        return node, http

    def open(self) -> None:
        from tstreams_embedded.cluster.zk import init_cluster
        from tstreams_embedded.testing import ZooKeeperServer, eventually

        self.zk = ZooKeeperServer(self.workdir / "zk")
        self.zk.start()
        self.url = f"zk://{self.zk.address}/bench"
        init_cluster(self.url, 1, log_retain_entries=2, log_retain_bytes=1 << 16)
        self.leader, self.leader_http = self._node("leader")
        self.leader.start(timeout=60)
        eventually(lambda: _http(self.leader_http, "/health/leader")["ok"], 60, 0.05,
                   message="the leader serves", ignore=(OSError,))

    def close(self) -> None:
        if self.leader is not None:
            self.leader.stop()
            self.leader = None
        if self.zk is not None:
            self.zk.cleanup()
            self.zk = None

    def server_pids(self) -> list[int]:
        return [self.leader.pid] if self.leader is not None else []

    def _load(self, size_mib: int) -> None:
        if self.loaded_mib >= size_mib:
            return
        import tstreams_embedded as ts

        engine = ts.connect(self.url, timeout=120)
        try:
            if self.loaded_mib == 0:
                engine.create_stream("bulk", partitions=4)
            producer = engine.producer("bulk")
            filler = os.urandom(ITEM)
            for i in range(self.loaded_mib, size_mib):
                producer.instant([i.to_bytes(8, "big") + filler[8:] for _ in range(ITEMS_PER_TXN)])
            self.loaded_mib = size_mib
        finally:
            engine.close()

    def setup_catchup(self, size_mib: int) -> None:
        self._load(size_mib)

    def setup_env_copy(self, size_mib: int) -> None:
        self._load(size_mib)

    def run_catchup(self, size_mib: int) -> Outcome:
        from tstreams_embedded.testing import eventually

        self.joins += 1
        node_id = f"join{self.joins}"
        target = _http(self.leader_http, "/status")["applied"]
        node, http = self._node(node_id)
        t0 = time.perf_counter()
        node.start(timeout=120)
        try:
            status = eventually(lambda: (lambda s: s if s["applied"] >= target and s["snapshots_installed"] else None)(
                _http(http, "/status")), 900, 0.02, message="the new node caught up", ignore=(OSError,))
            end_to_end = time.perf_counter() - t0
            snap = status["last_snapshot"]
            same = _http(http, "/state")["digest"] == _http(self.leader_http, "/state")["digest"]
        finally:
            node.stop()
            shutil.rmtree(self.workdir / node_id, ignore_errors=True)
        mib = snap["bytes"] / MIB
        return Outcome(mib, snap["seconds"], stored=int(same), expected=1,
                       extra={"end_to_end_s": end_to_end, "snapshot_mib": mib,
                              "transfer_s": snap.get("transfer_seconds", 0.0)})

    def run_env_copy(self, size_mib: int) -> Outcome:
        import lmdb

        dst = self.workdir / "env-copy"
        shutil.rmtree(dst, ignore_errors=True)
        dst.mkdir()
        env = lmdb.open(str(self.workdir / "leader"), readonly=True, max_dbs=16, lock=True)
        try:
            t0 = time.perf_counter()
            env.copy(str(dst), compact=True)
            fd = os.open(dst / "data.mdb", os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            seconds = time.perf_counter() - t0
        finally:
            env.close()
        mib = (dst / "data.mdb").stat().st_size / MIB
        shutil.rmtree(dst, ignore_errors=True)
        return Outcome(mib, seconds, stored=int(mib > 0), expected=1,
                       extra={"snapshot_mib": mib})
