"""The Jepsen-style test: clients write and a consumer group reads while a nemesis SIGKILLs
and SIGSTOPs node processes of a real 3-node cluster (real ZooKeeper, session 3 s); then the
history and every node's final state are checked (:mod:`tstreams_embedded.testing.history`).

* ``test_jepsen`` (``make test``): 6 leader SIGKILLs, 2 leader SIGSTOPs past the session timeout,
  2 follower SIGKILLs (each killed node restarted), 3 writers, 1 consumer group — under a minute.
* ``test_jepsen_30_faults`` (``-m soak``): the same plan with 20 leader SIGKILLs, 5 leader SIGSTOPs
  and 5 follower SIGKILLs — a few minutes.
* ``test_jepsen_soak`` (``-m soak``, not in ``make test``): 5 times as many faults, plus
  leader-and-follower SIGKILLs at once (no quorum) and follower SIGSTOPs, without waiting
  for followers to catch up between faults; 4 writers, 3 partitions.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tstreams_embedded.testing import ZooKeeperServer, eventually
from tstreams_embedded.testing.history import FinalState, History, check, report, spanning

from .conftest import Cluster
from .workload import STREAM, Nemesis, Plan, Reader, Writer, final_state


def run_jepsen(zk: ZooKeeperServer, root: Path, plan: Plan) -> tuple[History, FinalState, list[str], Nemesis]:
    cluster = Cluster(zk, root).start()
    history = History()
    stop, finish = threading.Event(), threading.Event()
    writers: list[Writer] = []
    reader: Reader | None = None
    nemesis = Nemesis(cluster, lambda: history.counts()["ok"], plan.seed, plan.settle)
    try:
        cluster.leader()
        admin = cluster.connect(timeout=30)
        admin.create_stream(STREAM, partitions=plan.partitions)
        admin.close()
        writers = [Writer(f"w{i}", cluster, history, stop, plan.partitions, plan.txn_ttl) for i in range(plan.writers)]
        reader = Reader(cluster, history, finish, plan.partitions)
        for t in [*writers, reader]:
            t.start()
        nemesis.moved_on(0, "start")
        nemesis.run(plan.faults())
        before = history.counts()["ok"]
        nemesis.moved_on(before, "the last fault")  # the healed cluster still takes writes
        stop.set()
        for w in writers:
            w.join(120)
        finish.set()
        reader.join(180)
        for t in [*writers, reader]:
            assert not t.is_alive(), f"{t.name} did not finish"
            assert t.error is None, f"{t.name} failed: {t.error!r}"
        eventually(cluster.converged, 60, 0.1, message="all nodes reach the same state", ignore=(OSError,))
        final = final_state(cluster, plan.partitions)
        violations = check(history, final)
        if violations:
            (root / "history.json").write_text(history.to_json())
        return history, final, violations, nemesis
    finally:
        stop.set()
        finish.set()
        cluster.stop()


def assert_valid(history: History, final: FinalState, violations: list[str], nemesis: Nemesis, plan: Plan) -> None:
    assert not violations, report(violations, history)
    assert set(final.offsets) == set(range(plan.partitions)), final.offsets  # the group checkpointed
    assert len(final.digests) == 3
    counts = history.counts()
    kinds = [fault for fault, _node, _t in nemesis.log]
    assert kinds.count("kill-leader") == plan.leader_kills
    assert kinds.count("pause-leader") == plan.leader_pauses
    assert kinds.count("kill-follower") == plan.follower_kills
    # the run exercised what it claims: many acknowledged writes of both kinds, reads, checkpoints
    ok_kinds = {w.kind for w in history.writes if w.outcome == "ok"}
    assert ok_kinds == {"instant", "txn"}, counts
    assert counts["ok"] >= 10 * (plan.leader_kills + plan.leader_pauses + plan.follower_kills) // 3, counts
    assert counts["reads"] >= counts["ok"] // 2 and counts["checkpoints"] > 0, counts
    assert counts["pending"] == 0, counts
    # open transactions survive failover: some transaction under way while the leader was
    # killed or paused was checkpointed (losing them all would pass the checks above)
    leader_faults = [t for fault, t in nemesis.struck if fault in ("kill-leader", "pause-leader")]
    assert spanning(history.writes, leader_faults, "txn"), "no transaction spanning a leader fault succeeded"


#: ``make test``'s plan: every fault kind of :class:`Plan`'s default, a third as many times
QUICK_PLAN = Plan(leader_kills=6, leader_pauses=2, follower_kills=2)


@pytest.mark.timeout(900)
def test_jepsen(zk: ZooKeeperServer, tmp_path: Path) -> None:
    run_and_check(zk, tmp_path, QUICK_PLAN)


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_jepsen_30_faults(zk: ZooKeeperServer, tmp_path: Path) -> None:
    run_and_check(zk, tmp_path, Plan())


def run_and_check(zk: ZooKeeperServer, root: Path, plan: Plan) -> None:
    t0 = time.monotonic()
    history, final, violations, nemesis = run_jepsen(zk, root, plan)
    assert_valid(history, final, violations, nemesis, plan)
    print(f"jepsen: {history.counts()} in {time.monotonic() - t0:.0f} s; failovers "
          f"{sorted(round(t, 2) for f, _n, t in nemesis.log if f != 'kill-follower')}")


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_jepsen_soak(zk: ZooKeeperServer, tmp_path: Path) -> None:
    plan = Plan(leader_kills=100, leader_pauses=25, follower_kills=25, majority_kills=10, follower_pauses=10,
                writers=4, partitions=3, seed=11, settle=False, txn_ttl=2.0)
    history, final, violations, nemesis = run_jepsen(zk, tmp_path, plan)
    assert_valid(history, final, violations, nemesis, plan)

