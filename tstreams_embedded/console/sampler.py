"""The lag history of the console's charts: a bounded ring of samples taken by a thread.

Every ``interval`` seconds :class:`LagSampler` reads a bounded
:func:`~tstreams_embedded.engine.operator.overview.stream_overview` (at most :data:`SAMPLE_LIMITS`
rows) and the engine's commit and fsync counters, and keeps the last ``keep`` samples
(default one every 10 s for an hour: 360). Memory is bounded by ``keep`` times
``SAMPLE_LIMITS.rows`` lag rows, whatever the engine holds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from .. import errors
from ..engine.operator.overview import OverviewLimits, stream_overview
from ..engine.storage.core import Core

log = logging.getLogger(__name__)

#: bounds of one sample: the rows kept per sample and the lag counting cost
SAMPLE_LIMITS = OverviewLimits(streams=50, partitions=64, consumers=20, rows=500, count_cap=100_000,
                               scan_budget=200_000)


@dataclass(frozen=True)
class Sample:
    """One reading: ``t_ms`` (wall clock), the commit and fsync counters, and the lag per
    ``(stream, consumer, partition)`` as ``(transactions or None, seconds)``."""

    t_ms: int
    commits: int
    fsyncs: int
    lags: dict[tuple[str, str, int], tuple[int | None, float]]


class LagSampler:
    """Samples ``core`` every ``interval`` seconds into a ring of ``keep`` samples."""

    def __init__(self, core: Core, interval: float = 10.0, keep: int = 360) -> None:
        if interval <= 0 or keep < 2:
            raise errors.InvalidArgument(f"sampler needs interval > 0 and keep >= 2, got {interval}, {keep}")
        self.core = core
        self.interval = interval
        self.ring: deque[Sample] = deque(maxlen=keep)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Take one sample now (the thread calls it every ``interval``)."""
        if self.core.closed:
            return
        ov = stream_overview(self.core.store, SAMPLE_LIMITS)
        c = self.core.committer
        self.ring.append(Sample(int(time.time() * 1000), c.commits, c.fsyncs,
                                {(s.name, r.consumer, r.partition): (r.lag_txns, r.lag_seconds)
                                 for s in ov.streams for r in s.consumers}))

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
        for s in list(self.ring):
            for (name, cons, partition), (txns, secs) in s.lags.items():
                if name == stream and cons == consumer:
                    series.setdefault(partition, []).append([s.t_ms, txns, secs])
        return {"stream": stream, "consumer": consumer, "interval_s": self.interval,
                "keep": self.ring.maxlen, "partitions": {str(p): v for p, v in sorted(series.items())}}
