"""Smoke test of the benchmark harness at tiny sizes (no timing asserts).

It runs every peer scenario on every system for real (redis-server, SQLite, LMDB, ours
embedded and over ZeroMQ, each in its own worker process), then checks that the report is
well-formed JSON covering every system and scenario, and that each run stored or read
exactly the expected number of items. The engine suite is checked the same way.
"""

from __future__ import annotations

import json
import shutil

import pytest

from benchmarks.harness import run_suite, run_worker
from benchmarks.report import write
from benchmarks.scenarios import BY_ID, ENGINE_SCENARIOS, PEER_GOALS, SCENARIOS
from benchmarks.systems import OURS, PEERS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _expected(scenario_id: str, params: dict) -> int:
    if scenario_id == "concurrent":
        return params["threads"] * params["per_thread"]
    if scenario_id == "many_streams":
        return params["n_streams"]
    return params["n_items"]


@pytest.fixture(scope="module")
def peers_report(tmp_path_factory):
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is required (make test installs it)")
    work = tmp_path_factory.mktemp("bench-work")
    report = run_suite("peers", mode="tiny", reps=2, workdir=work, progress=False)
    out = tmp_path_factory.mktemp("bench-out")
    paths = write(report, out)
    return report, out, paths


def test_every_system_and_scenario_ran_and_stored_what_it_should(peers_report):
    report, out, _paths = peers_report
    loaded = json.loads((out / "peers.json").read_text())
    assert loaded["mode"] == "tiny" and loaded["reps"] == 2
    systems = set(loaded["systems"])
    assert {*PEERS, "ours-embedded"} <= systems, loaded["skipped"]
    assert "ours-zmq" in systems or "ours-zmq" in loaded["skipped"]
    assert set(loaded["scenarios"]) == {s.id for s in SCENARIOS}
    for sc_id, sc in loaded["scenarios"].items():
        expected = _expected(sc_id, sc["params"])
        assert set(sc["results"]) == systems
        for name in systems:
            runs = sc["raw_runs"][name]
            assert len(runs) == 2, (sc_id, name)
            for run in runs:
                assert run["ok"], (sc_id, name, run.get("error"))
                assert run["stored"] == expected == run["items"], (sc_id, name, run)
                assert run["rate"] > 0 and run["seconds"] > 0
                assert run["client_peak_rss"] > 0
            result = sc["results"][name]
            assert result["ok"] and result["rate_median"] > 0
            assert isinstance(result["noisy"], bool)
            if BY_ID[sc_id].latency:
                assert 0 < result["p50_ms"] <= result["p99_ms"]
            if sc_id == "many_streams":
                assert result["disk_bytes_per_item"] > 0 and result["mem_bytes_per_item"] >= 0
        for ours in (n for n in systems if n in OURS):
            assert set(sc["ratios"][ours]) == systems - {ours}
            assert all(r is not None and r > 0 for r in sc["ratios"][ours].values())
    # a server-based peer reports its server's memory
    assert loaded["scenarios"]["produce"]["results"]["redis-everysec"]["server_peak_rss_mb"] > 1
    machine = loaded["machine"]
    assert machine["cores"] >= 1 and machine["cpu_model"]
    assert machine["servers"]["redis-server"] and machine["servers"]["sqlite"]
    assert machine["packages"]["lmdb"] and machine["packages"]["redis"]
    assert len(loaded["goals"]) == len(PEER_GOALS)
    for g in loaded["goals"]:  # a goal with a bound has a verdict; one without is informational
        assert g["met"] in ((True, False) if g["required"] is not None else (None,)), g
        assert g["value"] is not None and g["value"] > 0, g


def test_markdown_and_plots_are_written(peers_report):
    report, out, paths = peers_report
    md = (out / "peers.md").read_text()
    for sc in SCENARIOS:
        assert sc.title in md
        png = out / f"peers_{sc.id}.png"
        assert png in paths and png.read_bytes()[:8] == PNG_MAGIC
    for name in report["systems"].values():
        assert name["label"] in md


def test_a_failed_check_is_reported_not_hidden(tmp_path):
    # raw LMDB asked for an item count that is not a multiple of the batch stores fewer items
    # than it claims: the harness must flag the run as failed.
    from benchmarks.scenarios import Scenario

    odd = Scenario("peers", "odd", "odd", "produce", "", (), {"tiny": {"n_items": 150, "batch": 100}})
    result = run_worker("lmdb-raw", odd.method, odd.params("tiny"), tmp_path, timeout=120)
    assert result["ok"] is False
    assert "check failed" in result["error"]


def test_engine_figures_tiny(tmp_path):
    report = run_suite("engine", mode="tiny", reps=1, workdir=tmp_path, progress=False)
    paths = write(report, tmp_path / "out")
    loaded = json.loads((tmp_path / "out" / "engine.json").read_text())
    assert set(loaded["scenarios"]) == {s.id for s in ENGINE_SCENARIOS}
    for sc_id, sc in loaded["scenarios"].items():
        assert sc["title"] and any(g["scenario"] == sc_id for g in loaded["goals"])
        assert any(n.startswith("raw") for n in sc["results"]) and any(n.startswith("ours") for n in sc["results"])
        for name, row in sc["results"].items():
            assert row["ok"], (sc_id, name, row.get("errors"))
            for run in sc["raw_runs"][name]:
                assert run["stored"] == run["items"] and run["rate"] > 0
    for g in loaded["goals"]:
        assert g["value"] is not None and g["value"] > 0, g
    assert loaded["scenarios"]["streams"]["results"]["ours engine.batch(), 1000 streams/commit"][
        "disk_bytes_per_item"] > 0
    assert paths[-1].name == "engine.png" and paths[-1].read_bytes()[:8] == PNG_MAGIC
