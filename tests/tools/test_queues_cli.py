"""``tstreams queues describe`` and ``requeue-dead-letters`` on a real directory, through the
real command line (the figures agree with the engine's own status)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgpack

import tstreams_embedded as ts
from tstreams_embedded.testing.server_process import child_environment


def tstreams(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tstreams_embedded.cli", *args], capture_output=True, text=True,
                          timeout=120, env=child_environment())


def test_describe_and_requeue_dead_letters(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    with ts.open(data) as e:
        e.create_stream("jobs", partitions=2)
        e.create_stream("dlq")
        e.producer("jobs").instant([b"a", b"b", b"c"])
        e.producer("jobs").instant([b"d"])
        q = e.work_queue("jobs", "w", dead_letter="dlq", max_deliveries=1)
        d1, d2 = q.receive(2, timeout=0)
        d1.nak(0, "boom")  # its only delivery failed: dead-lettered
        expected = q.status(full=True)
    r = tstreams("queues", "describe", "--data", data, "jobs", "w", "--json")
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout.splitlines()[0])
    assert (row["pending"], row["in_flight"], row["dead_lettered"]) == (sum(expected.pending.values()), 1, 1)
    assert row["delivered"] == expected.counters["delivered"] == 2
    r = tstreams("queues", "describe", "--data", data, "jobs", "w")
    assert r.returncode == 0 and "dead-lettered" in r.stdout
    for _ in range(2):  # the second run finds nothing new: exactly once
        r = tstreams("queues", "requeue-dead-letters", "--data", data, "jobs", "w", "--json")
        assert r.returncode == 0, r.stderr
    with ts.open(data) as e:
        c = e.consumer("jobs", "all")
        items = []
        while (t := c.get_transaction()) is not None:
            items.extend(t.items)
        assert sorted(items) == sorted([b"a", b"b", b"c", b"d", d1.item])
        dead = e.consumer("dlq", "x").get_transaction()
        assert dead is not None and msgpack.unpackb(dead.items[0])["error"] == "boom"
    r = tstreams("queues", "describe", "--data", data, "jobs", "missing")
    assert r.returncode != 0 and "missing" in r.stderr and "Traceback" not in r.stderr
