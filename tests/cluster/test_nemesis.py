"""Seeded nemesis runs over an in-process cluster (tstreams_embedded.testing.nemesis): faults
(partitions either way, the leader cut from its followers only, session expiry, a node cut
from ZooKeeper, loss/duplication/reordering, restarts on disk, clock jumps, the leader paused
for longer than its session, a failing fsync, a crash losing unsynced log entries) while one
client writes and reads each acknowledged write back; the checker's findings are the failure
message, with the command that re-runs the seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tstreams_embedded.testing.memory_cluster import MemoryCluster
from tstreams_embedded.testing.nemesis import STREAM, read_back, run


def check(seed: int, root: Path, faults: int, kinds: tuple[str, ...] = ()) -> None:
    result = run(seed, str(root), faults=faults, kinds=kinds)
    assert result.acked > 0, f"nothing was acknowledged; re-run with: {result.replay}"
    assert not result.problems, (f"faults {result.faults}: {result.problems[:10]}; "
                                 f"re-run with: {result.replay}")


#: seeds of faults of every kind run by ``make test`` (about 4-5 s each on two cores; see docs/CLUSTER.md).
#: Together they draw all 12 kinds of :data:`~tstreams_embedded.testing.nemesis.KINDS` (seed 1:
#: leader-cut-from-followers-one-way, restart-leader, expire; 2: isolate-leader, crash-leader,
#: cut-from-zookeeper; 3: clock-jump, pause-leader, cut-from-zookeeper; 9: lossy-network, failing-fsync,
#: leader-cut-from-followers-one-way; 10: restart-follower, restart-leader, partition-follower).
QUICK_SEEDS = (1, 2, 3, 9, 10)
#: seeds run under ``-m soak``: the other seeds of 3 faults ``make test`` ran before, and 1,000 of 6
#: faults (about 8.5 s each: some two and a half hours)
SOAK_QUICK_SEEDS = (4, 5, 6, 7, 8, 11, 12)
SOAK_SEEDS = range(1000, 2000)


@pytest.mark.parametrize("seed", QUICK_SEEDS)
def test_nemesis_seed(seed: int, tmp_path: Path) -> None:
    check(seed, tmp_path, faults=3)


@pytest.mark.parametrize("seed", [11])
def test_nemesis_clock_jumps(seed: int, tmp_path: Path) -> None:
    check(seed, tmp_path, faults=3, kinds=("clock-jump",))


@pytest.mark.parametrize("seed", [21])
def test_nemesis_leader_paused_longer_than_its_session(seed: int, tmp_path: Path) -> None:
    check(seed, tmp_path, faults=2, kinds=("pause-leader",))


@pytest.mark.parametrize("seed", [31])
def test_nemesis_failing_fsync(seed: int, tmp_path: Path) -> None:
    check(seed, tmp_path, faults=3, kinds=("failing-fsync",))


@pytest.mark.parametrize("seed", [41])
def test_nemesis_leader_crash_loses_what_it_had_not_synced(seed: int, tmp_path: Path) -> None:
    check(seed, tmp_path, faults=3, kinds=("crash-leader",))


def test_read_back_reports_an_acknowledged_write_the_leader_does_not_return(tmp_path: Path) -> None:
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream(STREAM, 2)
        txn_id = c.instant(STREAM, 0, [b"x"])
        problems: list[str] = []
        unread = [(b"x", 0, txn_id), (b"lost", 1, txn_id)]
        read_back(c.leader(), unread, problems)
        assert unread == []
        assert len(problems) == 1 and "b'lost'" in problems[0], problems


def test_replay_command_names_the_seed_and_the_kinds(tmp_path: Path) -> None:
    result = run(5, str(tmp_path), faults=0, kinds=("clock-jump",))
    assert result.replay == ("python -m tstreams_embedded.testing.nemesis --seed 5 --faults 0 --nodes 3 "
                             "--kind clock-jump")
    with pytest.raises(ValueError, match="unknown fault kinds"):
        run(5, str(tmp_path), faults=0, kinds=("meteor",))


@pytest.mark.soak
@pytest.mark.parametrize("seed", SOAK_QUICK_SEEDS)
def test_nemesis_seed_soak(seed: int, tmp_path: Path) -> None:
    check(seed, tmp_path, faults=3)


@pytest.mark.soak
@pytest.mark.parametrize("seed", SOAK_SEEDS)
def test_nemesis_soak(seed: int, tmp_path: Path) -> None:
    check(seed, tmp_path, faults=6)
