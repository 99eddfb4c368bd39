"""The whole Spark job (every process group of its tree) is SIGKILLed mid-stream, restarted
from its checkpoint, and the output holds every input item exactly once."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import pytest
from spark_helpers import JAVA_MISSING, fill, read_direct, spark_env

from tstreams_embedded.demo.procs import kill_tree, members, start_job
from tstreams_embedded.spark import sink_marker_key

JOB = str(Path(__file__).with_name("passthrough_job.py"))

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(JAVA_MISSING), reason=JAVA_MISSING or "")]


def _wait_for(cond, timeout: float, what: str, proc=None, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the Spark job exited early ({proc.returncode}):\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            tail = log.read_text()[-4000:] if log else ""
            raise AssertionError(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.1)


def _latest_batch(directory: Path) -> int:
    return max((int(p.name) for p in directory.iterdir() if p.name.isdigit()), default=-1)


def _idle(ck: Path, marker: int | None) -> bool:
    """Whether the streaming job committed every micro-batch it planned: its checkpoint's
    last planned batch (``offsets/N``) is committed in Spark's log and in the sink's marker."""
    planned = _latest_batch(ck / "offsets")
    return planned == _latest_batch(ck / "commits") == (marker if marker is not None else -1)


def test_sigkill_whole_job_and_restart_from_checkpoint(engine, data_dir, tmp_path):
    txns = fill(engine, "in", txns=80, items=20, partitions=2)  # 1600 items
    engine.create_stream("out", partitions=2)
    ck = tmp_path / "ck"
    log = tmp_path / "job.log"
    argv = [sys.executable, JOB, "path", str(data_dir), "in", "out", str(ck), "100"]
    marker = sink_marker_key("out", f"checkpoint:{ck}")
    backend = engine.backend

    proc = start_job(argv, str(log), env=spark_env())
    try:
        # Let a few micro-batches commit, then kill at a random moment inside the next ones.
        _wait_for(lambda: (backend.get_marker(marker) or -1) >= 3, 240, "batch 3 to commit", proc, log)
        time.sleep(random.uniform(0.0, 1.5))
        groups = kill_tree(proc)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    assert proc.returncode == -9
    assert len(groups) >= 2  # the job's group and PySpark's daemon group
    assert members(groups) == []
    committed_before = backend.get_marker(marker)
    partial = len(read_direct(engine, "out"))
    assert 0 < partial < 1600, f"the kill must land mid-stream: {partial} items out, marker {committed_before}"

    proc = start_job(argv, str(log), env=spark_env())
    try:
        want = sorted((p, v) for p, _, vs in txns for v in vs)
        _wait_for(lambda: len(read_direct(engine, "out")) >= len(want), 300, "all items in the output", proc, log)
        # every batch Spark planned has committed (a duplicate would come with one of them)
        _wait_for(lambda: _idle(ck, backend.get_marker(marker)), 120, "the job to commit every planned batch",
                  proc, log)
    finally:
        kill_tree(proc)
    got = sorted((p, v) for p, _, _, v in read_direct(engine, "out", wait_unblocked=30))
    dups = len(got) - len(set(got))
    assert len(got) == len(want), f"{len(got)} items for {len(want)} inputs ({dups} duplicates); log {log}"
    assert got == want
    assert backend.get_marker(marker) > committed_before
