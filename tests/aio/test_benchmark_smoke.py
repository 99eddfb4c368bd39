"""Smoke test of the ``aio`` benchmark suite at tiny sizes: every variant runs for real (in
its worker process, embedded and against ``tstreams serve``) and stores exactly what it
wrote (no timing asserts)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness import run_suite
from benchmarks.report import write


def test_aio_suite_runs_every_variant_and_stores_what_it_wrote(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    report = run_suite("aio", mode="tiny", reps=1, workdir=tmp_path / "work", progress=False)
    results = report["scenarios"]["aio_produce"]["results"]
    assert set(results) == {"aio, 64 coroutines", "sync, 8 threads", "aio remote, 64 coroutines",
                            "sync remote, 8 threads"}
    assert all(r["ok"] for r in results.values()), results
    paths = write(report, tmp_path / "out", charts=False)
    assert {p.name for p in paths} >= {"aio.json", "aio.md"}
