"""Systems of the cluster suite, each started once per suite run (``shared`` isolation).

* ``ours-cluster``: a real ZooKeeper and 3 ``tstreams serve --cluster`` node processes
  (``--durability sync``, quorum acks, session timeout :data:`SESSION_TIMEOUT`), written
  through ``ts.connect("zk://…")``.
* ``ours-serve-node``: one ``tstreams serve --durability sync`` written through
  ``ts.connect("tcp://…")``: the same client API and durability on one node.
* ``redis-replicated``: a ``redis-server`` primary and one replica (``--replicaof``), both
  ``appendonly yes`` / ``appendfsync everysec``; a transaction is ``MULTI; XADD×N; EXEC;
  WAIT 1 0`` in one pipelined round trip, so it is acknowledged once the replica has it.
"""

from __future__ import annotations

import itertools
import shutil
import time
from typing import Any

from benchmarks.measure import median
from benchmarks.systems.base import Outcome, System, items_range, make_item

SESSION_TIMEOUT = 4.0
"""The nodes' ZooKeeper session timeout (``tstreams serve``'s default)."""
ZK_TICK_MS = 200
"""ZooKeeper's tickTime: sessions expire on tick boundaries, so a tick adds up to its length
to every failover (Debian's default of 2000 ms would add up to 2 s); 200 ms allows sessions
of 0.4 to 4 s."""
FIELD = b"d"


def _count_items(engine: Any, stream: str) -> int:
    from tstreams_embedded.engine.iteration import iter_transactions

    return sum(len(t.items) for t in iter_transactions(engine.backend, stream, 0))


class _Served(System):
    """A system written through ``self.engine`` (a ``ts.connect`` engine); each run uses a
    new stream."""

    is_ours = True
    engine: Any = None
    _streams = itertools.count(1)

    def _new_stream(self) -> str:
        name = f"s{next(self._streams)}"
        self.engine.create_stream(name, partitions=1)
        return name

    def run_produce(self, n_items: int, batch: int) -> Outcome:
        stream = self._new_stream()
        producer = self.engine.producer(stream, partition=0)
        items = items_range(0, batch)
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        for _ in range(n_items // batch):
            s = clock()
            producer.instant(items, partition=0)
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        return Outcome(n_items, seconds, lat, stored=_count_items(self.engine, stream), expected=n_items)

    def close(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()


class OursCluster(_Served):
    name = "ours-cluster"
    label = "tstreams cluster (3 nodes, quorum acks)"
    description = (f"ZooKeeper + 3 tstreams serve --cluster --durability sync, --acks quorum, session "
                   f"{SESSION_TIMEOUT:g} s; ts.connect('zk://…'), producer.instant")

    def open(self) -> None:
        import tstreams_embedded as ts
        from tstreams_embedded.cluster.zk import init_cluster
        from tstreams_embedded.testing import LocalCluster, ZooKeeperServer

        self.zk = ZooKeeperServer(self.workdir / "zk", tick_time_ms=ZK_TICK_MS).start()
        url = f"zk://{self.zk.address}/bench"
        init_cluster(url, 3)
        self.cluster = LocalCluster(url, self.workdir, 3, session_timeout=SESSION_TIMEOUT, log_level="WARNING")
        self.cluster.start()
        self.cluster.ready()
        self.engine = ts.connect(url, timeout=60)

    def close(self) -> None:
        super().close()
        for attr in ("cluster", "zk"):
            part = getattr(self, attr, None)
            if part is not None:
                setattr(self, attr, None)
                part.stop()

    def server_pids(self) -> list[int]:
        return [n.pid for n in self.cluster.nodes if n.alive()]

    @classmethod
    def available(cls) -> str | None:
        from tstreams_embedded.testing import zookeeper_classpath

        if not zookeeper_classpath():
            return "ZooKeeper is not installed (apt-get install zookeeper)"
        if shutil.which("java") is None:
            return "java is not installed"
        return None

    def run_failover(self, kills: int) -> Outcome:
        """``kills`` times: with every node up and ready and a write just acknowledged,
        SIGKILL the leader and time until the next write is acknowledged (by the new
        leader: the client retries by itself), then restart the killed node."""
        stream = self._new_stream()
        producer = self.engine.producer(stream, partition=0)
        samples: list[float] = []
        acked = 0
        for k in range(kills):
            leader = self.cluster.ready()
            producer.instant([make_item(2 * k)], partition=0)
            acked += 1
            t0 = time.perf_counter()
            leader.kill()
            producer.instant([make_item(2 * k + 1)], partition=0)
            samples.append(time.perf_counter() - t0)
            acked += 1
            leader.start()
        extra = {"failover_p50_s": median(samples), "failover_max_s": max(samples),
                 "failover_min_s": min(samples), "session_timeout_s": SESSION_TIMEOUT,
                 "samples_s": [round(s, 3) for s in samples]}
        self.cluster.ready()
        return Outcome(kills, sum(samples), [int(s * 1e9) for s in samples],
                       stored=_count_items(self.engine, stream), expected=acked, extra=extra)


class OursServeNode(_Served):
    name = "ours-serve-node"
    label = "tstreams serve (1 node, sync)"
    description = "one tstreams serve --durability sync; ts.connect('tcp://…'), producer.instant"

    def open(self) -> None:
        import tstreams_embedded as ts
        from tstreams_embedded.testing import ServeProcess

        self.server = ServeProcess(self.workdir / "data", self.workdir, durability="sync", name="single").start(60)
        self.engine = ts.connect(self.server.endpoint, timeout=60)

    def close(self) -> None:
        super().close()
        server = getattr(self, "server", None)
        if server is not None:
            self.server = None
            server.stop()

    def server_pids(self) -> list[int]:
        return [self.server.pid]


class RedisReplicated(System):
    name = "redis-replicated"
    label = "Redis Streams + 1 replica (everysec, WAIT 1)"
    description = ("redis-server primary + replica (--replicaof), appendonly yes, appendfsync everysec; "
                   "MULTI; XADD×N; EXEC; WAIT 1 0 in one pipelined round trip")

    def open(self) -> None:
        import redis

        from benchmarks.redis_server import RedisServer, ReplicaRedisServer

        self.primary = RedisServer(self.workdir / "primary", appendfsync="everysec").start()
        self.replica = ReplicaRedisServer(self.workdir / "replica", self.primary, appendfsync="everysec").start()
        self.client = redis.Redis(host="127.0.0.1", port=self.primary.port)
        self._keys = itertools.count(1)

    def close(self) -> None:
        for attr in ("replica", "primary"):
            server = getattr(self, attr, None)
            if server is not None:
                setattr(self, attr, None)
                server.stop()

    def server_pids(self) -> list[int]:
        return [p for p in (self.primary.pid, self.replica.pid) if p]

    @classmethod
    def available(cls) -> str | None:
        from benchmarks.systems.redis_streams import RedisEverysec

        return RedisEverysec.available()

    def run_produce(self, n_items: int, batch: int) -> Outcome:
        import redis

        key = f"s{next(self._keys)}"
        items = items_range(0, batch)
        pipe = self.client.pipeline(transaction=False)
        lat = []
        clock = time.perf_counter_ns
        under_replicated = 0
        t0 = time.perf_counter()
        for _ in range(n_items // batch):
            s = clock()
            pipe.execute_command("MULTI")
            for item in items:
                pipe.xadd(key, {FIELD: item})
            pipe.execute_command("EXEC")
            pipe.execute_command("WAIT", 1, 0)
            if pipe.execute()[-1] < 1:
                under_replicated += 1
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        on_replica = redis.Redis(host="127.0.0.1", port=self.replica.port).xlen(key)
        stored = on_replica if not under_replicated else -under_replicated
        return Outcome(n_items, seconds, lat, stored=stored, expected=n_items)
