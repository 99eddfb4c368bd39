"""Pathway: the job as a table program with ``exactly_once_behavior``, persistence on.

A Python connector reading the JSON lines (``json.loads``, as the other Python systems) and
committing every ``commit_every`` events -> ``windowby(ts, tumbling(5 min), instance=page,
behavior=exactly_once_behavior(shift=10 s))`` -> ``count()`` -> ``pw.io.jsonlines.write``,
with ``pw.persistence.Config`` on a filesystem backend (1-s snapshots) and ``threads``
worker threads (``PATHWAY_THREADS``). Runs in its own interpreter (see benchmarks/README.md).

Why not ``pw.io.jsonlines.read(mode="static")``: Pathway judges lateness by processing time
(a window's cutoff applies to rows of *later* commits), and a static read is one commit, so
late events would be counted and the output would be wrong (the check rejects it). Explicit
commits every ``commit_every`` events make the batches, hence the output, deterministic.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.streams.events import GRACE_MS, SIZE_MS
from benchmarks.streams.jobs import report, spec_from_argv


def run(spec: dict[str, Any]) -> None:
    os.environ["PATHWAY_THREADS"] = str(int(spec.get("threads", 1)))
    t0 = time.perf_counter()
    import pathway as pw

    class Event(pw.Schema):
        page: str
        user: str
        ts: int

    class Lines(pw.io.python.ConnectorSubject):
        def run(self) -> None:
            every = int(spec.get("commit_every", 1000))
            with open(spec["input"], "rb") as f:
                for i, line in enumerate(f, 1):
                    self.next(**json.loads(line))
                    if i % every == 0:
                        self.commit()
            self.commit()

        @property
        def _deletions_enabled(self) -> bool:
            return False

    events = pw.io.python.read(Lines(), schema=Event, autocommit_duration_ms=None, name="events")
    counts = events.windowby(
        pw.this.ts,
        window=pw.temporal.tumbling(duration=SIZE_MS),
        instance=pw.this.page,
        behavior=pw.temporal.exactly_once_behavior(shift=GRACE_MS),
    ).reduce(page=pw.this._pw_instance, start=pw.this._pw_window_start, count=pw.reducers.count())
    pw.io.jsonlines.write(counts, spec["output"])
    persistence = None
    if spec.get("persistence", True):
        backend = pw.persistence.Backend.filesystem(str(Path(spec["workdir"]) / "pathway-state"))
        persistence = pw.persistence.Config(backend, snapshot_interval_ms=int(spec.get("snapshot_ms", 1000)))
    pw.run(persistence_config=persistence, monitoring_level=pw.MonitoringLevel.NONE)
    report(process_seconds=time.perf_counter() - t0, version=pw.__version__)


def read_output(path: str) -> list[tuple[str, int, int]]:
    """The final windows of a Pathway output file: rows with ``diff`` +1 net of retractions."""
    net: dict[tuple[str, int, int], int] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            key = (row["page"], int(row["start"]), int(row["count"]))
            net[key] = net.get(key, 0) + int(row.get("diff", 1))
    return [k for k, n in net.items() for _ in range(n)]


if __name__ == "__main__":
    run(spec_from_argv())
