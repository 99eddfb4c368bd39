"""Bytewax 0.21: the job with its windowing operators, recovery on, 1-s snapshots.

``FileSource`` lines -> ``json.loads`` -> ``count_window`` keyed by page with an
``EventClock`` (10 s wait) and a ``TumblingWindower`` (5 minutes) -> ``FileSink`` (which
fsyncs each batch and truncates to the last snapshot on resume, so the output is exact).
Recovery: a SQLite recovery partition (``init_db_dir``) and a 1-s epoch, i.e. a state
snapshot every second (``cli_main(..., epoch_interval=1 s, recovery_config=...)``).

The clock's "system time" is frozen (``now_getter``), so the watermark is the largest event
time minus the wait: the same stream-time rule as the reference, independent of how fast
the machine is. Windows close on new items or at EOF.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from benchmarks.streams.events import GRACE_MS, SIZE_MS
from benchmarks.streams.jobs import report, spec_from_argv

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
FROZEN_NOW = datetime(2000, 1, 1, tzinfo=timezone.utc)


def build_flow(input_path: str, output_path: str) -> Any:
    import bytewax.operators as op
    from bytewax.connectors.files import FileSink, FileSource
    from bytewax.dataflow import Dataflow
    from bytewax.operators.windowing import EventClock, TumblingWindower, count_window

    size = timedelta(milliseconds=SIZE_MS)
    flow = Dataflow("pageviews")
    lines = op.input("in", flow, FileSource(input_path))
    events = op.map("parse", lines, json.loads)
    clock = EventClock(
        ts_getter=lambda e: EPOCH + timedelta(milliseconds=e["ts"]),
        wait_for_system_duration=timedelta(milliseconds=GRACE_MS),
        now_getter=lambda: FROZEN_NOW,
        to_system_utc=lambda _t: None,
    )
    windows = count_window("count", events, clock, TumblingWindower(length=size, align_to=EPOCH),
                           lambda e: e["page"])

    def line(key_window_count: tuple[str, tuple[int, int]]) -> tuple[str, str]:
        page, (window_id, count) = key_window_count
        return ("out", json.dumps([page, window_id * SIZE_MS, count]))

    op.output("out", op.map("format", windows.down, line), FileSink(Path(output_path)))
    return flow


def run_flow(build: Callable[[str, str], Any], spec: dict[str, Any], workers: int) -> None:
    """Build the flow from the spec's ``input`` and ``output`` files and run it with
    ``workers`` workers, recovery on unless ``"recovery": false`` (SQLite, an epoch every
    ``snapshot_s``); report the time and bytewax's version."""
    from bytewax._bytewax import cli_main
    from bytewax.recovery import RecoveryConfig, init_db_dir

    t0 = time.perf_counter()
    flow = build(spec["input"], spec["output"])
    Path(spec["output"]).touch()
    kwargs: dict[str, Any] = {"workers_per_process": workers}
    if spec.get("recovery", True):
        db = Path(spec["workdir"]) / "recovery"
        db.mkdir(parents=True, exist_ok=True)
        init_db_dir(db, 1)
        kwargs["recovery_config"] = RecoveryConfig(str(db))
        kwargs["epoch_interval"] = timedelta(seconds=float(spec.get("snapshot_s", 1.0)))
    cli_main(flow, **kwargs)
    from importlib.metadata import version

    report(process_seconds=time.perf_counter() - t0, version=version("bytewax"))


def run(spec: dict[str, Any]) -> None:
    run_flow(build_flow, spec, int(spec.get("workers", 1)))


if __name__ == "__main__":
    run(spec_from_argv())
