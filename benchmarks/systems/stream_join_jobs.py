"""The ``streams`` suite's stream–table join (issue 13): ours and Bytewax, each job in its own
child process (wall time with start-up, the child's own peak RSS), output checked exactly
against :func:`benchmarks.streams.join_events.reference`.

Input (untimed): the files of :mod:`benchmarks.streams.join_events`, generated once per size
for the whole run. Bytewax reads the combined file; ours reads the same rows and events from
the engine streams ``users`` and ``clicks`` (1 partition each, records keyed by user with the
JSON line as value, 1,000 per transaction), written before the timed run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from benchmarks.streams.join_events import check, generate, reference
from benchmarks.streams.output import read_stream_values
from benchmarks.systems.base import Outcome
from benchmarks.systems.stream_jobs import Bytewax, OursStreams, run_job


class _TableJoin:
    """``setup_table_join`` / ``run_table_join`` shared by both systems."""

    workdir: Path
    label: str
    module: str

    def setup_table_join(self, n_events: int, n_rows: int, seed: int = 13, **_params: Any) -> None:
        cache_dir = self.workdir.parent / "streams-join-input"  # shared by every run of the suite
        self.rows, self.events, self.combined = generate(cache_dir, n_events, n_rows, seed) \
            if not (cache_dir / f"combined-{n_events}-{n_rows}-{seed}.jsonl").exists() else \
            (cache_dir / f"{name}-{n_events}-{n_rows}-{seed}.jsonl" for name in ("rows", "events", "combined"))
        self.expected = reference(self.rows, self.events)
        self.prepare_join_input()

    def prepare_join_input(self) -> None:
        """Untimed: put the input where the job reads it."""

    def join_spec(self) -> dict[str, Any]:
        raise NotImplementedError

    def read_join_output(self, output: Path) -> list[tuple[int, str]]:
        with open(output, encoding="utf-8") as f:
            return [tuple(json.loads(line)) for line in f if line.strip()]  # type: ignore[misc]

    def run_table_join(self, n_events: int, n_rows: int, **_params: Any) -> Outcome:
        output = self.workdir / "join-output"
        spec = {"input": str(self.combined), "output": str(output), "workdir": str(self.workdir), **self.join_spec()}
        job = run_job(self.python(), self.module, spec, self.workdir / "logs", "join")
        checked = check(self.expected, self.read_join_output(output), self.label)
        return Outcome(items=n_events, seconds=job.wall_seconds, stored=checked, expected=len(self.expected),
                       extra={"job_peak_rss_mb": job.peak_rss_bytes / 2**20, "table_rows": n_rows,
                              "job_cpu_seconds": job.cpu_seconds, "load_1m": os.getloadavg()[0],
                              "job_process_seconds": job.result().get("process_seconds")})


class OursStreamsJoin(_TableJoin, OursStreams):
    name = "ours-streams-join"
    label = "tstreams_embedded.streams stream–table join (embedded, exactly-once, durable)"
    description = "b.table(users) + stream(clicks).join(table) -> to(); App(engine) exactly_once, durability sync"
    module = "benchmarks.streams.jobs.ours_join_job"

    def prepare_join_input(self) -> None:
        from tstreams_embedded.streams.records import pack_envelope

        with self.open_engine() as engine:
            for stream, path in (("users", self.rows), ("clicks", self.events)):
                engine.create_stream(stream, partitions=1)
                producer = engine.producer(stream, partition=0)
                batch: list[bytes] = []
                with open(path, "rb") as f:
                    for line in f:
                        value = line.rstrip(b"\n")
                        batch.append(pack_envelope(json.loads(value)["user"].encode(), value, 0, None))
                        if len(batch) == 1000:
                            producer.instant(batch, partition=0)
                            batch = []
                if batch:
                    producer.instant(batch, partition=0)

    def join_spec(self) -> dict[str, Any]:
        return {"data": str(self.data), "durability": "sync"}

    def read_join_output(self, output: Path) -> list[tuple[int, str]]:
        with self.open_engine() as engine:
            return [tuple(v) for v in read_stream_values(engine, "enriched")]  # type: ignore[misc]


class BytewaxJoin(_TableJoin, Bytewax):
    name = "bytewax-join"
    label = "Bytewax 0.21 join operator, recovery on (1-s snapshots)"
    description = "branch rows/events -> key_on(user) -> op.join(insert last, emit running) -> FileSink; SQLite 1-s"
    module = "benchmarks.streams.jobs.bytewax_join_job"

    def join_spec(self) -> dict[str, Any]:
        return {"recovery": True, "snapshot_s": 1.0}
