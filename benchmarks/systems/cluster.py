"""Systems of the cluster suite, each started once per suite run (``shared`` isolation).

* ``ours-cluster``: a real ZooKeeper and 3 ``tstreams serve --cluster`` node processes
  (``--durability sync``, quorum acks, session timeout :data:`SESSION_TIMEOUT`), written
  through ``ts.connect("zk://…")``.
* ``ours-serve-node``: one ``tstreams serve --durability sync`` written through
  ``ts.connect("tcp://…")``: the same client API and durability on one node.
* ``redis-replicated``: a ``redis-server`` primary and one replica (``--replicaof``), both
  ``appendonly yes`` / ``appendfsync everysec``; a transaction is ``MULTI; XADD×N; EXEC;
  WAIT 1 0`` in one pipelined round trip, so it is acknowledged once the replica has it.
* ``redis-replicated-always``: the same with ``appendfsync always``.

Every produce run also reports the CPU the servers used per item (psutil): ``cpu_us_per_item``
for the node that serves (the cluster's leader, Redis's primary) and
``follower_cpu_us_per_item`` for the mean follower (Redis's replica); one node reports its own
CPU under both names, the baseline of both goals.
"""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Callable
from typing import Any

from benchmarks.measure import median
from benchmarks.systems.base import Outcome, System, items_range, make_item, run_threads

SESSION_TIMEOUT = 4.0
"""The nodes' ZooKeeper session timeout (``tstreams serve``'s default)."""
ZK_TICK_MS = 200
"""ZooKeeper's tickTime: sessions expire on tick boundaries, so a tick adds up to its length
to every failover (Debian's default of 2000 ms would add up to 2 s); 200 ms allows sessions
of 0.4 to 4 s."""
FIELD = b"d"


def _count_items(engine: Any, stream: str) -> int:
    from tstreams_embedded.engine.protocol.iteration import iter_transactions

    return sum(len(t.items) for t in iter_transactions(engine.backend, stream, 0))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process ``pid`` used so far (psutil)."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def cpu_us_per_item(before: dict[int, float], pids: list[int], items: int) -> float:
    """Mean CPU µs per item of ``pids`` since ``before`` (their CPU seconds then)."""
    used = [cpu_seconds(p) - before[p] for p in pids]
    return sum(used) / len(used) / items * 1e6 if used and items else 0.0


class _Served(System):
    """A system written through ``self.engine`` (a ``ts.connect`` engine) and, for several
    clients, more engines like it; each run uses a new stream. Each run also reports the
    CPU its servers used per item (``cpu_us_per_item``; see :meth:`cpu_extra`)."""

    is_ours = True
    engine: Any = None
    _streams = itertools.count(1)

    def connect(self) -> Any:
        """A new client engine of this system."""
        raise NotImplementedError

    def _new_stream(self) -> str:
        name = f"s{next(self._streams)}"
        self.engine.create_stream(name, partitions=1)
        return name

    def _engines(self, clients: int) -> list[Any]:
        extra = self.__dict__.setdefault("_extra_engines", [])
        while len(extra) < clients - 1:
            extra.append(self.connect())
        return [self.engine, *extra[:clients - 1]]

    def cpu_roles(self) -> dict[str, list[int]]:
        """Server PIDs by the role their CPU is reported under: ``cpu`` (the serving node)."""
        return {"cpu": self.server_pids()}

    def run_produce(self, n_items: int, batch: int, clients: int = 1) -> Outcome:
        """``n_items`` in durable ``batch``-item transactions from ``clients`` threads, each
        with its own client engine."""
        stream = self._new_stream()
        engines = self._engines(clients)
        producers = [e.producer(stream, partition=0) for e in engines]
        items = items_range(0, batch)
        per_thread = n_items // batch // clients
        roles = self.cpu_roles()
        before = {p: cpu_seconds(p) for pids in roles.values() for p in pids}

        def factory(t: int) -> Callable[[int], None]:
            producer = producers[t]
            return lambda _i: producer.instant(items, partition=0)

        seconds, lat = run_threads(clients, per_thread, factory)
        done = per_thread * clients * batch
        extra = {f"{role}_us_per_item": cpu_us_per_item(before, pids, done) for role, pids in roles.items()}
        return Outcome(done, seconds, lat, stored=_count_items(self.engine, stream), expected=done, extra=extra)

    def close(self) -> None:
        engines = [self.engine, *self.__dict__.pop("_extra_engines", [])]
        self.engine = None
        for engine in engines:
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
        self.url = url
        self.engine = ts.connect(url, timeout=60)

    def connect(self) -> Any:
        import tstreams_embedded as ts

        return ts.connect(self.url, timeout=60)

    def cpu_roles(self) -> dict[str, list[int]]:
        """``cpu``: the leader's; ``follower_cpu``: the mean of the followers'."""
        leader = self.cluster.leader()
        return {"cpu": [leader.pid], "follower_cpu": [n.pid for n in self.cluster.followers(leader)]}

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

    def connect(self) -> Any:
        import tstreams_embedded as ts

        return ts.connect(self.server.endpoint, timeout=60)

    def cpu_roles(self) -> dict[str, list[int]]:
        """``cpu``, and the same figure as ``follower_cpu`` (the baseline of the followers' goal)."""
        return {"cpu": [self.server.pid], "follower_cpu": [self.server.pid]}

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
    appendfsync = "everysec"

    def open(self) -> None:
        import redis

        from benchmarks.redis_server import RedisServer, ReplicaRedisServer

        self.primary = RedisServer(self.workdir / "primary", appendfsync=self.appendfsync).start()
        self.replica = ReplicaRedisServer(self.workdir / "replica", self.primary, appendfsync=self.appendfsync).start()
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

    def run_produce(self, n_items: int, batch: int, clients: int = 1) -> Outcome:
        """``clients`` threads, each with its own connection, run the transaction loop; the
        CPU of the primary (``cpu_us_per_item``) and of the replica (``follower_cpu_us_per_item``)."""
        import redis

        key = f"s{next(self._keys)}"
        items = items_range(0, batch)
        per_thread = n_items // batch // clients
        under_replicated = [0]
        roles = {"cpu": [self.primary.pid], "follower_cpu": [self.replica.pid]}
        before = {p: cpu_seconds(p) for pids in roles.values() for p in pids}

        def factory(_t: int) -> Callable[[int], None]:
            pipe = redis.Redis(host="127.0.0.1", port=self.primary.port).pipeline(transaction=False)

            def op(_i: int) -> None:
                pipe.execute_command("MULTI")
                for item in items:
                    pipe.xadd(key, {FIELD: item})
                pipe.execute_command("EXEC")
                pipe.execute_command("WAIT", 1, 0)
                if pipe.execute()[-1] < 1:
                    under_replicated[0] += 1
            return op

        seconds, lat = run_threads(clients, per_thread, factory)
        done = per_thread * clients * batch
        extra = {f"{role}_us_per_item": cpu_us_per_item(before, pids, done) for role, pids in roles.items()}
        on_replica = redis.Redis(host="127.0.0.1", port=self.replica.port).xlen(key)
        stored = on_replica if not under_replicated[0] else -under_replicated[0]
        return Outcome(done, seconds, lat, stored=stored, expected=done, extra=extra)


class RedisReplicatedAlways(RedisReplicated):
    name = "redis-replicated-always"
    label = "Redis Streams + 1 replica (always, WAIT 1)"
    description = ("redis-server primary + replica (--replicaof), appendonly yes, appendfsync always; "
                   "MULTI; XADD×N; EXEC; WAIT 1 0 in one pipelined round trip")
    appendfsync = "always"
