"""The peer scoreboard: run every scenario on every system, interleaved and repeated.

Each (scenario, repetition, system) is one fresh worker process (:mod:`benchmarks.worker`)
with its own data directory, deleted afterwards. Within a repetition the systems run one
after another in an order rotated per repetition, so slow drifts in machine load hit every
system alike. Results are aggregated into medians, spread and ratios by :func:`aggregate`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.measure import NOISY_SPREAD, machine_info, median, spread
from benchmarks.scenarios import BY_ID, SCENARIOS, Scenario
from benchmarks.systems import OURS, PEERS, REGISTRY, system_class
from benchmarks.worker import RESULT_PREFIX

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"

# (scenario, ours, peer, minimum ratio ours/peer, text). A ratio must be >= the minimum
# (for "ahead of", strictly greater than 1.0).
GOALS: tuple[tuple[str, str, str, float, str], ...] = (
    ("produce", "ours-embedded", "redis-everysec", 3.0, "ours >= 3x Redis Streams (everysec, MULTI/EXEC)"),
    ("produce", "ours-embedded", "sqlite-wal-full", 1.2, "ours >= 1.2x SQLite WAL FULL"),
    ("consume", "ours-embedded", "redis-everysec", 5.0, "ours >= 5x Redis Streams"),
    ("consume", "ours-embedded", "sqlite-wal-full", 2.0, "ours >= 2x SQLite"),
    ("exactly_once", "ours-embedded", "redis-everysec", 1.0, "ours ahead of Redis (everysec)"),
    ("exactly_once", "ours-embedded", "redis-always", 1.0, "ours ahead of Redis (always)"),
    ("exactly_once", "ours-embedded", "sqlite-wal-full", 1.0, "ours ahead of SQLite"),
)


def available_systems(names: Sequence[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(systems that can run here, {skipped system: reason})."""
    names = list(names) if names else [*OURS, *PEERS]
    ok, skipped = [], {}
    for name in names:
        if name not in REGISTRY:
            raise ValueError(f"unknown system {name!r}; known: {', '.join(REGISTRY)}")
        reason = system_class(name).available()
        if reason:
            skipped[name] = reason
        else:
            ok.append(name)
    return ok, skipped


def run_worker(system: str, scenario: Scenario, params: dict[str, Any], base: Path, timeout: float) -> dict:
    """Run one measurement in a fresh process; always returns a dict (``ok`` false on failure)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{system}-{scenario.id}-", dir=base))
    spec = {"system": system, "method": scenario.method, "params": params, "workdir": str(workdir)}
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.worker", json.dumps(spec)],
            capture_output=True, text=True, timeout=timeout, cwd=str(REPO_ROOT), env=env,
        )  # fmt: skip
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
        if lines:
            result = json.loads(lines[-1][len(RESULT_PREFIX) :])
        else:
            result = {"ok": False, "error": f"worker exited {proc.returncode}: {proc.stderr[-2000:]}"}
    except subprocess.TimeoutExpired:
        result = {"ok": False, "error": f"worker timed out after {timeout:.0f} s"}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["wall_seconds"] = time.perf_counter() - t0
    return result


def run_peers(
    mode: str = "quick",
    reps: int = 3,
    systems: Sequence[str] | None = None,
    scenarios: Sequence[str] | None = None,
    workdir: str | os.PathLike | None = None,
    progress: bool = True,
    timeout: float | None = None,
    on_result: Callable[[str, str, int, dict], None] | None = None,
) -> dict[str, Any]:
    """Run the peer scenarios and return the aggregated report (see :func:`aggregate`).

    ``mode`` is ``"tiny"`` (tests), ``"quick"`` (about 2 minutes) or ``"full"`` (at most 15).
    """
    if mode not in ("tiny", "quick", "full"):
        raise ValueError(f"mode must be tiny, quick or full, not {mode!r}")
    if reps < 1:
        raise ValueError("reps must be >= 1")
    chosen = [BY_ID[s] for s in scenarios] if scenarios else list(SCENARIOS)
    names, skipped = available_systems(systems)
    if timeout is None:
        timeout = {"tiny": 120, "quick": 300, "full": 900}[mode]
    machine = machine_info()
    started = time.time()
    plan = [(sc, rep, names[(i + rep) % len(names)]) for sc in chosen for rep in range(reps)
            for i in range(len(names))]  # fmt: skip
    runs: dict[str, dict[str, list[dict]]] = {sc.id: {n: [] for n in names} for sc in chosen}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), unit="run", dynamic_ncols=True, file=sys.stderr)
    base = Path(tempfile.mkdtemp(prefix="tstreams-bench-", dir=workdir))
    try:
        for sc, rep, name in plan:
            if bar is not None:
                bar.set_description(f"{sc.id} #{rep + 1} {name}")
            result = run_worker(name, sc, sc.params(mode), base, timeout)
            result["rep"] = rep
            runs[sc.id][name].append(result)
            if on_result is not None:
                on_result(sc.id, name, rep, result)
            if bar is not None:
                bar.update(1)
                if not result.get("ok"):
                    bar.write(f"FAILED {sc.id} {name}: {str(result.get('error'))[-500:]}")
    finally:
        if bar is not None:
            bar.close()
        shutil.rmtree(base, ignore_errors=True)
    machine["loadavg_at_end"] = list(os.getloadavg())
    return aggregate(mode, reps, chosen, names, skipped, runs, machine, time.time() - started)


def _summarise(scenario: Scenario, runs: list[dict]) -> dict[str, Any]:
    good = [r for r in runs if r.get("ok")]
    rates = [r["rate"] for r in good]
    s: dict[str, Any] = {
        "ok": len(good) == len(runs) and bool(good),
        "reps_ok": len(good),
        "rate_median": median(rates),
        "rate_min": min(rates) if rates else None,
        "rate_max": max(rates) if rates else None,
        "rates": rates,
        "spread": spread(rates),
    }
    s["noisy"] = s["spread"] > NOISY_SPREAD
    lat = [r["latency"] for r in good if r.get("latency")]
    if lat:
        s["p50_ms"] = median([x["p50_ms"] for x in lat])
        s["p99_ms"] = median([x["p99_ms"] for x in lat])
    if good:
        s["client_peak_rss_mb"] = median([r["client_peak_rss"] / 2**20 for r in good])
        s["server_peak_rss_mb"] = median([r["server_peak_rss"] / 2**20 for r in good])
        s["peak_rss_mb"] = median([(r["client_peak_rss"] + r["server_peak_rss"]) / 2**20 for r in good])
        s["disk_bytes"] = median([r["disk_bytes"] for r in good])
        s["seconds"] = median([r["seconds"] for r in good])
        s["items"] = good[0]["items"]
        s["stored"] = [r["stored"] for r in good]
        if scenario.id == "many_streams":
            n = good[0]["items"]
            s["disk_bytes_per_stream"] = s["disk_bytes"] / n
            s["mem_bytes_per_stream"] = median([_growth(r) / n for r in good])
            extra = [r.get("extra", {}).get("redis_used_memory_per_stream") for r in good]
            if any(x is not None for x in extra):
                s["redis_used_memory_per_stream"] = median(extra)
    errors = [r.get("error") for r in runs if not r.get("ok")]
    if errors:
        s["errors"] = errors
    return s


def aggregate(
    mode: str,
    reps: int,
    scenarios: Sequence[Scenario],
    systems: Sequence[str],
    skipped: dict[str, str],
    runs: dict[str, dict[str, list[dict]]],
    machine: dict[str, Any],
    duration: float,
) -> dict[str, Any]:
    """Medians, spread (noisy if > 25%), ratios ours/peer and the goal verdicts."""
    report: dict[str, Any] = {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mode": mode,
        "reps": reps,
        "duration_s": round(duration, 1),
        "noisy_threshold": NOISY_SPREAD,
        "machine": machine,
        "systems": {
            n: {"label": system_class(n).label, "description": system_class(n).description, "ours": n in OURS}
            for n in systems
        },
        "skipped": skipped,
        "scenarios": {},
        "goals": [],
    }
    for sc in scenarios:
        results = {n: _summarise(sc, runs[sc.id][n]) for n in systems}
        ratios: dict[str, dict[str, float | None]] = {}
        for ours in (n for n in systems if n in OURS):
            mine = results[ours]["rate_median"]
            ratios[ours] = {
                peer: (mine / results[peer]["rate_median"] if mine and results[peer]["rate_median"] else None)
                for peer in systems
                if peer != ours
            }
        report["scenarios"][sc.id] = {
            "title": sc.title,
            "description": sc.description,
            "unit": sc.unit,
            "latency_of": sc.latency,
            "params": sc.params(mode),
            "results": results,
            "ratios": ratios,
            "raw_runs": {n: [_strip(r) for r in runs[sc.id][n]] for n in systems},
        }
    for sc_id, ours, peer, minimum, text in GOALS:
        sc = report["scenarios"].get(sc_id)
        ratio = sc["ratios"].get(ours, {}).get(peer) if sc else None
        met = None if ratio is None else (ratio > minimum if minimum == 1.0 else ratio >= minimum)
        report["goals"].append(
            {"scenario": sc_id, "ours": ours, "peer": peer, "goal": text, "required": minimum,
             "ratio": ratio, "met": met}
        )  # fmt: skip
    ms = report["scenarios"].get("many_streams")
    if ms and "ours-embedded" in ms["results"]:
        r = ms["results"]["ours-embedded"]
        report["goals"].append(
            {"scenario": "many_streams", "ours": "ours-embedded", "peer": None,
             "goal": f"ours completes {ms['params']['n_streams']:,} streams with disk and memory per stream reported",
             "required": None, "ratio": None,
             "met": bool(r.get("ok")) and "disk_bytes_per_stream" in r}
        )  # fmt: skip
    return report


def _growth(run: dict) -> int:
    """Memory added during the timed phase: client plus server, peak minus the level before."""
    client = run["client_peak_rss"] - run["client_rss_before"]
    return max(0, client + run["server_peak_rss"] - run["server_rss_before"])


def _strip(run: dict) -> dict:
    keep = ("rep", "ok", "items", "seconds", "rate", "latency", "stored", "expected", "client_peak_rss",
            "server_peak_rss", "client_rss_before", "server_rss_before", "disk_bytes", "setup_seconds",
            "wall_seconds", "extra", "error")  # fmt: skip
    return {k: run[k] for k in keep if k in run}
