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


# --- streams suite ---------------------------------------------------------------------------
STREAMS_PEERS = ("bytewax", "pathway", "python-floor", "python-floor-orjson")


def test_streams_events_are_deterministic_and_the_reference_agrees_with_every_lateness_rule(tmp_path):
    from benchmarks.streams.events import MAX_DISORDER_MS, EventSpec, generate, reference

    spec = EventSpec(5_000, seed=7, n_late=6)
    generate(tmp_path / "a.jsonl", spec)
    generate(tmp_path / "b.jsonl", spec)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    events = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert len(events) == 5_000
    newest, behind = 0, []
    for e in events:
        behind.append(newest - e["ts"])
        newest = max(newest, e["ts"])
    late = [b for b in behind if b > MAX_DISORDER_MS]
    assert len(late) == 6 and min(late) > 300_000  # far behind: late under every rule
    expected = reference(tmp_path / "a.jsonl")  # raises if the lateness rules disagreed
    assert expected.late == 6 and expected.events == 5_000
    assert sum(expected.windows.values()) + sum(1 for _ in expected.open_at_end) + 6 == 5_000
    assert len(expected.open_at_end) == 1  # only the closing event's own window


def test_streams_check_rejects_missing_duplicated_wrong_and_extra_windows(tmp_path):
    from benchmarks.streams.events import EventSpec, ResultMismatch, check, generate, reference

    generate(tmp_path / "e.jsonl", EventSpec(2_000))
    expected = reference(tmp_path / "e.jsonl")
    rows = [(p, s, c) for (p, s), c in expected.windows.items()]
    assert check(expected, rows, "exact") == len(rows)
    (page, start, count) = rows[0]
    for bad, what in ((rows[1:], "1 missing"), (rows + [rows[0]], "1 duplicated"),
                      ([(page, start, count + 1)] + rows[1:], "1 wrong"),
                      (rows + [("/nowhere", start, 1)], "1 unexpected")):
        with pytest.raises(ResultMismatch, match=what):
            check(expected, bad, "bad")


def test_streams_a_wrong_job_fails_the_run(tmp_path):
    from benchmarks.scenarios import STREAMS_SCENARIOS

    params = {**STREAMS_SCENARIOS[0].params("tiny"), "drop_late": False}
    result = run_worker("python-floor", "windowed_count", params, tmp_path, timeout=120)
    assert result["ok"] is False
    assert "ResultMismatch" in result["error"] and "differs from the reference" in result["error"]


def test_streams_job_reports_its_cpu_time_and_imports_from_a_bytecode_cache(tmp_path):
    """On a shared machine wall time alone misleads: each job's CPU time (wait4) is reported
    beside it; and a job imports from bytecode, as an installed package does."""
    from benchmarks.scenarios import STREAMS_SCENARIOS
    from benchmarks.systems.stream_jobs import PYCACHE

    result = run_worker("python-floor", "windowed_count", STREAMS_SCENARIOS[0].params("tiny"), tmp_path,
                        timeout=120)
    assert result["ok"], result.get("error")
    assert 0 < result["extra"]["job_cpu_seconds"] < 60 and result["extra"]["load_1m"] >= 0
    assert list(PYCACHE.rglob("floor*.pyc"))


def test_streams_suite_tiny(tmp_path):
    import importlib.util
    import os

    from benchmarks.scenarios import STREAMS_GOALS

    report = run_suite("streams", mode="tiny", reps=1, workdir=tmp_path, progress=False)
    write(report, tmp_path / "out", charts=False)
    loaded = json.loads((tmp_path / "out" / "streams.json").read_text())
    skipped = loaded["skipped"]
    assert "python-floor" not in skipped
    for system in STREAMS_PEERS:
        if system in skipped and os.environ.get("CI"):
            pytest.fail(f"{system} must run in CI: {skipped[system]}")
    ours = importlib.util.find_spec("tstreams_embedded.streams") is not None
    assert ("ours-streams" in skipped) is not ours, skipped
    windowed = loaded["scenarios"]["windowed_count"]
    assert windowed["results"], skipped
    for name, row in windowed["results"].items():
        assert row["ok"], (name, row.get("errors"))
        for run in windowed["raw_runs"][name]:
            assert run["stored"] == run["expected"] == run["extra"]["windows"] > 0, (name, run)
            assert run["extra"]["late_dropped"] == 10 and run["extra"]["job_peak_rss_mb"] > 1
            assert run["items"] == windowed["params"]["n_events"] and run["rate"] > 0
    md = (tmp_path / "out" / "streams.md").read_text()
    assert "Windowed count" in md
    if ours:
        label = "ours (embedded, exactly-once, durable)"
        assert set(windowed["ratios"][label]) == set(windowed["results"]) - {label}
        for where in ("the app's process", "another process"):
            latency = loaded["scenarios"]["latency"]["results"][f"ours, producer in {where}"]
            assert latency["ok"] and 0 < latency["p50_ms"] <= latency["p99_ms"], latency
        recovery = loaded["scenarios"]["recovery"]["results"][label]
        assert recovery["ok"] and recovery["recovery_s"] > 0 and recovery["state_disk_mb"] > 0, recovery
        assert len(loaded["goals"]) == len(STREAMS_GOALS)
        assert all(g["value"] is not None for g in loaded["goals"] if "Pathway" not in g["goal"]
                   or "pathway" not in skipped)


def test_the_queues_suite_runs_every_system_at_tiny_size(tmp_path):
    """The work queue figure: ours, Redis consumer groups and SQLite each consume the whole
    backlog, and the ratio goal is evaluated (no timing asserted)."""
    report = run_suite("queues", mode="tiny", reps=1, workdir=tmp_path, progress=False)
    sc = report["scenarios"]["queue_receive_ack"]
    # ours (separate acks; acks riding on the next receive), Redis (always, everysec), SQLite
    assert len(sc["results"]) == 5, report.get("skipped")
    for runs in sc["raw_runs"].values():
        assert all(r["ok"] and r["stored"] == r["items"] == 1_000 for r in runs), runs
    assert any(g["scenario"] == "queue_receive_ack" and g["value"] is not None for g in report["goals"])
