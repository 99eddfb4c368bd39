"""Exactly-once under SIGKILL: a real subprocess runs a windowed pipeline and is killed 8
times (20 under ``-m soak``) at random points; the output and the stores must equal the model
exactly."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import tstreams_embedded as ts

from .harness import chunks, committed_transactions, kill_at_random_points, run_to_completion, worker_command
from .views_pipeline import check_output, make_events, views_input

WORKER = Path(__file__).resolve().parent / "kill_worker.py"
PAGES = ["/a", "/b", "/c", "/d", "/e", "/health"]
USERS = ["u1", "u2", "u3"]
PARTITIONS = 2


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kills", [8, pytest.param(20, marks=pytest.mark.soak)])
def test_pipeline_survives_sigkills_exactly_once(tmp_path: Path, kills: int) -> None:
    rng = random.Random(12)
    data = str(tmp_path / "data")
    events = make_events(rng, 3000, PAGES, USERS)
    ops, by_partition = views_input(events, PARTITIONS)
    with ts.open(data, compaction_interval=None) as engine:
        engine.create_stream("views", partitions=PARTITIONS)
        # the input arrives in chunks, one per kill (and the last one after them)
        parts = chunks(ops, kills + 1)
        progress = kill_at_random_points(engine, worker_command(WORKER, data, "run"), parts[:kills],
                                         lambda: committed_transactions(engine, "views", "kill"), rng)
        print("input transactions committed at the kills:", progress, "of", len(ops))
        assert progress == sorted(progress) and len(set(progress)) == kills  # progress before every kill
        engine.backend.submit(parts[kills])
        run_to_completion(worker_command(WORKER, data, "finish"))
        assert committed_transactions(engine, "views", "kill") == len(ops)
        check_output(engine, "kill", PARTITIONS, events, by_partition)
