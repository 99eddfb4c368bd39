"""The ``schedules`` suite (issue 22, section 3): how late scheduled deliveries arrive.

``python -m benchmarks --suite schedules [--quick]`` writes ``results/schedules.{json,md}``.
One scenario: schedules due evenly over a few seconds, read by a consumer as they fire;
lateness = readable - due, p50/p99, with the engine idle and under a write load of durable
100-item transactions from 4 threads. Goal: p99 <= 100 ms under load.

Like :mod:`benchmarks.aio`, this module defines ``part()`` and imports
:mod:`benchmarks.scenarios` inside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.scenarios import Goal, Scenario

LOAD_THREADS = 4
_SIZES = {"tiny": {"n": 200, "spread_s": 1.0}, "quick": {"n": 2_000, "spread_s": 4.0},
          "full": {"n": 10_000, "spread_s": 20.0}}


def part() -> tuple[tuple[Scenario, ...], tuple[Goal, ...]]:
    from benchmarks.scenarios import Goal, Scenario, Variant

    scenarios = (
        Scenario(
            "schedules", "lateness", "Scheduled delivery: lateness after the due time", "lateness",
            "N schedules of one 100-byte item, due evenly over a few seconds (written 500 per write beforehand), "
            "fired by the engine's firer thread (embedded, durability sync) and read by a consumer that waits for "
            "commits; latency = when the item is readable minus its due time. Idle, and under load: "
            f"{LOAD_THREADS} threads writing durable 100-item instant transactions to another stream throughout. "
            "Every schedule must be read exactly once or the run FAILS.",
            (Variant("ours-schedules", "ours, idle", params={"load_threads": 0}),
             Variant("ours-schedules", f"ours, under load ({LOAD_THREADS} writer threads)",
                     params={"load_threads": LOAD_THREADS})),
            _SIZES, unit="schedules/s", latency="lateness of one schedule (readable - due)",
            timeouts={"tiny": 120, "quick": 300, "full": 900},
        ),
    )
    goals = (
        Goal("lateness", "p99 lateness <= 100 ms after due, under load", f"ours, under load ({LOAD_THREADS} writer "
             "threads)", metric="p99_ms", at_most=100.0, unit="ms"),
        Goal("lateness", "p99 lateness idle (informational)", "ours, idle", metric="p99_ms", unit="ms"),
    )
    return scenarios, goals
