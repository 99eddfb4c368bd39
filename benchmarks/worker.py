"""Run one (system, scenario) measurement in a fresh process and print its result as JSON.

A fresh interpreter per run keeps memory figures honest (peak RSS of this process and of
the system's server, reset after the untimed set-up) and keeps runs from warming each other.

    python -m benchmarks.worker '{"system": "lmdb-raw", "method": "produce",
                                  "params": {"n_items": 1000, "batch": 100}, "workdir": "/tmp/x"}'
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.measure import peak_rss_bytes, reset_peak_rss, rss_bytes

RESULT_PREFIX = "BENCH-RESULT "


def run_one(system_name: str, method: str, params: dict[str, Any], workdir: str) -> dict[str, Any]:
    """Set up, measure and check one run; return a JSON-able dict (``ok`` false on any error)."""
    from benchmarks.systems import system_class

    system = system_class(system_name)(Path(workdir))
    out: dict[str, Any] = {"system": system_name, "method": method, "params": params, "ok": False}
    try:
        t0 = time.perf_counter()
        system.open()
        setup = getattr(system, f"setup_{method}", None)
        if setup is not None:
            setup(**params)
        out["setup_seconds"] = time.perf_counter() - t0
        pids = system.server_pids()
        reset_peak_rss()
        for pid in pids:
            reset_peak_rss(pid)
        client_before = rss_bytes()
        server_before = sum(rss_bytes(p) for p in pids)
        outcome = getattr(system, f"run_{method}")(**params)
        client_peak = peak_rss_bytes()
        server_peak = sum(peak_rss_bytes(p) for p in pids)
        out.update(
            outcome.record(),
            client_rss_before=client_before,
            client_peak_rss=client_peak,
            server_rss_before=server_before,
            server_peak_rss=server_peak,
        )
        system.close()
        out["disk_bytes"] = system.disk_bytes()
        if not out["ok"]:
            out["error"] = f"check failed: stored/read {outcome.stored}, expected {outcome.expected}"
    except BaseException:
        out["error"] = traceback.format_exc(limit=8)
    finally:
        try:
            system.close()
        except BaseException:
            out.setdefault("error", traceback.format_exc(limit=8))
    return out


def main(argv: list[str] | None = None) -> int:
    spec = json.loads((argv if argv is not None else sys.argv[1:])[0])
    result = run_one(spec["system"], spec["method"], spec["params"], spec["workdir"])
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
