"""Deterministic simulation (tstreams_embedded.testing.simulation): real nodes on real engines
under one seeded scheduler with a simulated clock. The same seed replays the same schedule
(equal trace hashes, also across processes and hash seeds); every seed's run passes the
nemesis checker, and a failure names the one command that replays it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tstreams_embedded.testing.scheduler import Deadlock, Scheduler
from tstreams_embedded.testing.simulation import SimResult, simulate

#: seeds run by ``make test`` (about 0.15 s of CPU each); every tenth on five nodes
QUICK_SEEDS = range(1, 501)
#: seeds run under ``-m soak``
SOAK_SEEDS = range(10_000, 20_000)


def check(result: SimResult) -> None:
    assert result.acked > 0, f"seed {result.seed}: nothing was acknowledged; replay with: {result.replay}"
    assert not result.problems, (f"seed {result.seed}, faults {result.faults}: {result.problems[:10]}; "
                                 f"replay with: {result.replay}")


def test_a_seed_replays_the_same_schedule() -> None:
    first, second = simulate(7), simulate(7)
    assert first.steps > 500
    assert (first.trace, first.steps, first.faults, first.acked) == (second.trace, second.steps, second.faults,
                                                                      second.acked)


def test_different_seeds_give_different_schedules() -> None:
    traces = {simulate(seed).trace for seed in (7, 8, 9)}
    assert len(traces) == 3


def test_the_replay_command_replays_the_run_in_another_process() -> None:
    """The printed command gives the same trace in a new process, whatever its hash seed."""
    here = simulate(3)
    assert here.replay.startswith("PYTHONHASHSEED=")
    env_words, *command = here.replay.split(" ", 1)
    outputs = []
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, *command[0].split()[1:]], env=env, capture_output=True, text=True,
                             timeout=120, check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        outputs.append(out.stdout)
    assert outputs[0] == outputs[1]
    assert f"trace {here.trace[:16]}" in outputs[0]


def test_a_failing_seed_names_its_replay_command() -> None:
    result = SimResult(5, problems=["lost"], acked=1, replay="PYTHONHASHSEED=0 python -m x --seed 5")
    with pytest.raises(AssertionError, match="replay with: PYTHONHASHSEED=0 python -m x --seed 5"):
        check(result)


def test_the_scheduler_reports_a_deadlock() -> None:
    sched = Scheduler(1)

    def main() -> None:
        sched.event().wait()  # nobody sets it, no deadline

    with pytest.raises(Deadlock, match="without a deadline"):
        sched.run(main)


def test_the_scheduler_jumps_the_clock_to_the_next_deadline() -> None:
    sched = Scheduler(1)
    seen: list[float] = []

    def main() -> None:
        sched.spawn("sleeper", lambda: (sched.sleep(30.0), seen.append(sched.monotonic()))).join()

    sched.run(main)
    assert seen and 30.0 <= seen[0] < 30.01


@pytest.mark.parametrize("seed", QUICK_SEEDS)
def test_simulated_seed(seed: int) -> None:
    check(simulate(seed, nodes=5 if seed % 10 == 0 else 3))


@pytest.mark.soak
@pytest.mark.parametrize("seed", SOAK_SEEDS)
def test_simulated_seed_soak(seed: int) -> None:
    check(simulate(seed, faults=4, nodes=5 if seed % 5 == 0 else 3))
