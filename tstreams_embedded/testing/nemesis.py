"""Seeded nemesis runs over an in-process cluster (:mod:`.memory_cluster`), with a checker.

One run starts a cluster of real nodes over the in-memory coordinator and network, writes
unique items one at a time through whichever node leads, and meanwhile applies faults drawn
from a seeded random generator: the leader isolated (both ways, or cut from its followers
only, one way), a follower partitioned, a session expired, a node cut from ZooKeeper,
frames lost, duplicated and reordered, a node stopped and restarted on its disk, one node's
clocks jumped (wall clock forward or back, monotonic clock forward), and the leader paused for
longer than its session (clocks frozen, cut from its peers and from ZooKeeper without being
told, its session expired meanwhile; on resuming, a stale client's write reaches it before it
learns the session was lost), a node's log fsync failing (EIO) until it is restarted, and
the leader crashing (log entries it had not synced lost).
After each acknowledgement the write is read back from the
serving leader (the one that acknowledged it, or the next one). Then it heals everything and
checks:

* every acknowledged write is present exactly once on every node, with the transaction ID
  it was acknowledged with; no item is present twice (acknowledged or not);
* per partition, acknowledged IDs increase in acknowledgement order;
* a read issued after an acknowledgement, on a serving leader (the one that acknowledged or
  a later one), returns the write;
* no two nodes acknowledged in one epoch;
* all nodes reach the same state digest.

The schedule of faults comes from the seed. Run from here, the nodes' threads run on the
real clock, so a run is *not* replayed step for step; a failing seed is re-run with::

    python -m tstreams_embedded.testing.nemesis --seed N

Given a simulated ``runtime`` and ``clock`` (:mod:`.simulation` passes its
:class:`~.scheduler.Scheduler`), the same run is deterministic: the seed fixes every
interleaving, and :mod:`.simulation` replays it exactly.
"""

from __future__ import annotations

import argparse
import logging
import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..cluster.node import Node
from ..cluster.runtime import REAL, Runtime
from ..cluster.timesource import TimeSource
from .memory_cluster import MemoryCluster
from .network import Faults

STREAM = "sim"
PARTITIONS = 2
SESSION_TIMEOUT = 1.0  # seconds (the least a node accepts)
ACK_TIMEOUT = 2.0


@dataclass
class RunResult:
    seed: int
    acked: int = 0
    unknown: int = 0
    faults: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    kinds: list[str] = field(default_factory=list)  # the faults drawn from (empty: all)
    #: per fault: seconds from its start to the next acknowledgement before the next fault
    #: began (None: none), and how long that span was
    recoveries: list[float | None] = field(default_factory=list)
    spans: list[float] = field(default_factory=list)
    fault_count: int = 4
    nodes: int = 3

    @property
    def replay(self) -> str:
        """The one command that re-runs this seed's schedule."""
        only = "".join(f" --kind {k}" for k in self.kinds)
        return (f"python -m tstreams_embedded.testing.nemesis --seed {self.seed} --faults {self.fault_count} "
                f"--nodes {self.nodes}{only}")


def _fault(c: MemoryCluster, rng: random.Random, kinds: Sequence[str]) -> tuple[str, Any]:
    """Apply one fault of one of ``kinds``; return its name and the function that heals it."""
    leader = next((n for n in c.nodes.values() if n.serving()), None)
    lead = leader.node_id if leader is not None else rng.choice(c.ids)
    others = c.others(lead)
    kind = rng.choice(list(kinds))
    if kind == "clock-jump":
        node = rng.choice(c.ids)
        seconds = rng.choice([-1, 1]) * rng.uniform(0.5, 3.0) * c.session_timeout
        c.times[node].jump(seconds)
        return f"{kind} {node} {seconds:+.1f}s", lambda: None
    if kind == "failing-fsync":
        node = lead if rng.random() < 0.5 else rng.choice(others)
        c.disks[node].failing = True

        def restart_failed() -> None:
            c.disks[node].failing = False
            running = c.nodes.get(node)
            if running is not None and running.log.failed is not None:
                c.crash(node)  # what it could not sync is lost; it restarts on what is left
                c.start(node)

        return f"{kind} {node}", restart_failed
    if kind == "pause-leader":
        if lead not in c.nodes:
            return f"{kind} {lead} (not running)", lambda: None
        c.pause(lead)
        return f"{kind} {lead}", lambda: None  # resumed by the run (a stale client writes first)
    if kind == "isolate-leader":
        c.network.isolate(lead, others)
        return kind, c.network.heal
    if kind == "leader-cut-from-followers-one-way":
        c.network.partition(others, [lead], both_ways=False)  # the followers' requests are lost
        return kind, c.network.heal
    if kind == "partition-follower":
        f = rng.choice(others)
        c.network.isolate(f, c.others(f))
        return f"{kind} {f}", c.network.heal
    if kind == "expire":
        node = rng.choice(c.ids)
        if node in c.nodes:
            c.zk.expire(node)
        return f"{kind} {node}", lambda: None
    if kind == "cut-from-zookeeper":
        node = lead if node_running(c, lead) else rng.choice(c.ids)

        def heal_zk() -> None:
            if node in c.nodes:
                c.zk.expire(node)  # out longer than the session: it expired meanwhile
                c.zk.heal(node)

        if node in c.nodes:
            c.zk.cut(node)
        return f"{kind} {node}", heal_zk
    if kind == "lossy-network":
        c.network.set_faults(Faults(drop=0.2, duplicate=0.2, reorder=0.3, delay=(0.0, 0.02)))
        return kind, c.network.heal
    node = rng.choice(others) if kind == "restart-follower" else lead
    if node in c.nodes:
        if kind == "crash-leader":
            c.crash(node)
        else:
            c.stop(node)
    return f"{kind} {node}", lambda: None if node in c.nodes else c.start(node)


KINDS = ["isolate-leader", "leader-cut-from-followers-one-way", "partition-follower", "expire",
         "cut-from-zookeeper", "lossy-network", "restart-follower", "restart-leader", "clock-jump", "pause-leader",
         "failing-fsync", "crash-leader"]


def node_running(c: MemoryCluster, node_id: str) -> bool:
    return node_id in c.nodes


def read_back(node: Node, unread: list[tuple[bytes, int, int]], problems: list[str]) -> None:
    """Read each acknowledged write of ``unread`` (``(item, partition, txn id)``, oldest first)
    on ``node``, a serving leader, removing it: a write not found as acknowledged is a problem.
    Stops, leaving the rest, if ``node`` stopped serving during a read (it is read on the next one)."""
    while unread:
        item, partition, txn_id = unread[0]
        got = node.core.get_transaction(STREAM, partition, txn_id)
        if not node.serving():
            return
        unread.pop(0)
        if got is None or [bytes(i) for i in got.items] != [item]:
            problems.append(f"{node.node_id} (epoch {node.epoch}) read ID {txn_id} of partition {partition} "
                            f"after its acknowledgement as {got and got.items}, not [{item!r}]")


def _serving(c: MemoryCluster) -> Node | None:
    """A node serving as leader that is not paused (a paused process takes no requests)."""
    return next((n for i, n in c.nodes.items() if n.serving() and i not in c.paused), None)


def run(seed: int, root: str, faults: int = 4, nodes: int = 3, kinds: Sequence[str] = (), *,
        runtime: Runtime = REAL, clock: TimeSource | None = None, map_size: int | None = None,
        pace: float = 0.0) -> RunResult:
    """One run (see the module docstring) in directory ``root``, its faults drawn from
    ``kinds`` (by default all of :data:`KINDS`). ``runtime`` and ``clock``: the nodes' and
    the workload's threads, waits and clocks (real by default; :mod:`.simulation` passes
    simulated ones, which makes the run deterministic); ``map_size``: each engine's map;
    ``pace``: seconds the client waits after each write (0: none)."""
    unknown_kinds = set(kinds) - set(KINDS)
    if unknown_kinds:
        raise ValueError(f"unknown fault kinds {sorted(unknown_kinds)}; they are {KINDS}")
    kinds = list(kinds) or KINDS
    rng = random.Random(seed)
    result = RunResult(seed, kinds=list(kinds) if kinds != KINDS else [], fault_count=faults, nodes=nodes)
    acked: list[tuple[bytes, int, int]] = []  # (item, partition, txn id) in acknowledgement order
    epochs: dict[int, set[str]] = {}
    unread: list[tuple[bytes, int, int]] = []  # acknowledged, not yet read back
    ack_times: list[float] = []  # when each acknowledgement came (runtime clock)
    now = runtime.monotonic
    with MemoryCluster(root, nodes, seed=seed, session_timeout=SESSION_TIMEOUT, ack_timeout=ACK_TIMEOUT,
                       runtime=runtime, clock=clock, cluster_id=f"cluster-{seed}", map_size=map_size) as c:
        c.create_stream(STREAM, PARTITIONS)
        seq = 0

        def write_once(leader: Node) -> None:
            nonlocal seq
            seq += 1
            item = b"w%d" % seq
            partition = seq % PARTITIONS
            epoch = leader.epoch
            try:
                txn_id = c.instant(STREAM, partition, [item], node=leader)
            except errors.TStreamsError:
                result.unknown += 1
                return
            acked.append((item, partition, txn_id))
            ack_times.append(now())
            unread.append((item, partition, txn_id))
            if epoch and leader.epoch == epoch:
                epochs.setdefault(epoch, set()).add(leader.node_id)

        def write(until: float) -> None:
            while now() < until:
                leader = _serving(c)
                if leader is None:
                    runtime.sleep(0.01)  # (a simulated client's back-off, not a synchronisation)
                    continue
                read_back(leader, unread, result.problems)
                write_once(leader)
                read_back(leader, unread, result.problems)
                if pace:
                    runtime.sleep(pace)

        def resume_paused() -> None:
            for node_id in sorted(c.paused):
                c.resume(node_id)
                if node_id in c.nodes:
                    # stale clients reach it before it hears of its session: a read of the
                    # newest acknowledged write (made elsewhere while it was paused), and a write
                    node = c.nodes[node_id]
                    if acked and node.serving():
                        read_back(node, [acked[-1]], result.problems)
                    write_once(node)
                    c.zk.resume(node_id)

        fault_times: list[float] = []
        for _ in range(faults):
            write(now() + rng.uniform(0.1, 0.4))
            fault_times.append(now())
            name, heal = _fault(c, rng, kinds)
            result.faults.append(name)
            # faults last 0.6-1.2 session timeouts (a pause longer than the session, so its lease lapses)
            least = 1.1 if name.startswith("pause-leader") else 0.6
            write(now() + rng.uniform(least, 1.2) * SESSION_TIMEOUT)
            resume_paused()
            heal()
        c.network.heal()
        for node_id in c.ids:
            if node_id not in c.nodes:
                c.start(node_id)
            c.zk.heal(node_id)
        write(now() + 0.3)
        c.converged(timeout=30)
        leader = c.leader()
        read_back(leader, unread, result.problems)
        if unread:
            result.problems.append(f"{len(unread)} acknowledged writes were never read back on a serving leader")
        result.acked = len(acked)
        ends = [*fault_times[1:], now()] if fault_times else []
        result.spans = [end - start for start, end in zip(fault_times, ends, strict=True)]
        result.recoveries = [next((t - start for t in ack_times if start <= t < end), None)
                             for start, end in zip(fault_times, ends, strict=True)]
        _check(c, acked, epochs, result)
    return result


def _check(c: MemoryCluster, acked: list[tuple[bytes, int, int]], epochs: dict[int, set[str]],
           result: RunResult) -> None:
    for epoch, leaders in epochs.items():
        if len(leaders) > 1:
            result.problems.append(f"epoch {epoch} was acknowledged by {sorted(leaders)}")
    last: dict[int, int] = {}
    for item, partition, txn_id in acked:
        if txn_id <= last.get(partition, -1):
            result.problems.append(f"partition {partition}: ID {txn_id} of {item!r} after {last[partition]}")
        last[partition] = txn_id
    for node_id, node in c.nodes.items():
        where: dict[bytes, list[int]] = {}
        for p in range(PARTITIONS):
            for t in node.core.transactions_range(STREAM, p, 0, 2**63 - 1):
                for it in t.items:
                    where.setdefault(bytes(it), []).append(t.id)
        for item, ids in where.items():
            if len(ids) > 1:
                result.problems.append(f"{node_id}: {item!r} present {len(ids)} times")
        for item, _, txn_id in acked:
            if where.get(item) != [txn_id]:
                result.problems.append(f"{node_id}: acknowledged {item!r} (ID {txn_id}) found as {where.get(item)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--faults", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--kind", action="append", default=[], choices=KINDS,
                        help="draw faults only of this kind (repeatable; by default all)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR)
    with tempfile.TemporaryDirectory() as root:
        result = run(args.seed, root, args.faults, args.nodes, args.kind)
    print(f"seed {result.seed}: {result.acked} acknowledged, {result.unknown} unknown; faults: "
          f"{', '.join(result.faults)}")
    for problem in result.problems:
        print("PROBLEM:", problem)
    if result.problems:
        print("replay with:", result.replay)
    return 1 if result.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
