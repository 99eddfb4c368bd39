"""The one harness: run a suite's scenarios, interleaved and repeated, and summarise them.

Every (scenario, repetition) runs each variant once, in an order rotated per repetition, so
slow drifts in machine load hit every variant alike. A scenario with ``process`` isolation
runs each measurement in a fresh worker process (:mod:`benchmarks.worker`) with its own data
directory, deleted afterwards; with ``shared`` isolation each system is opened once for the
whole suite (servers, a Spark session) and measured in this process. Runs are summarised by
:func:`summarise` and judged by the suite's :class:`~benchmarks.scenarios.Goal` list.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.measure import NOISY_SPREAD, machine_info, median, spread
from benchmarks.scenarios import MODES, SUITES, Scenario, Variant
from benchmarks.systems import System, system_class
from benchmarks.worker import RESULT_PREFIX

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"
TIMEOUTS = {"tiny": 120, "quick": 300, "full": 900}


def run_worker(system: str, method: str, params: dict[str, Any], base: Path, timeout: float) -> dict:
    """Run one measurement in a fresh process; always returns a dict (``ok`` false on failure)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{system}-{method}-", dir=base))
    spec = {"system": system, "method": method, "params": params, "workdir": str(workdir)}
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    try:
        argv = [sys.executable, "-m", "benchmarks.worker", json.dumps(spec)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=str(REPO_ROOT), env=env)
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


class _Shared:
    """Systems opened once for a suite run (``shared`` isolation), each in its own directory."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.open: dict[str, System] = {}
        self.set_up: set[tuple[str, str]] = set()

    def run(self, system: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            s = self.open.get(system)
            if s is None:
                s = self.open[system] = system_class(system)(self.base / system)
                s.open()
            setup = getattr(s, f"setup_{method}", None)
            if setup is not None and (system, method) not in self.set_up:
                setup(**params)
                self.set_up.add((system, method))
            record = getattr(s, f"run_{method}")(**params).record()
            if not record["ok"]:
                record["error"] = f"check failed: stored/read {record['stored']}, expected {record['expected']}"
            return record
        except Exception:  # noqa: BLE001 - recorded, the suite carries on
            return {"ok": False, "error": traceback.format_exc(limit=8)}

    def close(self) -> None:
        for s in self.open.values():
            s.close()
        self.open.clear()
        spark = sys.modules.get("benchmarks.systems.spark_sources")
        if spark is not None:
            spark.stop_session()


def select(suite: str, systems: Sequence[str] | None = None, scenarios: Sequence[str] | None = None
           ) -> tuple[list[tuple[Scenario, list[Variant]]], dict[str, str]]:
    """The scenarios of ``suite`` (all, or those named) with the variants that can run here,
    and ``{system: reason}`` for the systems that cannot."""
    all_scenarios, _goals = SUITES[suite]
    chosen = [s for s in all_scenarios if not scenarios or s.id in scenarios]
    unknown = set(scenarios or ()) - {s.id for s in all_scenarios}
    if unknown:
        raise ValueError(f"unknown scenario(s) {sorted(unknown)} in suite {suite!r}")
    skipped: dict[str, str] = {}
    out = []
    for sc in chosen:
        variants = []
        for v in sc.variants:
            if systems and v.system not in systems:
                continue
            if v.system not in skipped:
                reason = system_class(v.system).available()
                if reason:
                    skipped[v.system] = reason
            if v.system not in skipped:
                variants.append(v)
        out.append((sc, variants))
    return out, skipped


def run_suite(
    suite: str = "peers",
    mode: str = "quick",
    reps: int = 3,
    systems: Sequence[str] | None = None,
    scenarios: Sequence[str] | None = None,
    workdir: str | os.PathLike | None = None,
    progress: bool = True,
    timeout: float | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run a suite and return its report (see :func:`aggregate`)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if reps < 1:
        raise ValueError("reps must be >= 1")
    plan_by_scenario, skipped = select(suite, systems, scenarios)
    timeout = timeout or TIMEOUTS[mode]
    machine = machine_info()
    started = time.time()
    plan = []
    for sc, variants in plan_by_scenario:
        if sc.warmup:
            plan += [(sc, -1, v) for v in variants]
        plan += [(sc, rep, variants[(i + rep) % len(variants)]) for rep in range(reps) for i in range(len(variants))]
    runs: dict[str, dict[str, list[dict]]] = {sc.id: {v.label: [] for v in vs} for sc, vs in plan_by_scenario}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), unit="run", dynamic_ncols=True, file=sys.stderr)
    base = Path(tempfile.mkdtemp(prefix=f"tstreams-bench-{suite}-", dir=workdir))
    shared = _Shared(base / "shared")
    try:
        for sc, rep, v in plan:
            if bar is not None:
                bar.set_description(f"{sc.id} #{rep + 1} {v.label}")
            method, params = sc.method_of(v), sc.params(mode, v)
            if sc.isolation == "process":
                limit = sc.timeouts[mode] if sc.timeouts and mode in sc.timeouts else timeout
                result = run_worker(v.system, method, params, base, limit)
            else:
                result = shared.run(v.system, method, params)
            if bar is not None:
                bar.update(1)
                if not result.get("ok"):
                    bar.write(f"FAILED {sc.id} {v.label}: {str(result.get('error'))[-500:]}")
            if say is not None:
                say(f"{sc.id} #{rep + 1} {v.label}: {result.get('rate') or 0:,.0f} {sc.unit}")
            if rep >= 0:
                result["rep"] = rep
                runs[sc.id][v.label].append(result)
    finally:
        shared.close()
        if bar is not None:
            bar.close()
        shutil.rmtree(base, ignore_errors=True)
    machine["loadavg_at_end"] = list(os.getloadavg())
    return aggregate(suite, mode, reps, plan_by_scenario, skipped, runs, machine, time.time() - started)


def summarise(runs: list[dict]) -> dict[str, Any]:
    """Medians over the good runs of one variant: rate (with min, max, spread and noisy),
    latency, memory, disk, time, per-item figures and every numeric ``extra``."""
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
        s["seconds"] = median([r["seconds"] for r in good])
        s["items"] = good[0]["items"]
        s["stored"] = [r["stored"] for r in good]
        if s["items"]:
            s["seconds_per_item"] = s["seconds"] / s["items"]
        if all("client_peak_rss" in r for r in good):
            s["client_peak_rss_mb"] = median([r["client_peak_rss"] / 2**20 for r in good])
            s["server_peak_rss_mb"] = median([r["server_peak_rss"] / 2**20 for r in good])
            s["peak_rss_mb"] = median([(r["client_peak_rss"] + r["server_peak_rss"]) / 2**20 for r in good])
            if s["items"]:
                s["mem_bytes_per_item"] = median([_growth(r) / r["items"] for r in good])
        if all("disk_bytes" in r for r in good):
            s["disk_bytes"] = median([r["disk_bytes"] for r in good])
            if s["items"]:
                s["disk_bytes_per_item"] = s["disk_bytes"] / s["items"]
        keys = {k for r in good for k, v in r.get("extra", {}).items() if isinstance(v, (int, float))}
        for k in sorted(keys):
            s[k] = median([r.get("extra", {}).get(k) for r in good])
    errors = [r.get("error") for r in runs if not r.get("ok")]
    if errors:
        s["errors"] = errors
    return s


def aggregate(
    suite: str,
    mode: str,
    reps: int,
    plan: Sequence[tuple[Scenario, Sequence[Variant]]],
    skipped: dict[str, str],
    runs: dict[str, dict[str, list[dict]]],
    machine: dict[str, Any],
    duration: float,
) -> dict[str, Any]:
    """Medians, spread (noisy if > 25%), ratios ours ÷ every other variant, and the goal verdicts."""
    report: dict[str, Any] = {
        "suite": suite,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mode": mode,
        "reps": reps,
        "duration_s": round(duration, 1),
        "noisy_threshold": NOISY_SPREAD,
        "machine": machine,
        "systems": {},
        "skipped": skipped,
        "scenarios": {},
        "goals": [],
    }
    for sc, variants in plan:
        for v in variants:
            cls = system_class(v.system)
            report["systems"][v.label] = {"system": v.system, "label": v.name or cls.label,
                                          "description": cls.description, "ours": cls.is_ours}
        results = {v.label: summarise(runs[sc.id][v.label]) for v in variants}
        ours = [v.label for v in variants if system_class(v.system).is_ours]
        ratios = {
            o: {n: (results[o]["rate_median"] / r["rate_median"] if results[o]["rate_median"] and r["rate_median"]
                    else None) for n, r in results.items() if n != o}
            for o in ours
        }
        report["scenarios"][sc.id] = {
            "title": sc.title,
            "description": sc.description,
            "unit": sc.unit,
            "latency_of": sc.latency,
            "per_item": sc.per_item,
            "params": sc.params(mode),
            "results": results,
            "ratios": ratios,
            "raw_runs": {n: [_strip(r) for r in runs[sc.id][n]] for n in results},
        }
    ran = {sc.id for sc, _ in plan}
    _scenarios, goals = SUITES[suite]
    report["goals"] = [g.evaluate(report["scenarios"][g.scenario]["results"]) for g in goals if g.scenario in ran]
    return report


def _growth(run: dict) -> int:
    """Memory added during the timed phase: client plus server, peak minus the level before."""
    client = run["client_peak_rss"] - run["client_rss_before"]
    return max(0, client + run["server_peak_rss"] - run["server_rss_before"])


_KEEP = ("rep", "ok", "items", "seconds", "rate", "latency", "stored", "expected", "client_peak_rss",
         "server_peak_rss", "client_rss_before", "server_rss_before", "disk_bytes", "setup_seconds",
         "wall_seconds", "extra", "error")


def _strip(run: dict) -> dict:
    return {k: run[k] for k in _KEEP if k in run}
