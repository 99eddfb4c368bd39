"""Smoke test of the cluster-catchup benchmark suite at its tiny size (no timing asserts):
both variants run for real (ZooKeeper, a leader process, a joining node; env.copy) and pass
their checks (the joined node's state digest equals the leader's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.harness import run_suite

pytestmark = pytest.mark.timeout(300)


def test_catchup_suite_runs_at_tiny_size(tmp_path: Path) -> None:
    report = run_suite("cluster-catchup", mode="tiny", reps=1, workdir=tmp_path, progress=False)
    assert not report["skipped"], report["skipped"]
    results = report["scenarios"]["catchup"]["results"]
    assert set(results) == {"ours: empty node catch-up (snapshot)", "LMDB env.copy to local disk"}
    for name, r in results.items():
        assert r["ok"], (name, r.get("errors"))
        assert r["snapshot_mib"] > 0
    ours = results["ours: empty node catch-up (snapshot)"]
    assert 0 < ours["transfer_s"] <= ours["seconds"] <= ours["end_to_end_s"]
    assert report["goals"][0]["value"] is not None
