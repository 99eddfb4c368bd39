"""``tstreams consume --follow``: a transaction committed by another process is printed
within 100 ms, woken by the commit (not by a timer).

Both sides are real child processes: ``tstreams consume --follow`` and a producer that
commits one transaction each time it is told to and reports the moment it started the
commit (``time.monotonic()``, one clock for every process of the machine). A reader thread
stamps each line the follower prints as it arrives and sets an event per transaction ID.
Latency is counted from the start of the commit to the line's arrival. Woken by the commit
it takes a few milliseconds; but on a loaded 2-core machine (several test runs at once) a
single round now and then exceeds 100 ms by being scheduled late (128 ms was seen, in the
first round through a server), so the median of the rounds is held to the 100 ms bound and
every round to :data:`WORST`, one second: far above scheduling noise, far below the
follower's safety-net wait (``CommitWaiter.idle``, 5 s), which is what a lost wake-up shows
as. Such a lost wake-up is what this test caught in the embedded engine (LMDB publishes a
commit to readers just after the file write that wakes them; see ``Core.wait_for_commit``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tstreams_embedded.testing import stop_process
from tstreams_embedded.testing.server_process import child_environment

from .conftest import Site

ROUNDS = 7
BOUND = 0.100  # seconds: the bound, for the median round
WORST = 1.0  # seconds, for every round (a lost wake-up takes 5 s)

PRODUCER = r"""
import sys, time
import tstreams_embedded as ts
target = sys.argv[1]
engine = ts.open(target, compaction_interval=None) if not target.startswith("tcp://") else ts.connect(target)
producer = engine.producer("live", partition=0)
print("ready", flush=True)
for n, _ in enumerate(sys.stdin):
    started = time.monotonic()
    txn_id = producer.instant([b"item %d" % n])
    print(txn_id, started, time.monotonic(), flush=True)
engine.close()
"""


class Lines:
    """Reads a child's stdout on a thread: each line with the monotonic time it arrived."""

    def __init__(self, stream: object) -> None:
        self.seen: dict[int, tuple[float, dict[str, object]]] = {}
        self.events: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def event(self, txn_id: int) -> threading.Event:
        with self._lock:
            return self.events.setdefault(txn_id, threading.Event())

    def _read(self, stream: object) -> None:
        for raw in stream:  # type: ignore[attr-defined]
            now = time.monotonic()
            line = json.loads(raw)
            self.seen[line["id"]] = (now, line)
            self.event(line["id"]).set()


@contextmanager
def child(argv: list[str], **kwargs: object) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, env=child_environment(), **kwargs)  # type: ignore[call-overload]
    try:
        yield proc
    finally:
        stop_process(proc)


@pytest.mark.timeout(120)
def test_follow_prints_a_commit_of_another_process_within_100ms(site: Site, tmp_path) -> None:
    site.engine.create_stream("live")
    first = site.engine.producer("live").instant([b"before"])
    target = site.server.endpoint if site.server is not None else str(site.data)
    follower_err = open(tmp_path / "follower.err", "wb")
    with child(site.argv("consume", "live", "--follow", "--json"), stdout=subprocess.PIPE, stderr=follower_err) as f, \
            child([sys.executable, "-c", PRODUCER, target], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as producer:
        lines = Lines(f.stdout)
        assert lines.event(first).wait(30), "the follower never printed the first transaction"
        assert producer.stdout is not None and producer.stdin is not None
        assert producer.stdout.readline().strip() == b"ready"
        latencies = []
        for n in range(ROUNDS):
            producer.stdin.write(b"go\n")
            producer.stdin.flush()
            txn_id, started, _committed = producer.stdout.readline().split()
            event = lines.event(int(txn_id))
            assert event.wait(10), f"round {n}: transaction {int(txn_id)} was never printed"
            arrived, line = lines.seen[int(txn_id)]
            assert line["items"] == [f"item {n}"]
            assert arrived > float(started)
            latencies.append(arrived - float(started))
        assert f.poll() is None, "the follower exited"
    print("follow latencies (s):", [round(x, 4) for x in latencies])
    assert statistics.median(latencies) < BOUND, latencies
    assert max(latencies) < WORST, latencies
