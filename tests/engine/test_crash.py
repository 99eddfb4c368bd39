"""Crash tests: real writer processes SIGKILLed at random moments.

* A ``durability="sync"`` writer is killed 20 times. Every transaction it acknowledged
  (printed after ``checkpoint()``/``instant()`` returned) must be present and complete after
  reopening, and no partial transaction may ever be visible.
* A read-transform-write loop (consumer on "in", producer on "out", one CheckpointGroup
  checkpoint per few inputs) is killed repeatedly; in the end "out" holds every input item
  transformed exactly once.

The verifying engine runs with a clock 10 minutes ahead, so the killed writers' open
transactions are past their TTL (as they would be for any reader after the TTL).
"""

from __future__ import annotations

import collections
import random
import subprocess
import time

import pytest

import tstreams_embedded as ts
from tstreams_embedded.testing import eventually
from tstreams_embedded.testing import kill_process as kill

from .procs import run_worker, start_worker
from .workers import expected_items, transform

pytestmark = pytest.mark.slow

FAR_TTL = 10 * 365 * 86400


def _future_clock() -> int:
    return time.time_ns() // 1_000_000 + 600_000


def _read_all(path: str, stream: str) -> dict[int, list[tuple[int, list[bytes]]]]:
    """Every visible transaction of every partition, in ID order (consumer semantics)."""
    with ts.open(path, clock=_future_clock, compaction_interval=None, keepalive_interval=None) as e:
        c = e.consumer(stream, "verify", use_last_offset=False)
        out: dict[int, list[tuple[int, list[bytes]]]] = {p: [] for p in c.partitions}
        for p in c.partitions:
            while (t := c.get_transaction(p)) is not None:
                out[p].append((t.id, t.items))
        return out


def _parse(lines: list[str]) -> list[tuple[int, str, int]]:
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 3:
            out.append((int(parts[0]), parts[1], int(parts[2])))
    return out


def test_sigkilled_sync_writer_loses_no_acknowledged_transaction(tmp_path) -> None:
    path = str(tmp_path / "data")
    with ts.open(path) as e:
        e.create_stream("crash", partitions=3, ttl=FAR_TTL)
    rng = random.Random(20)
    acked: dict[int, tuple[str, int]] = {}  # k -> (partition or "?", txn id)
    killed_mid_run = 0
    for round_ in range(20):
        proc = start_worker("writer", path, (round_ + 1) * 1_000_000)
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(rng.uniform(0.0, 0.25))
        kill(proc)
        lines = proc.stdout.read().splitlines()
        proc.stdout.close()
        proc.stderr.close()
        round_acks = _parse(lines)
        killed_mid_run += bool(round_acks)
        for k, p, tid in round_acks:
            acked[k] = (p, tid)

        # reopen: every acknowledged transaction is there, complete; nothing partial is visible
        visible = _read_all(path, "crash")
        by_id: dict[tuple[int, int], list[bytes]] = {}  # (partition, id) -> items
        seen_k: set[int] = set()
        for p, txns in visible.items():
            ids = [tid for tid, _ in txns]
            assert ids == sorted(set(ids)), "IDs strictly increasing per partition"
            for tid, items in txns:
                k = int(items[0].split(b":")[0])
                assert items == expected_items(k), f"partial or corrupt transaction {tid} (k={k})"
                assert k not in seen_k, f"transaction k={k} visible twice"
                seen_k.add(k)
                by_id[(p, tid)] = items
        for k, (p, tid) in acked.items():
            candidates = [by_id.get((q, tid)) for q in (visible if p == "?" else [int(p)])]
            assert expected_items(k) in candidates, f"acknowledged transaction k={k} id={tid} lost"
    assert len(acked) > 20 and killed_mid_run >= 10, "the writer should have been killed while writing"


def test_sigkilled_read_transform_write_loop_outputs_each_input_exactly_once(tmp_path) -> None:
    path = str(tmp_path / "data")
    inputs: list[bytes] = []
    with ts.open(path, durability="async") as e:
        e.create_stream("in", partitions=2, ttl=FAR_TTL)
        e.create_stream("out", partitions=2, ttl=FAR_TTL)
        producer = e.producer("in")
        for i in range(2500):
            items = [b"in-%d-%d" % (i, j) for j in range(1 + i % 3)]
            inputs.extend(items)
            producer.instant(items)
    rng = random.Random(7)
    interrupted = 0
    done = False
    for _ in range(10):
        proc = start_worker("xform", path, rng.randint(1, 5))
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        # kill it after a random number of acknowledged groups, a random instant later
        for _ in range(rng.randint(1, 60)):
            line = proc.stdout.readline().strip()
            if line != "group" and not line.startswith("group "):
                break
        time.sleep(rng.uniform(0.0, 0.005))
        kill(proc)
        lines = [line] + proc.stdout.read().splitlines()
        proc.stdout.close()
        proc.stderr.close()
        if "done" in lines:
            done = True
            break
        interrupted += 1
    if not done:
        assert "done" in run_worker("xform", path, 3)
    assert interrupted >= 5, "the loop should have been killed mid-run several times"

    out = [item for txns in _read_all(path, "out").values() for _, items in txns for item in items]
    counts = collections.Counter(out)
    expected = collections.Counter(transform(i) for i in inputs)
    assert counts == expected, (
        f"missing {sum((expected - counts).values())}, duplicated {sum((counts - expected).values())}"
    )


@pytest.mark.parametrize("ending", ["clean close", "SIGKILL"])
def test_readers_wait_for_a_killed_producer_until_its_ttl_but_never_for_a_closed_one(tmp_path, ending) -> None:
    path = str(tmp_path / "data")
    ttl = 3.0
    with ts.open(path, compaction_interval=None) as e:
        e.create_stream("held")
    proc = start_worker("hold", path, ttl, stdin=subprocess.PIPE)
    try:
        ready = proc.stdout.readline().split()
        assert ready[0] == "ready", proc.stderr.read()
        with ts.open(path, compaction_interval=None) as e:
            behind = e.producer("held").instant([b"behind"])
            assert behind > int(ready[1])
            c = e.consumer("held", "c")
            assert c.get_transaction() is None  # blocked by the worker's open transaction
            start = time.monotonic()
            if ending == "clean close":
                proc.stdin.write("stop\n")
                proc.stdin.flush()
                assert proc.stdout.readline().strip() == "closed"
                assert proc.wait(30) == 0
                t = c.get_transaction()  # at once: the close cancelled it
                assert t is not None and t.items == [b"behind"]
                assert time.monotonic() - start < ttl
            else:
                kill(proc)
                assert c.get_transaction() is None  # still open in storage: it expires on its TTL
                t = eventually(c.get_transaction, timeout=ttl + 30, interval=0.1)
                assert t.items == [b"behind"]
                assert time.monotonic() - start > ttl / 2
    finally:
        kill(proc)
