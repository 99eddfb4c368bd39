"""The demo pipeline: produce page views, run the Spark job, kill it, restart it, verify.

:func:`run` is what ``make demo`` (``python -m tstreams_embedded.demo``) runs: a :class:`_Producer`
writes the events, the Spark job runs as a child process tree (:class:`_Job`), and :func:`_monitor`
follows the output and kills and restarts the job once halfway.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tstreams_embedded as ts

from ..engine.protocol.iteration import iter_transactions
from .events import FLUSH_PAGE, encode, flush_event, generate, true_counts
from .procs import kill_tree, start_job

PARTITIONS = 4


@dataclass
class Config:
    events: int = 200_000
    data: str | None = None
    endpoint: str | None = None
    workdir: str | None = None
    produce_seconds: float = 30.0  # 0 = write everything up front (a backlog)
    txn_events: int = 500
    kill: bool = True
    kill_at: float = 0.5  # fraction of the expected windows emitted when the job is killed
    max_rows: int = 25_000
    trigger: str = "1 second"
    watermark: str = "2 minutes"
    staging_ttl: int = 15
    seed: int = 7
    keep: bool = False
    progress: bool = True
    timeout: float = 600.0


@dataclass
class Result:
    events: int = 0
    expected_windows: int = 0
    output_rows: int = 0
    missing: int = 0
    duplicated: int = 0
    wrong_counts: int = 0
    unexpected: int = 0
    views_in: int = 0
    views_out: int = 0
    kill: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    table: list[tuple[str, int, int, str, int]] = field(default_factory=list)
    workdir: str = ""

    @property
    def ok(self) -> bool:
        return (self.missing == 0 and self.duplicated == 0 and self.wrong_counts == 0 and self.unexpected == 0
                and self.views_in == self.views_out and self.output_rows == self.expected_windows)


class _Output:
    """Incremental reader of the output stream (consumer semantics, positions in memory)."""

    def __init__(self, backend: Any, stream: str) -> None:
        self.backend = backend
        self.stream = stream
        self.pos = [0] * PARTITIONS
        self.rows: list[dict] = []
        self.blocked = False

    def poll(self) -> int:
        new = 0
        blocked = False
        for p in range(PARTITIONS):
            walk = iter_transactions(self.backend, self.stream, p, self.pos[p], batch=256)
            for t in walk:
                self.rows.extend(json.loads(v) for v in t.items)
                new += len(t.items)
            self.pos[p] = walk.position
            blocked = blocked or walk.blocked
        self.blocked = blocked
        return new


def _read_all(backend: Any, stream: str) -> list[bytes]:
    items: list[bytes] = []
    for p in range(backend.get_stream(stream).partitions):
        for t in iter_transactions(backend, stream, p):
            items.extend(t.items)
    return items


def _latest(dirpath: Path) -> int | None:
    if not dirpath.is_dir():
        return None
    nums = [int(p.name) for p in dirpath.iterdir() if p.name.isdigit()]
    return max(nums) if nums else None


def _stream_names(engine: Any) -> tuple[str, str]:
    base_in, base_out = "pageviews", "pageview_counts"
    if engine.has_stream(base_in) or engine.has_stream(base_out):
        suffix = time.strftime("%Y%m%d-%H%M%S")
        return f"{base_in}-{suffix}", f"{base_out}-{suffix}"
    return base_in, base_out


class _Producer:
    """Writes the events in ``cfg.txn_events``-event transactions round-robin over the partitions,
    paced over ``cfg.produce_seconds``, then the flush event; inline or in a background thread."""

    def __init__(self, engine: Any, stream: str, cfg: Config, start: dt.datetime) -> None:
        self.producer = engine.producer(stream)
        self.cfg = cfg
        self.start = start
        self.produced = 0
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        cfg = self.cfg
        try:
            t0 = time.monotonic()
            batch: list[bytes] = []
            p = 0
            for i, ev in enumerate(generate(cfg.events, self.start, seed=cfg.seed)):
                batch.append(encode(ev))
                if len(batch) >= cfg.txn_events:
                    self.producer.instant(batch, partition=p)
                    p = (p + 1) % PARTITIONS
                    self.produced += len(batch)
                    batch = []
                    if cfg.produce_seconds > 0:
                        ahead = t0 + cfg.produce_seconds * (i + 1) / cfg.events - time.monotonic()
                        if ahead > 0:
                            time.sleep(ahead)
            if batch:
                self.producer.instant(batch, partition=p)
                self.produced += len(batch)
            self.producer.instant([encode(flush_event(self.start + dt.timedelta(hours=2)))], partition=0)
        except BaseException as exc:  # noqa: BLE001 - reported by the monitor
            self.error = exc
        finally:
            self.done.set()

    def start_thread(self) -> None:
        threading.Thread(target=self.run, name="demo-producer", daemon=True).start()

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


class _Job:
    """The Spark job as a child process tree: started, SIGKILLed and restarted on one checkpoint."""

    def __init__(self, cfg: Config, work: Path, src: str, dst: str, data: str) -> None:
        where = ["--endpoint", cfg.endpoint] if cfg.endpoint else ["--path", data]
        self.checkpoint = work / "checkpoint"
        self.argv = [sys.executable, "-m", "tstreams_embedded.demo.job", *where, "--input", src, "--output", dst,
                     "--checkpoint", str(self.checkpoint), "--max-rows", str(cfg.max_rows), "--trigger", cfg.trigger,
                     "--watermark", cfg.watermark, "--staging-ttl", str(cfg.staging_ttl)]
        self.env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                        PYSPARK_DRIVER_PYTHON=sys.executable)
        self.log = work / "spark-job.log"
        self.proc: Any = None

    def start(self) -> None:
        self.proc = start_job(self.argv, str(self.log), env=self.env)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the Spark job exited ({self.proc.returncode}); see {self.log}:\n"
                               f"{self.log.read_text(errors='replace')[-3000:]}")

    def kill_and_restart(self, engine: Any, dst: str, windows: int) -> dict[str, Any]:
        """SIGKILL every process group of the job, note where Spark and the sink stood, start it again."""
        marker_before = _marker(engine, dst, self.checkpoint)
        groups = kill_tree(self.proc)
        info = {
            "at_windows": windows,
            "groups": groups,
            "engine_marker": _marker(engine, dst, self.checkpoint),
            "marker_before_kill": marker_before,
            "spark_last_planned": _latest(self.checkpoint / "offsets"),
            "spark_last_committed": _latest(self.checkpoint / "commits"),
        }
        self.start()
        return info

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            kill_tree(proc)


def _monitor(cfg: Config, engine: Any, dst: str, job: _Job, producer: _Producer, expected_windows: int,
             t_start: float, res: Result) -> tuple[_Output, float | None, float | None]:
    """Follow the output until every window is out (or nothing moves); kill the job once on the way.

    Returns the output reader, when the first window appeared and when the last one did.
    """
    out = _Output(engine.backend, dst)
    bars = _Bars(cfg.progress, cfg.events, expected_windows)
    last_change = time.monotonic()
    first_output: float | None = None
    done_at: float | None = None
    try:
        while True:
            job.check_alive()
            producer.raise_error()
            if out.poll():
                last_change = time.monotonic()
                if first_output is None:
                    first_output = last_change
            bars.update(producer.produced, len(out.rows),
                        "waiting at staged txns of the killed job" if res.kill and out.blocked else "")
            if cfg.kill and not res.kill and len(out.rows) >= cfg.kill_at * expected_windows:
                res.kill = k = job.kill_and_restart(engine, dst, len(out.rows))
                bars.write(
                    f"SIGKILL -> Spark job process groups {k['groups']} after {k['at_windows']} windows; "
                    f"Spark had planned batch {k['spark_last_planned']}, recorded batch "
                    f"{k['spark_last_committed']}; the engine's sink marker is at batch {k['engine_marker']}")
                bars.write(f"restarted the Spark job from its checkpoint: pid {job.proc.pid}")
                last_change = time.monotonic()
            if producer.done.is_set() and len(out.rows) >= expected_windows and done_at is None:
                done_at = time.monotonic()
            if done_at is not None and time.monotonic() - done_at > 3.0:
                break  # a few more triggers: any duplicate would have shown up
            stalled = producer.done.is_set() and time.monotonic() - last_change > 120
            if stalled or time.monotonic() - t_start > cfg.timeout:
                bars.write("no new output for a long time: stopping to report what is missing")
                break
            time.sleep(0.25)
    finally:
        bars.close()
    return out, first_output, done_at


def run(cfg: Config, say: Callable[[str], None] = print) -> Result:
    """Run the pipeline once (see the package docstring); return what it measured."""
    from .. import spark as _spark  # noqa: F401 - fail early with the [spark] extra message

    res = Result()
    tmp_root = cfg.workdir or tempfile.mkdtemp(prefix="tstreams-demo-")
    work = Path(tmp_root)
    work.mkdir(parents=True, exist_ok=True)
    res.workdir = str(work)
    data = cfg.data or str(work / "data")
    engine = ts.connect(cfg.endpoint) if cfg.endpoint else ts.open(data)
    job: _Job | None = None
    try:
        src, dst = _stream_names(engine)
        engine.create_stream(src, partitions=PARTITIONS, description="demo page views (JSON)")
        engine.create_stream(dst, partitions=PARTITIONS, description="views per page per 5-minute window")
        say(f"engine: {'remote ' + cfg.endpoint if cfg.endpoint else 'embedded ' + data}; streams {src!r} -> "
            f"{dst!r} ({PARTITIONS} partitions each)")
        start = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
        res.events = cfg.events
        res.expected_windows = len(true_counts(encode(e) for e in generate(cfg.events, start, seed=cfg.seed)))

        producer = _Producer(engine, src, cfg, start)
        job = _Job(cfg, work, src, dst, data)
        t_start = time.monotonic()
        if cfg.produce_seconds <= 0:
            producer.run()
            producer.raise_error()
            res.seconds["produce"] = time.monotonic() - t_start
        job.start()
        t_job = time.monotonic()
        say(f"spark job started: pid {job.proc.pid} (process group {os.getpgid(job.proc.pid)}), log {job.log}")
        if cfg.produce_seconds > 0:
            producer.start_thread()

        out, first_output, done_at = _monitor(cfg, engine, dst, job, producer, res.expected_windows, t_start, res)
        res.seconds["job_start_to_all_windows"] = (done_at or time.monotonic()) - t_job
        if first_output is not None and done_at is not None:
            res.seconds["first_to_last_window"] = done_at - first_output
        job.stop()
        res.seconds["total"] = time.monotonic() - t_start
        _verify(engine.backend, src, out.rows, res)
        return res
    finally:
        if job is not None:
            job.stop()
        engine.close()
        if not cfg.keep and not cfg.workdir:
            shutil.rmtree(tmp_root, ignore_errors=True)


def _marker(engine: Any, stream: str, checkpoint: Path) -> int | None:
    from ..spark import sink_marker_key
    from ..spark.options import normalize_location

    return engine.backend.get_marker(sink_marker_key(stream, "checkpoint:" + normalize_location(str(checkpoint))))


def _verify(backend: Any, src: str, rows: list[dict], res: Result) -> None:
    truth = true_counts(_read_all(backend, src))
    seen: Counter = Counter()
    got: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["window_start"], r["page"])
        seen[key] += 1
        got.setdefault(key, r["views"])
    res.output_rows = len(rows)
    res.duplicated = sum(n - 1 for n in seen.values() if n > 1)
    res.missing = sum(1 for k in truth if k not in got)
    res.unexpected = sum(1 for k in got if k not in truth)
    res.wrong_counts = sum(1 for k, v in got.items() if k in truth and truth[k] != v)
    res.views_in = sum(truth.values())
    res.views_out = sum(r["views"] for r in rows if r["page"] != FLUSH_PAGE)
    by_window: dict[str, Counter] = {}
    for (w, page), n in got.items():
        by_window.setdefault(w, Counter())[page] = n
    for w in sorted(by_window):
        c = by_window[w]
        page, n = c.most_common(1)[0]
        res.table.append((w, sum(c.values()), len(c), page, n))


class _Bars:
    """Two tqdm bars (events produced, windows emitted) on a terminal; otherwise a plain
    progress line every few seconds."""

    def __init__(self, enabled: bool, events: int, windows: int) -> None:
        self.enabled = enabled
        self.totals = (events, windows)
        self.last_line = 0.0
        if enabled:
            from tqdm import tqdm

            self.tqdm = tqdm
            self.produced = tqdm(total=events, desc="events produced ", unit="ev", dynamic_ncols=True, position=0)
            self.windows = tqdm(total=windows, desc="windows emitted ", unit="win", dynamic_ncols=True, position=1)

    def update(self, produced: int, windows: int, note: str) -> None:
        if not self.enabled:
            if time.monotonic() - self.last_line >= 10.0:
                self.last_line = time.monotonic()
                print(f"progress: {produced:,}/{self.totals[0]:,} events produced, "
                      f"{windows}/{self.totals[1]} windows emitted {note}".rstrip(), flush=True)
            return
        self.produced.n = produced
        self.produced.refresh()
        self.windows.n = windows
        self.windows.set_postfix_str(note, refresh=False)
        self.windows.refresh()

    def write(self, msg: str) -> None:
        if self.enabled:
            self.tqdm.write(msg)
        else:
            print(msg, flush=True)

    def close(self) -> None:
        if self.enabled:
            self.produced.close()
            self.windows.close()
