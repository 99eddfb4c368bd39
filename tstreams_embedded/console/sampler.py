"""The lag history of the console's charts: a bounded ring of samples taken by a thread.

Every ``interval`` seconds :class:`LagSampler` reads a bounded
:func:`~tstreams_embedded.engine.operator.overview.stream_overview` (at most :data:`SAMPLE_LIMITS`
rows, the lag counted up to ``count_cap`` transactions a row within ``scan_budget`` cursor
steps a sample) and the engine's commit and fsync counters, and keeps the last ``keep``
samples (default one every 10 s for an hour: 360). A sample holds its lags in two arrays
(8 bytes a figure) beside its ``(stream, consumer, partition)`` keys, which it shares with
the sample before when they are the same rows (the usual case), so the ring's memory is
bounded by ``keep`` times ``SAMPLE_LIMITS.rows`` times a few dozen bytes plus the rows'
names, whatever the engine holds (:meth:`LagSampler.ring_bytes`).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Any

from .. import errors
from ..engine.operator.overview import OverviewLimits, stream_overview
from ..engine.storage.core import Core

log = logging.getLogger(__name__)

#: bounds of one sample: the rows kept per sample and the lag counting cost
SAMPLE_LIMITS = OverviewLimits(streams=50, partitions=64, consumers=20, rows=500, count_cap=10_000,
                               scan_budget=20_000)

Row = tuple[str, str, int]  # (stream, consumer, partition)


@dataclass(frozen=True)
class Sample:
    """One reading: ``t_ms`` (wall clock), the commit and fsync counters, and for each of
    ``rows`` its lag in transactions (``-1``: not counted; ``count_cap``: at least that) and
    in seconds."""

    t_ms: int
    commits: int
    fsyncs: int
    rows: tuple[Row, ...]
    txns: array[int]
    seconds: array[float]


class LagSampler:
    """Samples ``core`` every ``interval`` seconds into a ring of ``keep`` samples."""

    def __init__(self, core: Core, interval: float = 10.0, keep: int = 360) -> None:
        if interval <= 0 or keep < 2:
            raise errors.InvalidArgument(f"sampler needs interval > 0 and keep >= 2, got {interval}, {keep}")
        self.core = core
        self.interval = interval
        self.ring: deque[Sample] = deque(maxlen=keep)
        self.sample_seconds = 0.0  # the time the samples took
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Take one sample now (the thread calls it every ``interval``)."""
        if self.core.closed:
            return
        started = time.monotonic()
        ov = stream_overview(self.core.store, SAMPLE_LIMITS)
        self.sample_seconds += time.monotonic() - started
        c = self.core.committer
        rows = tuple((s.name, r.consumer, r.partition) for s in ov.streams for r in s.consumers)
        if self.ring and self.ring[-1].rows == rows:
            rows = self.ring[-1].rows  # the same rows: shared, not kept twice
        lags = [r for s in ov.streams for r in s.consumers]
        self.ring.append(Sample(int(time.time() * 1000), c.commits, c.fsyncs, rows,
                                array("q", (-1 if r.lag_txns is None else r.lag_txns for r in lags)),
                                array("d", (r.lag_seconds for r in lags))))

    def ring_bytes(self) -> int:
        """The memory the ring holds: samples, arrays, row keys and names (shared ones once)."""
        seen: set[int] = set()
        total = sys.getsizeof(self.ring)

        def once(obj: object) -> int:
            if id(obj) in seen:
                return 0
            seen.add(id(obj))
            return sys.getsizeof(obj)

        for s in self.ring:
            total += once(s) + once(s.txns) + once(s.seconds)
            if id(s.rows) not in seen:
                total += once(s.rows) + sum(once(r) + once(r[0]) + once(r[1]) + once(r[2]) for r in s.rows)
        return total

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            try:
                self.sample()
            except errors.TStreamsError as exc:  # closed or unreadable: try again next time
                log.debug("console sampler: %s", exc)
            if self._stop.wait(self.interval):
                return

    def rates(self) -> dict[str, float | None]:
        """Commits and fsyncs per second over the last two samples (``None`` before two)."""
        samples = list(self.ring)[-2:]
        if len(samples) < 2 or samples[1].t_ms <= samples[0].t_ms:
            return {"commits_per_s": None, "fsyncs_per_s": None}
        dt = (samples[1].t_ms - samples[0].t_ms) / 1000.0
        return {"commits_per_s": (samples[1].commits - samples[0].commits) / dt,
                "fsyncs_per_s": (samples[1].fsyncs - samples[0].fsyncs) / dt}

    def history(self, stream: str, consumer: str) -> dict[str, Any]:
        """The lag series of one consumer: per partition, ``[t_ms, transactions, seconds]``."""
        series: dict[int, list[list[Any]]] = {}
        mine: list[tuple[int, int]] = []  # (index, partition) in the rows of the sample before
        rows: tuple[Row, ...] = ()
        for s in list(self.ring):
            if s.rows is not rows:
                rows = s.rows
                mine = [(i, p) for i, (name, cons, p) in enumerate(rows) if name == stream and cons == consumer]
            for i, partition in mine:
                txns = s.txns[i]
                series.setdefault(partition, []).append([s.t_ms, None if txns < 0 else txns, s.seconds[i]])
        return {"stream": stream, "consumer": consumer, "interval_s": self.interval,
                "keep": self.ring.maxlen, "count_cap": SAMPLE_LIMITS.count_cap,
                "partitions": {str(p): v for p, v in sorted(series.items())}}
