"""Work queues under SIGKILL: four worker processes on one data directory are killed at
random while they process; every item completes, at least once with plain acks or acks
riding on the next receive, and exactly once in the output when the acks join the
output's CheckpointGroup."""

from __future__ import annotations

import random
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded.testing import eventually

from .procs import start_worker
from .workers import transform

ITEMS = 2000
WORKERS = 4
STEP = 200


def _worker(path: Path, mode: str) -> subprocess.Popen:
    return start_worker("queue_worker", path, mode, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _outputs(path: Path) -> Counter[bytes]:
    with ts.open(path) as e:
        c = e.consumer("out", "check")
        out: Counter[bytes] = Counter()
        while (t := c.get_transaction()) is not None:
            out.update(t.items)
        return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["group", "plain", "riding"])
def test_killed_workers_lose_nothing_and_a_group_duplicates_nothing(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "data"
    expected = [b"job-%04d" % i for i in range(ITEMS)]
    with ts.open(path) as e:
        e.create_stream("jobs", partitions=4)
        e.create_stream("out")
        p = e.producer("jobs")
        for i in range(0, ITEMS, 10):
            p.instant(expected[i:i + 10])
        e.work_queue("jobs", "workers", ack_timeout=1.0, max_deliveries=1000)
    rng = random.Random({"group": 7, "plain": 11, "riding": 13}[mode])
    procs = [_worker(path, mode) for _ in range(WORKERS)]
    kills = 0
    try:
        with ts.open(path) as e:
            q = e.work_queue("jobs", "workers", ack_timeout=1.0, max_deliveries=1000, consumer="observer")

            def progress() -> int:
                return q.status().counters["acked"]

            while kills < 8:  # a kill after every STEP acknowledged items, while they work
                mark = progress() + rng.randrange(STEP // 2, STEP)
                eventually(lambda mark=mark: progress() >= min(mark, ITEMS), timeout=60)
                if progress() >= ITEMS:
                    break
                victim = rng.randrange(WORKERS)
                procs[victim].send_signal(signal.SIGKILL)
                procs[victim].wait()
                kills += 1
                procs[victim] = _worker(path, mode)

            def settled() -> bool:
                s = q.status(full=True)
                return s.in_flight == 0 and s.waiting == 0 and not any(s.pending.values())

            eventually(settled, timeout=120)
            counters = q.status().counters
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert kills >= 3, "the workers were killed while they worked"
    out = _outputs(path)
    want = {transform(i) for i in expected}
    assert set(out) == want  # nothing missing, nothing that was not in the input
    assert counters["acked"] == ITEMS
    if mode == "group":
        assert all(n == 1 for n in out.values()), [k for k, n in out.items() if n > 1][:5]
