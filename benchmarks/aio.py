"""The ``aio`` suite (issue 22, section 1): many coroutine producers against threads of the sync API.

``python -m benchmarks --suite aio [--quick]`` writes ``results/aio.{json,md}``. One
scenario: durable 1-item ``instant`` transactions, the same total work done by 64 coroutines
through ``tstreams_embedded.aio`` (one event loop; embedded, the blocking calls in its
bounded pool, whose concurrent writes share group commits; remote, every call awaited on
the loop through one ``zmq.asyncio`` connection, no thread) and by 8 threads of the sync
API, embedded and over ``tstreams serve``. Goal: coroutines >= 1.5x threads.

Like :mod:`benchmarks.cluster`, this module defines ``part()`` and imports
:mod:`benchmarks.scenarios` inside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.scenarios import Goal, Scenario

THREADS = 8
COROUTINES = 64
#: total 1-item transactions per run (divided among the threads or the coroutines)
_TOTAL = {"tiny": 128, "quick": 2_560, "full": 25_600}


def part() -> tuple[tuple[Scenario, ...], tuple[Goal, ...]]:
    from benchmarks.scenarios import Goal, Scenario, Variant

    sizes = {mode: {"total": n} for mode, n in _TOTAL.items()}
    threads = {"workers": THREADS}
    coroutines = {"workers": COROUTINES}
    scenarios = (
        Scenario(
            "aio", "aio_produce", f"Durable 1-item transactions: {COROUTINES} coroutines vs {THREADS} threads",
            "concurrent_instant",
            f"The same number of durable 1-item instant() transactions, written by {COROUTINES} coroutines on one "
            f"event loop (tstreams_embedded.aio: await producer.instant) and by {THREADS} threads of the sync "
            f"API (producer.instant), embedded (ts.open, durability sync) and remote (tstreams serve --durability "
            f"sync; the sync API with one connection per thread, aio with one shared connection).",
            (Variant("ours-aio", f"aio, {COROUTINES} coroutines", params=coroutines),
             Variant("ours-sync-embedded", f"sync, {THREADS} threads", params=threads),
             Variant("ours-aio-zmq", f"aio remote, {COROUTINES} coroutines", params=coroutines),
             Variant("ours-sync-zmq", f"sync remote, {THREADS} threads", params=threads)),
            sizes, latency="one durable 1-item transaction",
        ),
    )
    goals = (
        Goal("aio_produce", f"embedded: {COROUTINES} coroutines >= 1.5x {THREADS} threads of the sync API",
             f"aio, {COROUTINES} coroutines", f"sync, {THREADS} threads", at_least=1.5),
        Goal("aio_produce", f"remote: {COROUTINES} coroutines >= 1.5x {THREADS} threads of the sync API",
             f"aio remote, {COROUTINES} coroutines", f"sync remote, {THREADS} threads", at_least=1.5),
    )
    return scenarios, goals
