"""Deterministic simulation of a cluster: the seeded nemesis runs of :mod:`.nemesis`, on
real :class:`~tstreams_embedded.cluster.node.Node` objects and real engines, but under one
seeded :class:`~.scheduler.Scheduler` with a simulated clock instead of free threads.

Every node's tasks (replication, follower, applier, coordinator loop, election), the
in-memory ZooKeeper and network, and the workload that writes and reads back run one at a
time, in an order drawn from the seed; time is simulated (a run of several simulated seconds
takes a fraction of a second), and the same seed replays the same run step for step
(:attr:`SimResult.trace`: a hash of every step). The faults and the checker are those of
:mod:`.nemesis`. A failing seed is replayed exactly with::

    PYTHONHASHSEED=0 python -m tstreams_embedded.testing.simulation --seed N

(the hash seed fixes the order of Python's sets of strings, which some code iterates).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from . import nemesis
from .memory_cluster import MemoryCluster
from .scheduler import Scheduler

T = TypeVar("T")

#: Engine map size of a simulated node (bytes): small, the runs write little.
MAP_SIZE = 32 << 20
#: Faults per run in ``make test``.
FAULTS = 2
#: How often a task is held back (up to 5 ms) before it takes a lock: more interleavings.
LOCK_PREEMPT = 0.02
#: Liveness: after any fault a write is acknowledged within the session timeout + 1 s (#20),
#: judged where the next fault did not begin earlier
RECOVERY = nemesis.SESSION_TIMEOUT + 1.0
#: Simulated seconds the client waits after each write (a run acknowledges some hundred writes).
PACE = 0.05


@dataclass
class SimResult:
    seed: int
    faults: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    acked: int = 0
    unknown: int = 0
    trace: str = ""  # hash of the schedule (every step: task and simulated time)
    steps: int = 0
    simulated_seconds: float = 0.0
    replay: str = ""
    #: simulated seconds from each fault's start to the next acknowledgement
    recoveries: list[float | None] = field(default_factory=list)


def scratch_root() -> str:
    """A directory for a run's data: in memory (``/dev/shm``) where there is one."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="tstreams-sim-", dir=base)


def replay_command(seed: int, faults: int, nodes: int, kinds: Sequence[str]) -> str:
    only = "".join(f" --kind {k}" for k in kinds)
    hash_seed = os.environ.get("PYTHONHASHSEED", "0")
    return (f"PYTHONHASHSEED={hash_seed} python -m tstreams_embedded.testing.simulation --seed {seed} "
            f"--faults {faults} --nodes {nodes}{only}")


def simulate(seed: int, faults: int = FAULTS, nodes: int = 3, kinds: Sequence[str] = (),
             root: str | None = None) -> SimResult:
    """One deterministic run (see the module docstring); its data in ``root`` (by default a
    fresh scratch directory, removed afterwards)."""
    own = root is None
    where = scratch_root() if root is None else root
    sched = Scheduler(seed, lock_preempt_chance=LOCK_PREEMPT)
    try:
        run = sched.run(lambda: nemesis.run(seed, where, faults, nodes, kinds, runtime=sched, clock=sched,
                                            map_size=MAP_SIZE, pace=PACE))
    finally:
        if own:
            shutil.rmtree(where, ignore_errors=True)
    result = SimResult(seed, run.faults, list(run.problems), run.acked, run.unknown, sched.trace_digest,
                       sched.steps, sched.now, replay_command(seed, faults, nodes, kinds), run.recoveries)
    result.problems += [f"task {name} failed: {exc!r}" for name, exc in sched.errors]
    for fault, took, span in zip(run.faults, run.recoveries, run.spans, strict=True):
        if (took is None and span >= RECOVERY) or (took is not None and took > RECOVERY):
            result.problems.append(f"liveness: no write acknowledged within {RECOVERY:g} s of {fault} "
                                   f"({'none' if took is None else f'the first after {took:.2f} s'})")
    return result


def scenario(seed: int, body: Callable[[MemoryCluster, Scheduler], T], nodes: int = 3,
             session_timeout: float = nemesis.SESSION_TIMEOUT, preempt_delays: dict[str, float] | None = None,
             cluster_id: str | None = None, root: str | None = None) -> T:
    """Run ``body(cluster, scheduler)`` under a new :class:`~.scheduler.Scheduler` of
    ``seed``, on a :class:`~.memory_cluster.MemoryCluster` of ``nodes`` simulated nodes (a
    scripted schedule); return what it returns. ``preempt_delays``: see :class:`Scheduler`."""
    own = root is None
    where = scratch_root() if root is None else root
    sched = Scheduler(seed, preempt_delays=preempt_delays)

    def main() -> T:
        with MemoryCluster(where, nodes, seed=seed, session_timeout=session_timeout, ack_timeout=nemesis.ACK_TIMEOUT,
                           runtime=sched, clock=sched, cluster_id=cluster_id or f"cluster-{seed}",
                           map_size=MAP_SIZE) as c:
            return body(c, sched)

    try:
        result: T = sched.run(main)
    finally:
        if own:
            shutil.rmtree(where, ignore_errors=True)
    if sched.errors:
        raise AssertionError(f"simulated tasks failed: {sched.errors}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--faults", type=int, default=FAULTS)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--kind", action="append", default=[], choices=nemesis.KINDS,
                        help="draw faults only of this kind (repeatable; by default all)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR)
    result = simulate(args.seed, args.faults, args.nodes, args.kind)
    print(f"seed {result.seed}: {result.acked} acknowledged, {result.unknown} unknown; faults: "
          f"{', '.join(result.faults)}; {result.steps} steps, {result.simulated_seconds:.2f} simulated s; "
          f"trace {result.trace[:16]}")
    for problem in result.problems:
        print("PROBLEM:", problem)
    if result.problems:
        print("replay with:", result.replay)
    return 1 if result.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
