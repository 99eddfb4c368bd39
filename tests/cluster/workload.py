"""The Jepsen-style workload on a real cluster: writer and consumer clients that record a
:class:`~tstreams_embedded.testing.history.History`, and a nemesis that kills and pauses
node processes meanwhile (``test_jepsen.py`` runs them; the checker is
:mod:`tstreams_embedded.testing.history`)."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tstreams_embedded import errors
from tstreams_embedded.cluster.zk import cluster_status
from tstreams_embedded.testing import eventually
from tstreams_embedded.testing.history import FinalState, History

from .conftest import SESSION, Cluster, ClusterNode

STREAM = "jepsen"
GROUP = "g"

#: Errors after which a write may or may not have happened (recorded as ``info``). Every
#: other TStreamsError is the cluster's decision: the write did not happen (``fail``).
INDETERMINATE = (errors.ClusterUnavailable, errors.NotLeader, errors.RemoteError, errors.EngineClosed,
                 errors.ServerBusy, errors.RetryWindowExceeded, TimeoutError, ConnectionError)


@dataclass(frozen=True)
class Plan:
    """How much the nemesis does, and how many clients write meanwhile."""

    leader_kills: int = 20
    leader_pauses: int = 5
    follower_kills: int = 5
    writers: int = 3
    partitions: int = 2
    txn_ttl: float = 3.0  # about a failover: open transactions expire during some of them
    seed: int = 10
    settle: bool = True  # wait for every follower to be ready before each fault (False: faults pile up)
    majority_kills: int = 0  # SIGKILL the leader and a follower at once (no quorum), then restart both
    follower_pauses: int = 0  # SIGSTOP a follower past the session timeout, then SIGCONT

    def faults(self) -> list[str]:
        faults = (["kill-leader"] * self.leader_kills + ["pause-leader"] * self.leader_pauses
                  + ["kill-follower"] * self.follower_kills + ["kill-majority"] * self.majority_kills
                  + ["pause-follower"] * self.follower_pauses)
        random.Random(self.seed).shuffle(faults)
        return faults


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


class Writer(threading.Thread):
    """Writes uniquely named items, alternating 2-item instants and 3-item transactions
    (open, ID read at once, items sent with a flush after 2, checkpoint), round robin over
    the partitions, until ``stop`` is set."""

    def __init__(self, name: str, cluster: Cluster, history: History, stop: threading.Event, partitions: int,
                 txn_ttl: float) -> None:
        super().__init__(name=f"writer-{name}", daemon=True)
        self.txn_ttl = txn_ttl
        self.client = name
        self.cluster = cluster
        self.history = history
        self.stop_event = stop
        self.partitions = partitions
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            engine = self.cluster.connect(timeout=30, txn_ttl=self.txn_ttl)
            try:
                producer = engine.producer(STREAM, batch_size=2)
                for k in itertools.count():
                    if self.stop_event.is_set():
                        break
                    self._write(producer, k)
            finally:
                engine.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _write(self, producer: Any, k: int) -> None:
        partition = k % self.partitions
        kind = "instant" if k % 2 == 0 else "txn"
        items = [f"{self.client}-{k}-{i}" for i in range(2 if kind == "instant" else 3)]
        op = self.history.begin_write(self.client, items, kind)
        txn = None
        try:
            if kind == "instant":
                tid = producer.instant([i.encode() for i in items], partition=partition)
            else:
                txn = producer.new_transaction(partition=partition)
                tid = txn.id  # registered (OPEN replicated) before any item
                for item in items:
                    txn.send(item.encode())  # batch_size=2: a DATA write after 2 items
                txn.checkpoint()
        except INDETERMINATE as exc:
            self.history.end_write(op, "info", partition, error=_describe(exc))
            self._abandon(producer, txn)
        except errors.TStreamsError as exc:
            self.history.end_write(op, "fail", partition, error=_describe(exc))
            self._abandon(producer, txn)
        else:
            self.history.end_write(op, "ok", partition, tid)

    @staticmethod
    def _abandon(producer: Any, txn: Any) -> None:
        """Cancel a transaction left open by a failed write; if even that fails, stop keeping
        it alive (it then expires after its TTL)."""
        if txn is None or not txn.is_open:
            return
        try:
            txn.cancel()
        except errors.TStreamsError:
            producer.forget(txn)


class Reader(threading.Thread):
    """The consumer group: reads every transaction, checkpoints its offsets every 5 reads
    and reads the stored offsets back. A call that fails for good (the client's 30 s
    timeout) ends the incarnation: the next one starts from the stored offsets. After
    ``finish`` is set it reads on until it has passed every partition's last transaction."""

    def __init__(self, cluster: Cluster, history: History, finish: threading.Event, partitions: int) -> None:
        super().__init__(name="reader", daemon=True)
        self.cluster = cluster
        self.history = history
        self.finish = finish
        self.partitions = partitions
        self.incarnations = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            engine = self.cluster.connect(timeout=30)
            try:
                while not self._incarnation(engine):
                    pass
            finally:
                engine.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _checkpoint(self, engine: Any, name: str, consumer: Any) -> None:
        op = self.history.begin_checkpoint(name, consumer.offsets)
        try:
            consumer.checkpoint()
        except INDETERMINATE as exc:
            self.history.end_checkpoint(op, "info", _describe(exc))
            raise
        except errors.TStreamsError as exc:
            self.history.end_checkpoint(op, "fail", _describe(exc))
            raise
        self.history.end_checkpoint(op, "ok")
        self.history.observe(name, engine.backend.get_offsets(STREAM, GROUP))

    def _incarnation(self, engine: Any) -> bool:
        """One consumer object; True when the run is over."""
        self.incarnations += 1
        name = f"c{self.incarnations}"
        try:
            consumer = engine.consumer(STREAM, GROUP, start="oldest")
            self.history.observe(name, consumer.offsets, incarnation_start=True)
            unsaved = 0
            deadline: float | None = None
            while True:
                t = consumer.get_transaction()
                if t is not None:
                    self.history.read(name, t.partition, t.id, [i.decode() for i in t.items])
                    unsaved += 1
                    if unsaved >= 5:
                        self._checkpoint(engine, name, consumer)
                        unsaved = 0
                    continue
                if unsaved:
                    self._checkpoint(engine, name, consumer)
                    unsaved = 0
                if self.finish.is_set():
                    deadline = deadline or time.monotonic() + 60
                    if self._passed_the_end(engine, consumer) or time.monotonic() > deadline:
                        return True
                self.finish.wait(0.05)  # poll interval of an idle consumer
        except INDETERMINATE:
            return False  # this consumer gave up: the next incarnation starts from the stored offsets

    def _passed_the_end(self, engine: Any, consumer: Any) -> bool:
        offsets = consumer.offsets
        for p in range(self.partitions):
            last = engine.backend.last_transaction(STREAM, p)
            if last is not None and offsets.get(p, 0) < last.id:
                return False
        return True


class Nemesis:
    """Runs the faults of a :class:`Plan` one after the other. Before each fault the cluster
    is healthy (three live nodes, one serving leader, every follower ready); after it, the
    clients' acknowledged writes must move on (``progress``)."""

    def __init__(self, cluster: Cluster, progress: Callable[[], int], seed: int, settle: bool = True) -> None:
        self.cluster = cluster
        self.settle = settle
        self.progress = progress
        self.rng = random.Random(seed)
        self.log: list[tuple[str, str, float]] = []  # (fault, node, seconds until a new leader / progress)
        self.struck: list[tuple[str, float]] = []  # (fault, History.now() when it was injected)

    def healthy(self, timeout: float = 90, settle: bool = True) -> ClusterNode:
        """Every node runs and one leads; with ``settle``, every follower is also ready."""
        def check() -> ClusterNode | None:
            if not all(n.alive() for n in self.cluster.nodes):
                return None
            leaders = [n for n in self.cluster.nodes if n.is_leader()]
            if len(leaders) != 1:
                return None
            if settle and any(n.http_get("/health/ready")[0] != 200 for n in self.cluster.followers(leaders[0])):
                return None
            return leaders[0]

        leader: ClusterNode = eventually(check, timeout, 0.1, message="a healthy cluster before the next fault",
                                         ignore=(OSError, ValueError))
        return leader

    def new_leader(self, old: ClusterNode) -> float:
        t0 = time.monotonic()
        eventually(lambda: any(n.is_leader() for n in self.cluster.followers(old)), SESSION + 30, 0.05,
                   message=f"a new leader after {old.node_id} stopped")
        return time.monotonic() - t0

    def moved_on(self, before: int, what: str) -> None:
        eventually(lambda: self.progress() > before, 60, 0.05, message=f"acknowledged writes after {what}")

    def run(self, faults: list[str]) -> None:
        for fault in faults:
            leader = self.healthy(settle=self.settle)
            before = self.progress()
            self.struck.append((fault, History.now()))
            if fault == "kill-leader":
                leader.kill()
                took = self.new_leader(leader)
                leader.start()
                self.moved_on(before, fault)
                self.log.append((fault, leader.node_id, took))
            elif fault == "pause-leader":
                leader.pause()
                try:
                    took = self.new_leader(leader)
                    self.moved_on(before, fault)
                finally:
                    leader.resume()
                self.log.append((fault, leader.node_id, took))
            elif fault == "kill-follower":
                follower = self.rng.choice(self.cluster.followers(leader))
                follower.kill()
                t0 = time.monotonic()
                self.moved_on(before, fault)  # two nodes of three still commit
                follower.start()
                self.log.append((fault, follower.node_id, time.monotonic() - t0))
            elif fault == "kill-majority":
                follower = self.rng.choice(self.cluster.followers(leader))
                leader.kill()
                follower.kill()
                t0 = time.monotonic()
                follower.start()
                leader.start()
                self.moved_on(before, fault)
                self.log.append((fault, f"{leader.node_id}+{follower.node_id}", time.monotonic() - t0))
            elif fault == "pause-follower":
                follower = self.rng.choice(self.cluster.followers(leader))
                follower.pause()
                t0 = time.monotonic()
                try:
                    self.moved_on(before, fault)
                    eventually(lambda node=follower.node_id: node not in cluster_status(self.cluster.url)["nodes"],
                               SESSION + 30, 0.2, message="the paused follower's session expired")
                finally:
                    follower.resume()
                self.log.append((fault, follower.node_id, time.monotonic() - t0))
            else:
                raise ValueError(f"unknown fault {fault!r}")
        self.healthy()


def final_state(cluster: Cluster, partitions: int) -> FinalState:
    """What the cluster holds after the run: every checkpointed transaction per partition
    (read from the leader), the group's offsets, and each node's state digest."""
    engine = cluster.connect(timeout=30)
    try:
        rows = {p: [(t.id, tuple(i.decode() for i in t.items))
                    for t in engine.backend.transactions_range(STREAM, p, 0, 2**63 - 1)]
                for p in range(partitions)}
        offsets = {int(p): int(v) for p, v in engine.backend.get_offsets(STREAM, GROUP).items()}
    finally:
        engine.close()
    digests = {n.node_id: str(n.state()["digest"]) for n in cluster.nodes}
    return FinalState(rows, offsets, digests)
