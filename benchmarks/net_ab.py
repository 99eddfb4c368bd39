"""Two versions of ``tstreams serve`` side by side under one client load, interleaved (issue 11).

``python -m benchmarks.net_ab A_TREE B_TREE [--kind pipelined] [--clients 4] [--reps 6]``
starts one ``tstreams serve --durability async`` from each source tree (``PYTHONPATH=TREE``,
e.g. a checkout of ``main`` and a work tree), both up at once, and runs the net suite's
clients (:func:`benchmarks.net.run_clients`) against them alternately, ``--reps`` times, in
an order that flips every repetition. Prints each server's median requests/s and server CPU
µs per request, and every repetition's figures: a change of the server judged under the
same machine load, which back-to-back suite runs on a shared machine do not give.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.measure import free_port
from benchmarks.net import prepare_stream, run_clients


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs=2, help="two source trees (each put on PYTHONPATH of its server)")
    ap.add_argument("--kind", default="pipelined", help="client kind (benchmarks.net._client)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--measure", type=float, default=2.0)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tstreams-net-ab-"))
    servers: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    try:
        for k, tree in enumerate(a.trees):
            endpoint = f"tcp://127.0.0.1:{free_port()}"
            ready = work / f"ready{k}"
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            p = subprocess.Popen([sys.executable, "-m", "tstreams_embedded.cli", "serve", "--data",
                                  str(work / f"data{k}"), "--bind", endpoint, "--durability", "async",
                                  "--ready-file", str(ready)], env=env, cwd=work)
            deadline = time.monotonic() + 60
            while not ready.exists():
                if p.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server of {tree} did not start")
                time.sleep(0.05)
            servers[tree] = (p, endpoint)
            prepare_stream(endpoint)
        cfg = {"warmup": 0.5, "measure": a.measure, "window": 100, "settle": 0.3}
        runs: dict[str, list[tuple[float, float]]] = {t: [] for t in servers}
        for rep in range(a.reps):
            for tree in (a.trees if rep % 2 == 0 else a.trees[::-1]):
                p, endpoint = servers[tree]
                r = run_clients(a.kind, endpoint, a.clients, cfg, [p.pid])
                runs[tree].append((r["rate"], r["server_cpu_us_per_req"] or 0.0))
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait(30)
    for tree, v in runs.items():
        print(f"{tree}: {statistics.median(x[0] for x in v):.0f} req/s, "
              f"{statistics.median(x[1] for x in v):.1f} µs server CPU/req (medians); "
              f"rates {[round(x[0]) for x in v]}, CPU {[round(x[1], 1) for x in v]}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
