"""This project through ``tstreams_embedded.aio``: coroutines on one event loop, embedded and
remote, and the sync API's threads doing the same work (``ours-sync-*``: the systems of
:mod:`benchmarks.systems.ours` with this scenario's method added, so that ours.py stays untouched)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks.systems.base import Outcome, make_item, run_threads
from benchmarks.systems.ours import OursEmbedded, OursZmq


def concurrent_instant_threads(system: OursEmbedded, total: int, workers: int) -> Outcome:
    """``total`` durable 1-item instant transactions from ``workers`` threads of the sync API."""
    system.engine.create_stream("s", partitions=1)
    item = [make_item(0)]

    def factory(t: int) -> Any:
        producer = system.client_for_thread().producer("s", partition=0)
        return lambda i: producer.instant(item, partition=0)

    try:
        seconds, lat = run_threads(workers, total // workers, factory)
    finally:
        system.close_thread_clients()
    n = workers * (total // workers)
    return Outcome(n, seconds, lat, stored=system._count_items("s")[0], expected=n)


def concurrent_instant_coroutines(open_async: Any, total: int, workers: int) -> tuple[Outcome, Any]:
    """``total`` durable 1-item instant transactions from ``workers`` coroutines; the
    outcome (stored left 0: the caller counts) and nothing else."""
    from tstreams_embedded import aio

    per = total // workers
    item = [make_item(0)]

    async def main() -> tuple[float, list[int]]:
        engine: aio.AsyncEngine = await open_async()
        try:
            await engine.create_stream("s", partitions=1)
            producer = await engine.producer("s", partition=0)
            lat: list[int] = []
            start = asyncio.Event()

            async def writer() -> None:
                await start.wait()
                clock = time.perf_counter_ns
                for _ in range(per):
                    t0 = clock()
                    await producer.instant(item, partition=0)
                    lat.append(clock() - t0)

            tasks = [asyncio.create_task(writer()) for _ in range(workers)]
            await asyncio.sleep(0)
            t0 = time.perf_counter()
            start.set()
            await asyncio.gather(*tasks)
            return time.perf_counter() - t0, lat
        finally:
            await engine.close()

    seconds, lat = asyncio.run(main())
    return Outcome(per * workers, seconds, lat, expected=per * workers), None


class OursAio(OursEmbedded):
    name = "ours-aio"
    label = "tstreams-embedded aio (in-process)"
    description = "aio.open(dir, durability='sync'); await producer.instant from many coroutines"

    def open(self) -> None:
        self.path = str(self.workdir / "data")

    def close(self) -> None:
        pass

    def run_concurrent_instant(self, total: int, workers: int) -> Outcome:
        from tstreams_embedded import aio

        outcome, _ = concurrent_instant_coroutines(lambda: aio.open(self.path, durability="sync"), total, workers)
        super().open()  # count what was stored, through the sync API
        try:
            outcome.stored = self._count_items("s")[0]
        finally:
            super().close()
        return outcome


class OursAioZmq(OursZmq):
    name = "ours-aio-zmq"
    label = "tstreams-embedded aio over ZeroMQ"
    description = "tstreams serve --durability sync + aio.connect; await producer.instant from many coroutines"

    def run_concurrent_instant(self, total: int, workers: int) -> Outcome:
        from tstreams_embedded import aio

        outcome, _ = concurrent_instant_coroutines(lambda: aio.connect(self.endpoint), total, workers)
        outcome.stored = self._count_items("s")[0]
        return outcome


class OursSyncEmbedded(OursEmbedded):
    """The sync API's side of the comparison (threads), embedded."""

    name = "ours-sync-embedded"

    def run_concurrent_instant(self, total: int, workers: int) -> Outcome:
        return concurrent_instant_threads(self, total, workers)


class OursSyncZmq(OursZmq):
    """The sync API's side of the comparison (threads, one connection each), remote."""

    name = "ours-sync-zmq"

    def run_concurrent_instant(self, total: int, workers: int) -> Outcome:
        return concurrent_instant_threads(self, total, workers)
