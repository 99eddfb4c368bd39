"""Many threads sharing one client connection, each making many small calls.

Regression test for a lost wake-up in the client's receiver-role hand-off: the wake pipe's
"already signalled" flag could stay set while the pipe was empty, so every later wake was
skipped and replies sat unread until a poll timed out (the heartbeat, 2 s) — about 5% of
calls from 8 threads stalled 2.0 s.

The connections here use a one-hour heartbeat, so no periodic wake-up can paper over a lost
one: a stalled call waits for the first request deadline (``timeout`` seconds after the
test's first call). The checks are correctness (every call returns its own answer, every
transaction is stored intact) plus "no call took anywhere near that long" — a bound many
times any plausible latency, not a speed measurement.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tstreams_embedded.net import connect, framing
from tstreams_embedded.net.connection import Connection

from .helpers import ThreadServer
from .test_framework import stand_in_registry

TIMEOUT = 40.0  # request timeout: a lost wake-up stalls its call until about then
STALL = 15.0  # no call may take this long (normal calls take milliseconds)
HOUR = 3600.0


def run_threads(n: int, body: Callable[[int, list[float]], None]) -> list[float]:
    """Run ``body(k, durations)`` on ``n`` threads at once; re-raise the first failure;
    return every recorded call duration."""
    durations: list[list[float]] = [[] for _ in range(n)]
    failures: list[BaseException] = []
    start = threading.Barrier(n)

    def worker(k: int) -> None:
        try:
            start.wait(30)
            body(k, durations[k])
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 3)
    assert not any(t.is_alive() for t in threads), "a thread never finished"
    if failures:
        raise failures[0]
    return [d for per in durations for d in per]


def timed(durations: list[float], fn: Callable[..., Any], *args: Any) -> Any:
    t = time.monotonic()
    try:
        return fn(*args)
    finally:
        durations.append(time.monotonic() - t)


@pytest.mark.timeout(300)
def test_sync_and_handoff_waiters_share_one_connection() -> None:
    """Half the threads wait in synchronous calls (taking the receiver role when free), half
    send a request and wait on its future (served by whoever receives): every reply reaches
    its caller, and none waits for a timer to be noticed."""
    reg, _ = stand_in_registry()
    server = ThreadServer(reg)
    conn = Connection(server.endpoint, timeout=TIMEOUT, heartbeat=HOUR)
    try:
        def body(k: int, durations: list[float]) -> None:
            for i in range(400):
                if k % 2:
                    fut = conn.request("add", framing.encode_args([k * 1000, i]))
                    got = timed(durations, fut.result, TIMEOUT + 5)
                else:
                    got = timed(durations, conn.call, "add", k * 1000, i)
                assert got == k * 1000 + i

        durations = run_threads(8, body)
        assert len(durations) == 8 * 400
        slow = [d for d in durations if d >= STALL]
        assert not slow, f"{len(slow)} calls stalled (longest {max(slow):.1f}s): a lost wake-up"
    finally:
        conn.close()
        server.stop()


@pytest.mark.timeout(300)
def test_threads_share_one_remote_engine(server: Any) -> None:
    """8 threads, one ``ts.connect()`` engine, a producer each: instant transactions and
    transactions whose chunks are pipelined (flushes) before a durable checkpoint. Every
    transaction is stored with its items, and no call stalled."""
    engine = connect(server.endpoint, timeout=TIMEOUT, heartbeat=HOUR)
    try:
        engine.create_stream("mt", partitions=8)
        rounds = 600

        def body(k: int, durations: list[float]) -> None:
            producer = engine.producer("mt")  # partitions in turn: threads meet on each
            for i in range(rounds):
                txn = producer.new_transaction()
                for part in (b"a", b"b"):
                    txn.send(b"%d:%d:%s" % (k, i, part))
                    timed(durations, txn.flush)  # pipelined: no reply awaited here
                txn.send(b"%d:%d:c" % (k, i))
                timed(durations, txn.checkpoint)  # waits for the flushes' replies first
                if i % 10 == 0:
                    timed(durations, producer.instant, [b"%d:%d:i" % (k, i)])

        durations = run_threads(8, body)
        slow = [d for d in durations if d >= STALL]
        assert not slow, f"{len(slow)} calls stalled (longest {max(slow):.1f}s): a lost wake-up"

        consumer = engine.consumer("mt", name="check", start="oldest", use_last_offset=False)
        got: dict[int, list] = {k: [] for k in range(8)}
        for p in range(8):
            while (txn := consumer.get_transaction(p)) is not None:
                items = list(txn.items)
                got[int(items[0].split(b":")[0])].append(items)
        for k in range(8):
            want = []
            for i in range(rounds):
                want.append([b"%d:%d:%s" % (k, i, part) for part in (b"a", b"b", b"c")])
                if i % 10 == 0:
                    want.append([b"%d:%d:i" % (k, i)])
            assert sorted(got[k]) == sorted(want), f"thread {k}"
    finally:
        engine.close()
