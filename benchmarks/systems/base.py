"""What every benchmarked system implements, and helpers shared by the implementations.

A system runs each scenario in two phases: ``setup_<scenario>`` (untimed: start servers,
pre-load input) and ``run_<scenario>`` (timed loop, then an untimed check of what was
really stored or read). ``run_*`` returns an :class:`Outcome`; the harness refuses results
whose ``stored`` differs from ``expected``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

ITEM_SIZE = 100


def make_item(i: int) -> bytes:
    """A 100-byte item that encodes ``i`` (so transforms and checks can see which item it is)."""
    return i.to_bytes(8, "big") + b"x" * (ITEM_SIZE - 8)


def transform(item: bytes) -> bytes:
    """The read-transform-write step of scenario 4 (cheap and size-preserving)."""
    return item[:8] + b"y" * (len(item) - 8)


def items_range(start: int, n: int) -> list[bytes]:
    return [make_item(i) for i in range(start, start + n)]


@dataclass
class Outcome:
    """The result of one timed run.

    ``items`` were processed in ``seconds``; ``latencies_ns`` are per operation (what an
    operation is depends on the scenario). ``stored`` is what a check after the run found
    (items stored, or read, or streams created) and must equal ``expected``.
    """

    items: int
    seconds: float
    latencies_ns: list[int] = field(default_factory=list)
    stored: int = 0
    expected: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)
    """p50/p99 already summarised elsewhere (client processes); used when ``latencies_ns`` is empty."""

    def record(self) -> dict[str, Any]:
        """The JSON-able fields of one run, as the harness stores them."""
        from benchmarks.measure import latency_summary

        return {
            "items": self.items,
            "seconds": self.seconds,
            "rate": self.items / self.seconds if self.seconds > 0 else None,
            "latency": latency_summary(self.latencies_ns) if self.latencies_ns else dict(self.latency),
            "stored": self.stored,
            "expected": self.expected,
            "extra": self.extra,
            "ok": self.stored == self.expected,
        }


class System:
    """Base class: a system under test, with its own private data directory."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    description: ClassVar[str] = ""
    is_ours: ClassVar[bool] = False

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)

    # lifecycle -------------------------------------------------------------------------
    def open(self) -> None:
        """Start servers / open files. Called once per run, before ``setup_*``."""

    def close(self) -> None:
        """Stop servers (by PID) and close files. Must be safe to call twice."""

    def server_pids(self) -> list[int]:
        """PIDs of helper processes whose memory counts toward this system."""
        return []

    def disk_bytes(self) -> int:
        """Bytes this system holds on disk (called after :meth:`close`)."""
        from benchmarks.measure import disk_bytes

        return disk_bytes(self.workdir)

    @classmethod
    def available(cls) -> str | None:
        """None if the system can run here, else the reason it cannot."""
        return None


def run_threads(
    n_threads: int, per_thread: int, op_factory: Callable[[int], Callable[[int], None]]
) -> tuple[float, list[int]]:
    """Run ``per_thread`` operations in each of ``n_threads`` threads, all released together.

    ``op_factory(thread_index)`` is called in the thread and returns ``op(i)``. Returns the
    wall time from release to the last thread finishing, and every operation's latency.
    """
    barrier = threading.Barrier(n_threads + 1)
    lat: list[list[int]] = [[] for _ in range(n_threads)]
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            op = op_factory(t)
        except BaseException as e:  # report, but still meet the barrier
            errors.append(e)
            barrier.wait()
            return
        barrier.wait()
        mine = lat[t]
        clock = time.perf_counter_ns
        try:
            for i in range(per_thread):
                t0 = clock()
                op(i)
                mine.append(clock() - t0)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(n_threads)]
    for th in threads:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed, [x for per in lat for x in per]
