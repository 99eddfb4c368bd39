"""The ``streams`` suite's systems: each runs its job program (:mod:`benchmarks.streams.jobs`)
in a child process, so wall time includes its start-up and peak RSS is the child's own
(``os.wait4``), then checks the output exactly against the plain-Python reference.

Input (untimed, in :meth:`StreamJob.setup_windowed_count`): the events file of
:mod:`benchmarks.streams.events`, generated once per size and seed for the whole suite run.
The peers read it as a file; ours reads the same lines from the engine stream ``views``
(1 partition, 1,000 events per transaction), loaded before the timed run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from benchmarks.streams.events import EventSpec, Expected, check, generate, reference
from benchmarks.streams.jobs import JOB_PREFIX
from benchmarks.streams.output import OutputReader, latency_loop, read_stream_values
from benchmarks.systems.base import Outcome, System

REPO_ROOT = Path(__file__).resolve().parents[2]
PATHWAY_PYTHON_ENV = "BENCH_PATHWAY_PYTHON"
"""Interpreter with Pathway installed; default ``<repo>/.venv-pathway/bin/python``, else this one."""
#: where job processes keep the bytecode of the modules they import (see :func:`job_env`)
PYCACHE = Path(tempfile.gettempdir()) / "tstreams-bench-pycache"


class JobFailed(RuntimeError):
    """A job program exited with an error or timed out."""


@dataclass
class JobRun:
    """One finished job process."""

    wall_seconds: float
    peak_rss_bytes: int
    returncode: int
    stdout: str
    stderr: str
    #: CPU time of the process (user + system, its own threads; from ``os.wait4``)
    cpu_seconds: float

    def result(self) -> dict[str, Any]:
        """The job's own ``JOB-RESULT`` fields (the last such line)."""
        lines = [ln for ln in self.stdout.splitlines() if ln.startswith(JOB_PREFIX)]
        return json.loads(lines[-1][len(JOB_PREFIX):]) if lines else {}


def job_env() -> dict[str, str]:
    """The job processes' environment: the repository on the path, and a bytecode cache
    (:data:`PYCACHE`) even where ``PYTHONDONTWRITEBYTECODE`` is set, as an installed package
    has one (pip compiles on install): without it every job compiles the project's modules
    from source at start-up (0.4-1 s on the shared machine), which peers installed from
    wheels never do. :func:`warm_up` fills it, untimed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def warm_up(python: str, modules: tuple[str, ...]) -> None:
    """Untimed: import ``modules`` once in a job's environment (their bytecode cached)."""
    subprocess.run([python, "-c", "; ".join(f"import {m}" for m in modules)], cwd=str(REPO_ROOT), env=job_env(),
                   capture_output=True, timeout=300, check=False)


def start_job(python: str, module: str, spec: dict[str, Any], log_dir: Path, tag: str) -> subprocess.Popen[bytes]:
    """Start ``python -m module SPEC`` with stdout/stderr to files in ``log_dir``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    out = open(log_dir / f"{tag}.out", "wb")  # noqa: SIM115 - closed by the caller via wait_job
    err = open(log_dir / f"{tag}.err", "wb")  # noqa: SIM115
    try:
        return subprocess.Popen([python, "-m", module, json.dumps(spec)], stdout=out, stderr=err,
                                cwd=str(REPO_ROOT), env=job_env())
    finally:
        out.close()
        err.close()


def wait_job(proc: subprocess.Popen[bytes], log_dir: Path, tag: str, started: float, timeout: float) -> JobRun:
    """Reap ``proc`` with ``os.wait4`` (its own peak RSS), killing it after ``timeout`` seconds."""
    timer = threading.Timer(timeout, lambda: _kill(proc.pid))
    timer.start()
    try:
        _pid, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout = (log_dir / f"{tag}.out").read_text(errors="replace")
    stderr = (log_dir / f"{tag}.err").read_text(errors="replace")
    return JobRun(wall, usage.ru_maxrss * 1024, proc.returncode, stdout, stderr,
                  usage.ru_utime + usage.ru_stime)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_job(python: str, module: str, spec: dict[str, Any], log_dir: Path, tag: str,
            timeout: float = 3600.0) -> JobRun:
    """Run a job program to completion; raises :class:`JobFailed` unless it exits 0."""
    started = time.perf_counter()
    proc = start_job(python, module, spec, log_dir, tag)
    job = wait_job(proc, log_dir, tag, started, timeout)
    if job.returncode != 0:
        raise JobFailed(f"{module} exited {job.returncode}: {job.stderr[-3000:]}")
    return job


@cache
def python_with(module: str, python: str) -> str | None:
    """None if ``python`` can import ``module``, else why not."""
    try:
        proc = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{python}: {e}"
    return None if proc.returncode == 0 else f"{python} cannot import {module}: {proc.stderr.strip()[-300:]}"


def pathway_python() -> str:
    """The interpreter the Pathway job runs with (see :data:`PATHWAY_PYTHON_ENV`)."""
    configured = os.environ.get(PATHWAY_PYTHON_ENV)
    if configured:
        return configured
    local = REPO_ROOT / ".venv-pathway" / "bin" / "python"
    return str(local) if local.exists() else sys.executable


class StreamJob(System):
    """A system of the ``streams`` suite: one job program run in a child process."""

    module: ClassVar[str] = ""
    requires: ClassVar[str | None] = None
    """A module the job's interpreter must import (None: nothing beyond the project)."""
    imports: ClassVar[tuple[str, ...]] = ()
    """What the job imports when it runs, imported once untimed first (:func:`warm_up`)."""

    @classmethod
    def python(cls) -> str:
        return sys.executable

    @classmethod
    def available(cls) -> str | None:
        return python_with(cls.requires, cls.python()) if cls.requires else None

    def job_spec(self) -> dict[str, Any]:
        """The system's options for its job program."""
        return {}

    # windowed count --------------------------------------------------------------------
    def setup_windowed_count(self, n_events: int, seed: int = 12, **_params: Any) -> None:
        spec = EventSpec(n_events, seed)
        cache_dir = self.workdir.parent / "streams-input"  # shared by every run of the suite
        cache_dir.mkdir(exist_ok=True)
        self.input = cache_dir / f"events-{n_events}-{seed}.jsonl"
        reference_file = self.input.with_suffix(".expected.json")
        if not reference_file.exists():
            generate(self.input, spec)
            ex = reference(self.input)
            reference_file.write_text(json.dumps({
                "windows": [[p, s, c] for (p, s), c in ex.windows.items()],
                "open_at_end": [list(k) for k in ex.open_at_end],
                "late": ex.late, "events": ex.events, "stream_time_ms": ex.stream_time_ms}))
        raw = json.loads(reference_file.read_text())
        self.expected = Expected({(p, s): c for p, s, c in raw["windows"]}, {(p, s) for p, s in raw["open_at_end"]},
                                 raw["late"], raw["events"], raw["stream_time_ms"])
        self.prepare_input()
        warm_up(self.python(), (self.module, *self.imports))

    def prepare_input(self) -> None:
        """Untimed: put the input where the job reads it (default: the file as it is)."""

    def run_windowed_count(self, n_events: int, **_params: Any) -> Outcome:
        output = self.workdir / "output"
        spec = {"input": str(self.input), "output": str(output), "workdir": str(self.workdir), **self.job_spec()}
        job = run_job(self.python(), self.module, spec, self.workdir / "logs", "job")
        checked = check(self.expected, self.read_rows(output), self.label)
        version = job.result().get("version")
        return Outcome(
            items=n_events, seconds=job.wall_seconds, stored=checked, expected=len(self.expected.windows),
            extra={"job_peak_rss_mb": job.peak_rss_bytes / 2**20, "job_cpu_seconds": job.cpu_seconds,
                   "load_1m": os.getloadavg()[0],
                   "windows": checked,
                   "late_dropped": self.expected.late, "job_process_seconds": job.result().get("process_seconds"),
                   **({"version": version} if version else {})},
        )

    def read_rows(self, output: Path) -> list[tuple[str, int, int]]:
        """The job's final windows as (page, window start ms, count)."""
        with open(output, encoding="utf-8") as f:
            return [tuple(json.loads(line)) for line in f if line.strip()]  # type: ignore[misc]


class PythonFloor(StreamJob):
    name = "python-floor"
    label = "plain Python, stdlib json"
    description = "single-threaded json.loads + dict counting per window, emit on stream time; no durability"
    module = "benchmarks.streams.jobs.floor"
    parser: ClassVar[str] = "json"

    def setup_windowed_count(self, n_events: int, seed: int = 12, drop_late: bool = True, **params: Any) -> None:
        self.drop_late = drop_late  # False: a deliberately wrong job (tests show the check rejects it)
        super().setup_windowed_count(n_events, seed, **params)

    def job_spec(self) -> dict[str, Any]:
        return {"parser": self.parser, "drop_late": self.drop_late}


class PythonFloorOrjson(PythonFloor):
    name = "python-floor-orjson"
    label = "plain Python, orjson"
    description = "the same with orjson.loads (the parser of the streams JSON serde when orjson is installed)"
    parser = "orjson"
    requires = "orjson"
    imports = ("orjson",)


class Bytewax(StreamJob):
    name = "bytewax"
    label = "Bytewax 0.21, recovery on (1-s snapshots)"
    description = ("count_window + EventClock + TumblingWindower, FileSource -> FileSink, SQLite recovery "
                   "with a 1-s epoch, 1 worker")
    module = "benchmarks.streams.jobs.bytewax_job"
    requires = "bytewax"
    imports = ("bytewax.operators", "bytewax.connectors.files", "bytewax.dataflow", "bytewax.operators.windowing")

    def job_spec(self) -> dict[str, Any]:
        return {"recovery": True, "snapshot_s": 1.0, "workers": 1}


class Pathway(StreamJob):
    name = "pathway"
    label = "Pathway, exactly_once_behavior"
    description = ("windowby(tumbling, instance=page, exactly_once_behavior(shift=grace)) + count, "
                   "filesystem persistence with 1-s snapshots; Python connector committing every n/400 events")
    module = "benchmarks.streams.jobs.pathway_job"
    requires = "pathway"

    @classmethod
    def python(cls) -> str:
        return pathway_python()

    def setup_windowed_count(self, n_events: int, seed: int = 12, threads: int = 1, **params: Any) -> None:
        self.threads = threads
        # commits close enough in event time that a late event never shares a commit with
        # the events that closed its window (see the job's docstring)
        self.commit_every = max(1, min(1000, n_events // 400))
        super().setup_windowed_count(n_events, seed, **params)

    def job_spec(self) -> dict[str, Any]:
        return {"threads": self.threads, "commit_every": self.commit_every, "persistence": True, "snapshot_ms": 1000}

    def read_rows(self, output: Path) -> list[tuple[str, int, int]]:
        from benchmarks.streams.jobs.pathway_job import read_output

        return read_output(str(output))


# --- ours -------------------------------------------------------------------------------------
class OursStreams(StreamJob):
    name = "ours-streams"
    label = "tstreams_embedded.streams (embedded, exactly-once, durable)"
    description = ("StreamsBuilder: group_by(page) -> TimeWindows(5 min, grace 10 s) -> count -> "
                   "suppress_until_window_closes -> to(); App(engine) exactly_once, durability sync")
    module = "benchmarks.streams.jobs.ours_job"
    imports = ("tstreams_embedded.streams",)
    is_ours = True

    @classmethod
    def available(cls) -> str | None:
        try:
            import tstreams_embedded.streams as streams
        except ImportError as e:
            return f"tstreams_embedded.streams cannot be imported yet ({e})"
        missing = [n for n in ("StreamsBuilder", "App", "TimeWindows") if not hasattr(streams, n)]
        return f"tstreams_embedded.streams lacks {', '.join(missing)}" if missing else None

    @property
    def data(self) -> Path:
        return self.workdir / "data"

    def open_engine(self) -> Any:
        import tstreams_embedded as ts

        return ts.open(str(self.data), durability="sync")

    def prepare_input(self) -> None:
        with self.open_engine() as engine:
            engine.create_stream("views", partitions=1)
            engine.create_stream("page-counts", partitions=1)
            producer = engine.producer("views", partition=0)
            batch: list[bytes] = []
            with open(self.input, "rb") as f:
                for line in f:
                    batch.append(line.rstrip(b"\n"))
                    if len(batch) == 1000:
                        producer.instant(batch, partition=0)
                        batch = []
            if batch:
                producer.instant(batch, partition=0)

    def job_spec(self) -> dict[str, Any]:
        return {"data": str(self.data), "topology": "count", "mode": "run", "durability": "sync"}

    def read_rows(self, output: Path) -> list[tuple[str, int, int]]:
        with self.open_engine() as engine:
            return [tuple(v) for v in read_stream_values(engine, "page-counts")]  # type: ignore[misc]

    # latency ---------------------------------------------------------------------------------
    def run_latency(self, n_records: int, commit_interval_ms: int | None = None, producer: str = "same-process",
                    **_params: Any) -> Outcome:
        """Closed loop: write a 1-record transaction, wait until its output update is visible.

        ``producer="same-process"``: the loop runs in the app's process (the embedded case; the
        app's commits wake the reader at once). ``"other-process"``: the loop runs here and
        the app in its own process."""
        from benchmarks.streams.events import BASE_MS, SIZE_MS

        with self.open_engine() as engine:
            engine.create_stream("views", partitions=1)
            engine.create_stream("page-counts", partitions=1)
        if producer == "same-process":
            spec = {"data": str(self.data), "mode": "latency", "topology": "updates", "durability": "sync",
                    "commit_interval_ms": commit_interval_ms, "n_records": n_records}
            job = run_job(sys.executable, self.module, spec, self.workdir / "logs", "latency", timeout=600.0)
            result = job.result()
            return Outcome(n_records, result["seconds"], result["latencies_ns"], stored=len(result["latencies_ns"]),
                           expected=n_records, extra={"job_peak_rss_mb": job.peak_rss_bytes / 2**20,
                                                      "start_seconds": result["start_seconds"],
                                                      "load_1m": os.getloadavg()[0]})
        if producer != "other-process":
            raise ValueError(f"producer must be 'same-process' or 'other-process', not {producer!r}")
        with self.open_engine() as engine:
            server = ServedApp(self, {"topology": "updates", "commit_interval_ms": commit_interval_ms})
            try:
                reader = OutputReader(engine, "page-counts")
                seconds, latencies = latency_loop(engine.producer("views", partition=0), reader, n_records,
                                                  BASE_MS, SIZE_MS)
            finally:
                server.stop()
            extra = {"job_peak_rss_mb": server.peak_rss_bytes / 2**20, "start_seconds": server.ready_seconds,
                     "load_1m": os.getloadavg()[0]}
        return Outcome(n_records, seconds, latencies, stored=len(latencies), expected=n_records, extra=extra)

    # recovery --------------------------------------------------------------------------------
    def run_recovery(self, state_mb: int, value_bytes: int = 1024, extra_records: int = 200,
                     **_params: Any) -> Outcome:
        """SIGKILL an app holding ``state_mb`` of state mid-processing, restart it, and time
        the first new output after the restart (process start included); then check that the
        output holds every key exactly once."""
        n_keys = max(1, state_mb * 2**20 // value_bytes)
        blob = "x" * value_bytes
        with self.open_engine() as engine:
            engine.create_stream("blobs", partitions=1)
            engine.create_stream("blob-acks", partitions=1)
            producer = engine.producer("blobs", partition=0)

            def write(first: int, n: int) -> None:
                for start in range(first, first + n, 100):
                    producer.instant([json.dumps({"k": f"k{i}", "seq": i, "blob": blob}).encode()
                                      for i in range(start, min(first + n, start + 100))], partition=0)

            write(0, n_keys)
            reader = OutputReader(engine, "blob-acks")
            first = ServedApp(self, {"topology": "state"}, tag="load")
            try:
                reader.wait_for(n_keys, timeout=3600.0)  # the state is built and committed
                write(n_keys, extra_records)              # more work in flight ...
                first.kill()                              # ... and SIGKILL
            finally:
                first.stop()
            state_bytes = self._disk()
            reader.poll()                                 # whatever the killed app committed
            write(n_keys + extra_records, 1)              # the probe: new input after the crash
            seen_before = reader.count
            started = time.perf_counter()
            second = ServedApp(self, {"topology": "state"}, tag="restart", wait_ready=False)
            try:
                reader.wait_for(seen_before + 1, timeout=600.0)
                recovery = time.perf_counter() - started
                total = n_keys + extra_records + 1
                reader.wait_for(total, timeout=600.0)
                ready = second.wait_ready(timeout=60.0)
            finally:
                second.stop()
            keys = [v[0] for v in reader.values]
            wanted = {f"k{i}" for i in range(total)}
            duplicated = len(keys) - len(set(keys))
            missing, unexpected = len(wanted - set(keys)), len(set(keys) - wanted)
            if duplicated or missing or unexpected:
                raise AssertionError(f"after SIGKILL: {duplicated} duplicated, {missing} missing and {unexpected} "
                                     f"unexpected outputs of {total} keys")
        return Outcome(1, recovery, stored=len(set(keys)), expected=total,
                       extra={"state_mb": state_mb, "state_disk_mb": state_bytes / 2**20, "keys": n_keys,
                              "recovery_s": recovery, "restart_app_start_s": ready,
                              "job_peak_rss_mb": second.peak_rss_bytes / 2**20})

    # scale-out -------------------------------------------------------------------------------
    def setup_scale_out(self, n_events: int, seed: int = 12, partitions: int = 2, **_params: Any) -> None:
        """The windowed count's input, keyed by page, on ``partitions`` partitions; the
        reference is computed per partition (a task's stream time is its partition's)."""
        from tstreams_embedded.streams import send_records
        from tstreams_embedded.streams.records import partition_of

        StreamJob.setup_windowed_count(self, n_events, seed)  # the input file (cached), not loaded
        parts = [self.workdir / f"partition-{p}.jsonl" for p in range(partitions)]
        files = [open(f, "w", encoding="utf-8") for f in parts]  # noqa: SIM115 - closed below
        try:
            with open(self.input, encoding="utf-8") as f:
                for line in f:
                    page = json.loads(line)["page"]
                    files[partition_of(page.encode(), partitions)].write(line)
        finally:
            for out in files:
                out.close()
        refs = [reference(f) for f in parts]
        self.expected = Expected({k: c for r in refs for k, c in r.windows.items()},
                                 {k for r in refs for k in r.open_at_end}, sum(r.late for r in refs),
                                 sum(r.events for r in refs), max(r.stream_time_ms for r in refs))
        self.partitions = partitions

        def records() -> Any:
            with open(self.input, encoding="utf-8") as f:
                for line in f:
                    event = json.loads(line)
                    yield (event["page"], event, event["ts"])

        self.records = records
        self.send = send_records

    def run_scale_out(self, n_events: int, processes: int = 1, **_params: Any) -> Outcome:
        """``processes`` instances of the keyed windowed count, each in its own process, run
        until idle on a fresh directory holding the input: rate = N / wall time from the
        start of the first to the end of the last (start-up included)."""
        import shutil

        shutil.rmtree(self.data, ignore_errors=True)
        with self.open_engine() as engine:  # untimed: the input
            engine.create_stream("views", partitions=self.partitions)
            engine.create_stream("page-counts", partitions=1)
            batch: list[Any] = []
            for record in self.records():
                batch.append(record)
                if len(batch) == 1000:
                    self.send(engine, "views", batch, key_serde="str", value_serde="json")
                    batch = []
            if batch:
                self.send(engine, "views", batch, key_serde="str", value_serde="json")
        started = time.perf_counter()
        procs = [start_job(sys.executable, self.module, {"data": str(self.data), "topology": "keyed-count",
                                                         "mode": "run", "durability": "sync",
                                                         "static_id": f"scale-{i}"},
                           self.workdir / "logs", f"scale-{processes}-{i}")
                 for i in range(processes)]
        jobs = [wait_job(proc, self.workdir / "logs", f"scale-{processes}-{i}", started, timeout=1800.0)
                for i, proc in enumerate(procs)]
        seconds = time.perf_counter() - started
        for job in jobs:
            if job.returncode != 0:
                raise JobFailed(f"a scale-out instance exited {job.returncode}: {job.stderr[-3000:]}")
        checked = check(self.expected, self.read_rows(self.workdir / "output"), self.label)
        return Outcome(n_events, seconds, stored=checked, expected=len(self.expected.windows),
                       extra={"processes": processes, "windows": checked,
                              "job_peak_rss_mb": max(j.peak_rss_bytes for j in jobs) / 2**20})

    # rebalance -------------------------------------------------------------------------------
    def run_rebalance(self, lease_ms: int, **_params: Any) -> Outcome:
        """Two instances of the app (``updates`` topology, 2 input partitions, one task each)
        run in their own processes; one is SIGKILLed and, at that moment, a probe record is
        written to the input partition of its task: time from the kill to the probe's output
        (the survivor must notice the dead member, take the task's lease when it expires,
        open the task at its last commit and process the probe). Every record's update must
        be there exactly once."""
        from benchmarks.streams.events import BASE_MS
        from tstreams_embedded.streams.app_members import read_group, static_of

        def event(page: str, i: int) -> bytes:
            return json.dumps({"page": page, "ts": BASE_MS + i}).encode()

        with self.open_engine() as engine:
            engine.create_stream("views", partitions=2)
            engine.create_stream("page-counts", partitions=1)
            options = {"topology": "updates", "lease_ms": lease_ms, "commit_interval_ms": 1}
            apps = {name: ServedApp(self, {**options, "static_id": name}, tag=name) for name in ("a", "b")}
            try:
                def owners() -> dict[int, str | None]:
                    view = read_group(engine.backend, "pageviews-latency", lease_ms)
                    return {p: static_of(o) if (o := view.owner(p)) else None for p in range(2)}

                deadline = time.monotonic() + 60
                while sorted(map(str, owners().values())) != ["a", "b"]:
                    if time.monotonic() > deadline:
                        raise JobFailed(f"the two instances did not split the tasks: {owners()}")
                    time.sleep(0.01)
                moved = next(p for p, o in owners().items() if o == "a")
                reader = OutputReader(engine, "page-counts")
                producer = engine.producer("views")
                for p in range(2):  # both tasks work
                    producer.instant([event(f"/warm-{p}", p)], partition=p)
                reader.wait_for(2, timeout=60.0)
                apps["a"].kill()
                started = time.perf_counter()
                producer.instant([event("/probe", 2)], partition=moved)
                reader.wait_for(3, timeout=lease_ms / 1000 + 60.0)
                seconds = time.perf_counter() - started
            finally:
                for app in apps.values():
                    app.stop()
            pages = sorted(v[0] for v in reader.values)
            if pages != ["/probe", "/warm-0", "/warm-1"]:
                raise AssertionError(f"after the rebalance the outputs are {pages}, not each record's update once")
        lease = lease_ms / 1000
        return Outcome(1, seconds, stored=len(pages), expected=3,
                       extra={"lease_s": lease, "over_lease_s": seconds - lease, "rebalance_s": seconds})

    def _disk(self) -> int:
        from benchmarks.measure import disk_bytes

        return disk_bytes(self.data)


class OursStreamsValuesUnsealed(OursStreams):
    """The same job with every stored value but the chunks written and read without its
    seal: the baseline of what value seals cost on a streams app's state-store path."""

    name = "ours-streams-values-unsealed"
    label = "tstreams_embedded.streams, values without checksum"

    def open_engine(self) -> Any:
        from benchmarks.systems.ours import switch_off_value_seals

        switch_off_value_seals()
        return super().open_engine()

    def job_spec(self) -> dict[str, Any]:
        return {**super().job_spec(), "values_unsealed": True}


class ServedApp:
    """Ours in ``serve`` mode in a child process: started, waited for (``READY``), stopped by PID."""

    def __init__(self, system: OursStreams, options: dict[str, Any], tag: str = "serve",
                 wait_ready: bool = True) -> None:
        self.log_dir = system.workdir / "logs"
        self.tag = tag
        spec = {"data": str(system.data), "mode": "serve", "durability": "sync", **options}
        self.started = time.perf_counter()
        self.proc = start_job(sys.executable, OursStreams.module, spec, self.log_dir, tag)
        self.peak_rss_bytes = 0
        self.ready_seconds: float | None = None
        if wait_ready:
            self.wait_ready(timeout=120.0)

    def wait_ready(self, timeout: float) -> float:
        """Seconds the app took inside its process to start (imports, engine open,
        ``app.start()``), as the job reports it once it is READY."""
        from benchmarks.measure import wait_until

        out = self.log_dir / f"{self.tag}.out"

        def ready() -> bool:
            if self.proc.poll() is not None:
                err = (self.log_dir / f"{self.tag}.err").read_text(errors="replace")
                raise JobFailed(f"streams app exited {self.proc.returncode}: {err[-3000:]}")
            return out.exists() and "READY" in out.read_text(errors="replace")

        if self.ready_seconds is None:
            if not wait_until(ready, timeout=timeout):
                raise JobFailed(f"streams app not ready after {timeout} s")
            lines = [ln for ln in out.read_text().splitlines() if ln.startswith(JOB_PREFIX)]
            self.ready_seconds = float(json.loads(lines[-1][len(JOB_PREFIX):])["start_seconds"])
        return self.ready_seconds

    def kill(self) -> None:
        _kill(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM (a clean stop), then reap; SIGKILL after 60 s."""
        if self.proc.returncode is not None:
            return
        try:
            os.kill(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        job = wait_job(self.proc, self.log_dir, self.tag, self.started, timeout=60.0)
        self.peak_rss_bytes = job.peak_rss_bytes
