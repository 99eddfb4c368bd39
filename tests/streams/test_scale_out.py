"""Scale-out: 3 real processes share an application's tasks through leases in the engine;
they are SIGKILLed, restarted and paused (SIGSTOP longer than the lease: a zombie whose
tasks moved) at random while they work. Output and stores must equal the model exactly:
no missing, no duplicate, no wrong record, through every rebalance.

Two deployments: the processes open one engine directory (kills and restarts: LMDB's robust
lock survives a process killed inside a write), or they connect to one ``tstreams serve``
(kills, restarts and pauses). Pauses are not tried on a shared directory: a process stopped
while it holds LMDB's write lock stops every writer of the directory until it resumes (that
is LMDB's design, not the leases')."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded.streams.app_members import read_group
from tstreams_embedded.testing import ServeProcess, eventually

from .harness import WorkerProcess, chunks, committed_transactions
from .views_pipeline import check_output, expected_totals, make_events, totals_store, views_input

WORKER = Path(__file__).resolve().parent / "scale_worker.py"
PAGES = [f"/p{i}" for i in range(12)] + ["/health"]
USERS = ["u1", "u2", "u3", "u4"]
PARTITIONS = 6


class Worker(WorkerProcess):
    def __init__(self, data: str) -> None:  # an engine directory, or a tcp:// endpoint
        super().__init__(WORKER, data)
        self.port = int(self.started[1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rounds", [6, pytest.param(12, marks=pytest.mark.soak)])  # (seed 13: every action by 5)
@pytest.mark.parametrize("deployment", ["directory", "served"])
def test_three_processes_killed_restarted_and_paused_exactly_once(tmp_path: Path, deployment: str,
                                                                  rounds: int) -> None:
    rng = random.Random(int(os.environ.get("SCALE_OUT_SEED", "13")))
    data = str(tmp_path / "data")
    if deployment == "served":
        server = ServeProcess(data, tmp_path / "serve")
        server.start()
        try:
            with server.connect() as engine:
                run_scenario(engine, server.endpoint, rng, ["kill", "kill-restart", "pause"], rounds)
        finally:
            server.stop()
    else:
        with ts.open(data, compaction_interval=None) as engine:
            run_scenario(engine, data, rng, ["kill", "kill-restart"], rounds)


def run_scenario(engine: ts.Engine, target: str, rng: random.Random, actions: list[str], rounds: int) -> None:
    data = target
    events = make_events(rng, 4000, PAGES, USERS)
    ops, by_partition = views_input(events, PARTITIONS)
    workers: list[Worker] = []
    engine.create_stream("views", partitions=PARTITIONS)
    total = len(ops)
    parts = chunks(ops, rounds + 1)

    def processed() -> int:
        return committed_transactions(engine, "views", "scale")

    events_log = []
    try:
        workers = [Worker(data) for _ in range(3)]
        for rnd in range(rounds):
            engine.backend.submit(parts[rnd])
            before = processed()
            eventually(lambda b=before: processed() > b, timeout=60, message="no progress")
            live = [w for w in workers if w.alive()]
            victim = rng.choice(live)
            action = rng.choice(actions) if len(live) > 1 else "kill-restart"
            if action == "pause":  # longer than the lease: its tasks move; then it resumes as a zombie
                theirs = members_on(engine, victim.port)
                victim.signal(signal.SIGSTOP)
                eventually(lambda t=theirs: all_moved_away(engine, t), timeout=60,
                           message="the paused instance's tasks did not move")
                victim.signal(signal.SIGCONT)
            else:
                victim.kill()
                workers.remove(victim)
                if action == "kill-restart" or len(workers) < 2:
                    workers.append(Worker(data))
            events_log.append(action)
        while len(workers) < 3:
            workers.append(Worker(data))
        engine.backend.submit(parts[rounds])
        print("actions:", events_log)

        totals, expected = totals_store(engine, "scale", PARTITIONS), expected_totals(events)
        eventually(lambda: processed() == total and totals.all() == expected, timeout=120,
                   message="the survivors did not finish the input")
        eventually(lambda: len(read_group(engine.backend, "scale", 1000).members) == 3 and
                   all_moved_away(engine, set()), timeout=60, message="the group did not settle")
    finally:
        for w in workers:
            w.kill()

    check_output(engine, "scale", PARTITIONS, events, by_partition)
    assert set(events_log) == set(actions)


def members_on(engine: ts.Engine, port: int) -> set[str]:
    """The live members serving queries on ``port`` (one worker process)."""
    return {m for m, info in read_group(engine.backend, "scale", 1000).members.items() if info.port == port}


def all_moved_away(engine: ts.Engine, members: set[str]) -> bool:
    """Every task is held by a live member outside ``members``."""
    view = read_group(engine.backend, "scale", 1000)
    return all((o := view.owner(p)) is not None and o not in members for p in range(PARTITIONS))
