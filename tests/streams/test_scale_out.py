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
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded.engine import ops as O
from tstreams_embedded.streams import Windowed
from tstreams_embedded.streams.membership import read_group
from tstreams_embedded.streams.records import pack_envelope, partition_of, unpack_envelope
from tstreams_embedded.streams.serdes import MsgpackSerde, WindowedSerde, serde
from tstreams_embedded.streams.stores import ReadOnlyKeyValueStore, ReadOnlyWindowStore, namespace
from tstreams_embedded.testing import ServeProcess, eventually
from tstreams_embedded.testing.serve import child_environment

from .test_kill import model

WORKER = Path(__file__).resolve().parent / "scale_worker.py"
PAGES = [f"/p{i}" for i in range(12)] + ["/health"]
USERS = ["u1", "u2", "u3", "u4"]
PARTITIONS = 6
ROUNDS = 12


class Worker:
    def __init__(self, data: str) -> None:  # an engine directory, or a tcp:// endpoint
        self.proc = subprocess.Popen([sys.executable, str(WORKER), data], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_environment())
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        assert line.startswith("started"), line + (self.proc.stderr.read().decode() if self.proc.stderr else "")
        self.port = int(line.split()[1])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("deployment", ["directory", "served"])
def test_three_processes_killed_restarted_and_paused_exactly_once(tmp_path: Path, deployment: str) -> None:
    rng = random.Random(int(os.environ.get("SCALE_OUT_SEED", "13")))
    data = str(tmp_path / "data")
    if deployment == "served":
        server = ServeProcess(data, tmp_path / "serve")
        server.start()
        try:
            with server.connect() as engine:
                run_scenario(engine, server.endpoint, rng, ["kill", "kill-restart", "pause"])
        finally:
            server.stop()
    else:
        with ts.open(data, compaction_interval=None) as engine:
            run_scenario(engine, data, rng, ["kill", "kill-restart"])


def run_scenario(engine: ts.Engine, target: str, rng: random.Random, actions: list[str]) -> None:
    data = target
    events = [{"page": rng.choice(PAGES), "user": rng.choice(USERS), "n": i, "ts": i * 7 - rng.randint(0, 40)}
              for i in range(4000)]
    by_partition: dict[int, list[dict[str, Any]]] = defaultdict(list)
    key_serde, value_serde = serde("str"), serde("json")
    workers: list[Worker] = []
    engine.create_stream("views", partitions=PARTITIONS)
    batches: dict[int, list[bytes]] = defaultdict(list)
    ops: list[O.Operation] = []
    for e in events:
        kb = key_serde.serialize(e["page"])
        p = partition_of(kb, PARTITIONS)
        by_partition[p].append(e)
        batches[p].append(pack_envelope(kb, value_serde.serialize(e), e["ts"], None))
        if len(batches[p]) == 5:
            ops.append(O.Instant("views", p, O.pack_items(batches.pop(p))))
    ops.extend(O.Instant("views", p, O.pack_items(items)) for p, items in batches.items())
    total = len(ops)
    chunks = [ops[i * total // (ROUNDS + 1):(i + 1) * total // (ROUNDS + 1)] for i in range(ROUNDS + 1)]

    def processed() -> int:
        offsets = engine.backend.get_offsets("views", "scale")
        return sum(len(engine.backend.scan_index("views", p, 0, upto, max_txns=1 << 20).entries)
                   for p, upto in offsets.items())

    events_log = []
    try:
        workers = [Worker(data) for _ in range(3)]
        for rnd in range(ROUNDS):
            engine.backend.submit(chunks[rnd])
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
        engine.backend.submit(chunks[ROUNDS])
        print("actions:", events_log)

        expected_totals: dict[str, int] = defaultdict(int)
        for e in events:
            if e["page"] != "/health":
                expected_totals[e["user"]] += e["n"]
        totals = ReadOnlyKeyValueStore(engine.backend,
                                       [namespace("scale", p, "totals") for p in range(PARTITIONS)],
                                       key_serde, MsgpackSerde())
        eventually(lambda: processed() == total and totals.all() == dict(expected_totals), timeout=120,
                   message="the survivors did not finish the input")
        eventually(lambda: len(read_group(engine.backend, "scale", 1000).members) == 3 and
                   all_moved_away(engine, set()), timeout=60, message="the group did not settle")
    finally:
        for w in workers:
            w.kill()

    counts, closed = model(by_partition)
    windowed_key = WindowedSerde(key_serde)
    out: list[tuple[Windowed, int]] = []
    for p in range(engine.get_stream("out").partitions):
        for txn in engine.backend.transactions_range("out", p, 0, 2**63 - 1):
            for item in txn.items:
                env = unpack_envelope(item)
                assert env is not None
                out.append((windowed_key.deserialize(env[0]), MsgpackSerde().deserialize(env[1])))
    assert len(out) == len(set(w for w, _ in out)), "a window was emitted twice"
    assert sorted(out, key=repr) == sorted(((w, counts[w]) for w in closed), key=repr)
    windows = ReadOnlyWindowStore(engine.backend, [namespace("scale", p, "counts") for p in range(PARTITIONS)],
                                  key_serde, MsgpackSerde())
    assert windows.all() == counts
    assert totals.all() == dict(expected_totals)
    assert set(events_log) == set(actions)


def members_on(engine: ts.Engine, port: int) -> set[str]:
    """The live members serving queries on ``port`` (one worker process)."""
    return {m for m, info in read_group(engine.backend, "scale", 1000).members.items() if info.port == port}


def all_moved_away(engine: ts.Engine, members: set[str]) -> bool:
    """Every task is held by a live member outside ``members``."""
    view = read_group(engine.backend, "scale", 1000)
    return all((o := view.owner(p)) is not None and o not in members for p in range(PARTITIONS))
