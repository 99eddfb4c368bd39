"""Exactly-once under SIGKILL: a real subprocess runs a windowed pipeline and is killed 20
times at random points; the output and the stores must equal the model exactly."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded.engine import ops as O
from tstreams_embedded.streams import Windowed
from tstreams_embedded.streams.records import pack_envelope, partition_of, unpack_envelope
from tstreams_embedded.streams.serdes import MsgpackSerde, WindowedSerde, serde
from tstreams_embedded.streams.stores import ReadOnlyKeyValueStore, ReadOnlyWindowStore, namespace
from tstreams_embedded.testing import eventually
from tstreams_embedded.testing.serve import child_environment

WORKER = Path(__file__).resolve().parent / "kill_worker.py"
PAGES = ["/a", "/b", "/c", "/d", "/e", "/health"]
USERS = ["u1", "u2", "u3"]
PARTITIONS = 2
KILLS = 20


def make_events(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Page views with disorder of up to 40 ms (some late: grace is 20 ms)."""
    return [{"page": rng.choice(PAGES), "user": rng.choice(USERS), "n": i, "ts": i * 7 - rng.randint(0, 40)}
            for i in range(n)]


def model(events_by_partition: dict[int, list[dict[str, Any]]]) -> tuple[dict[Windowed, int], list[Windowed]]:
    """Per input partition (one task each; the windowed count needs no repartition): the
    windows' counts of accepted records and the closed windows."""
    counts: dict[Windowed, int] = {}
    closed: list[Windowed] = []
    for events in events_by_partition.values():
        observed = None
        mine: dict[Windowed, int] = {}
        for e in events:
            if e["page"] == "/health":
                continue
            t = e["ts"]
            observed = t if observed is None else max(observed, t)
            start = t - t % 100
            if start + 100 + 20 > observed:
                w = Windowed(e["page"], start, start + 100)
                mine[w] = mine.get(w, 0) + 1
        counts.update(mine)
        assert observed is not None
        closed.extend(w for w in mine if w.end + 20 <= observed)
    return counts, closed


@pytest.mark.timeout(240)
def test_pipeline_survives_20_sigkills_exactly_once(tmp_path: Path) -> None:
    rng = random.Random(12)
    data = str(tmp_path / "data")
    events = make_events(rng, 3000)
    by_partition: dict[int, list[dict[str, Any]]] = defaultdict(list)
    key_serde, value_serde = serde("str"), serde("json")
    with ts.open(data, compaction_interval=None) as engine:
        engine.create_stream("views", partitions=PARTITIONS)
        batches: dict[int, list[bytes]] = defaultdict(list)
        ops: list[O.Operation] = []
        for e in events:
            kb = key_serde.serialize(e["page"])
            p = partition_of(kb, PARTITIONS)
            by_partition[p].append(e)
            batches[p].append(pack_envelope(kb, value_serde.serialize(e), e["ts"], None))
            if len(batches[p]) == 5:  # transactions of 5 records
                ops.append(O.Instant("views", p, O.pack_items(batches.pop(p))))
        ops.extend(O.Instant("views", p, O.pack_items(items)) for p, items in batches.items())
        total_txns = len(ops)
        # the input arrives in chunks, one per round, so that each kill lands while the worker
        # has input to process, however fast the machine is
        chunks = [ops[i * total_txns // (KILLS + 1):(i + 1) * total_txns // (KILLS + 1)] for i in range(KILLS + 1)]

        def processed_txns() -> int:
            offsets = engine.backend.get_offsets("views", "kill")
            return sum(len(engine.backend.scan_index("views", p, 0, upto, max_txns=1 << 20).entries)
                       for p, upto in offsets.items())

        env = child_environment()
        progress: list[int] = []
        for kill in range(KILLS):
            engine.backend.submit(chunks[kill])
            before = processed_txns()
            proc = subprocess.Popen([sys.executable, str(WORKER), data, "run"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            try:
                written = sum(map(len, chunks[:kill + 1]))
                target = min(before + rng.randint(1, len(chunks[kill])), written)  # a random point
                eventually(lambda b=before, w=proc: processed_txns() > b or w.poll() is not None,
                           timeout=60, message="the worker made no progress")
                if rng.random() < 0.5:  # sometimes a little later
                    eventually(lambda t=target, w=proc: processed_txns() >= t or w.poll() is not None,
                               timeout=60, interval=0.001)
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                os.kill(proc.pid, signal.SIGKILL)
                progress.append(processed_txns())
            finally:
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                for f in (proc.stdin, proc.stdout, proc.stderr):
                    if f is not None:
                        f.close()
        print("input transactions committed at the kills:", progress, "of", total_txns)
        assert progress == sorted(progress) and len(set(progress)) == KILLS  # progress before every kill
        engine.backend.submit(chunks[KILLS])
        r = subprocess.run([sys.executable, str(WORKER), data, "finish"], capture_output=True, text=True,
                           timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        assert processed_txns() == total_txns

        counts, closed = model(by_partition)
        windowed_key = WindowedSerde(key_serde)
        out: list[tuple[Windowed, int]] = []
        for p in range(engine.get_stream("out").partitions):
            for txn in engine.backend.transactions_range("out", p, 0, 2**63 - 1):
                for item in txn.items:
                    env_ = unpack_envelope(item)
                    assert env_ is not None
                    out.append((windowed_key.deserialize(env_[0]), MsgpackSerde().deserialize(env_[1])))
        assert len(out) == len(set(w for w, _ in out)), "a window was emitted twice"
        assert sorted(out, key=repr) == sorted(((w, counts[w]) for w in closed), key=repr)
        tasks = PARTITIONS
        window_store = ReadOnlyWindowStore(engine.backend, [namespace("kill", p, "counts") for p in range(tasks)],
                                           key_serde, MsgpackSerde())
        assert window_store.all() == counts
        totals = ReadOnlyKeyValueStore(engine.backend, [namespace("kill", p, "totals") for p in range(tasks)],
                                       key_serde, MsgpackSerde())
        expected_totals: dict[str, int] = defaultdict(int)
        for e in events:
            if e["page"] != "/health":
                expected_totals[e["user"]] += e["n"]
        assert totals.all() == dict(expected_totals)
