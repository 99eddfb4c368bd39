"""The exactly-once-into-SQLite recipe of docs/RECIPES.md, SIGKILLed mid-run: the table
ends up holding every input item exactly once."""

from __future__ import annotations

import collections
import random
import sqlite3
import time

import pytest

import tstreams_embedded as ts
from tstreams_embedded.testing import kill_process as kill

from .procs import run_worker, start_worker
from .workers import load_recipe

pytestmark = pytest.mark.slow


def _stored(db_path: str) -> int:
    """How many transactions the sink has committed so far (read concurrently: WAL)."""
    try:
        db = sqlite3.connect(db_path, timeout=10)
        try:
            return db.execute("SELECT COUNT(DISTINCT txn_id) FROM events").fetchone()[0]
        finally:
            db.close()
    except sqlite3.OperationalError:  # the sink has not created its tables yet
        return 0


def test_recipe_in_process(tmp_path) -> None:
    recipe = load_recipe()
    db_path = str(tmp_path / "out.sqlite3")
    with ts.open(tmp_path / "data") as engine:
        engine.create_stream("events", partitions=2)
        producer = engine.producer("events")
        ids = [producer.instant([b"a%d" % i, b"b%d" % i]) for i in range(20)]
        recipe["run"](engine, "events", db_path, stop_when_idle=True)
        recipe["run"](engine, "events", db_path, stop_when_idle=True)  # a restart adds nothing
        producer.instant([b"late"], partition=1)
        recipe["run"](engine, "events", db_path, stop_when_idle=True)
    db = sqlite3.connect(db_path)
    items = [r[0] for r in db.execute("SELECT item FROM events ORDER BY partition, txn_id, seq")]
    assert sorted(items) == sorted([b"a%d" % i for i in range(20)] + [b"b%d" % i for i in range(20)] + [b"late"])
    offsets = dict(db.execute("SELECT partition, txn_id FROM tstreams_offsets"))
    assert offsets[0] == max(ids[0::2]) and offsets[1] > max(ids[1::2])
    db.close()


def test_recipe_survives_sigkill(tmp_path) -> None:
    path = str(tmp_path / "data")
    db_path = str(tmp_path / "out.sqlite3")
    inputs: list[bytes] = []
    with ts.open(path, durability="async") as engine:
        engine.create_stream("events", partitions=3)
        producer = engine.producer("events")
        for i in range(3000):
            items = [b"e%d-%d" % (i, j) for j in range(1 + i % 4)]
            inputs.extend(items)
            producer.instant(items)
    rng = random.Random(3)
    interrupted = 0
    for _ in range(8):
        proc = start_worker("sqlite_sink", path, db_path, "events")
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        # kill it once it stored a random number of further transactions, a random instant later
        target = _stored(db_path) + rng.randint(1, 300)
        while _stored(db_path) < target and proc.poll() is None:
            time.sleep(0.001)
        time.sleep(rng.uniform(0.0, 0.005))
        kill(proc)
        lines = proc.stdout.read().splitlines()
        proc.stdout.close()
        proc.stderr.close()
        if "done" in lines:
            break
        interrupted += 1
    assert "done" in run_worker("sqlite_sink", path, db_path, "events")
    assert interrupted >= 5, "the sink should have been killed mid-run several times"
    db = sqlite3.connect(db_path)
    counts = collections.Counter(r[0] for r in db.execute("SELECT item FROM events"))
    db.close()
    expected = collections.Counter(inputs)
    assert counts == expected, (
        f"missing {sum((expected - counts).values())}, duplicated {sum((counts - expected).values())}"
    )
