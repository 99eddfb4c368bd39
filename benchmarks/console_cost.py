"""What serving the web console costs the engine's write throughput (issue 23).

``python -m benchmarks.console_cost [--clients 4] [--reps 3] [--measure 2]`` starts two
``tstreams serve --durability async`` from this tree, both up at once: *plain* (no
``--http``) and *console* (``--http``, its lag sampler running, and every page of the console
refreshed once a second by a poller: overview, streams, the stream, the consumers, a
consumer's detail and lag history, a page of the message browser). The net suite's
pipelined write clients (:func:`benchmarks.net.run_clients`) run against them alternately,
``--reps`` times, in an order that flips every repetition. Prints each server's median
writes/s and server CPU µs per write, their ratio, every repetition's figures, and the
console's own reads: the time its fresh page reads and its lag samples took, as a share of
the time the poller ran (``/api/overview``'s ``reads``; the share the read budget bounds).
The target: the console costs at most 5 % of the write throughput. ``--control`` runs the
same comparison with neither server serving the console (an A/A run: the noise and any bias
of the pair of servers on the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from benchmarks.measure import free_port
from benchmarks.net import STREAM, prepare_stream, run_clients

PAGES = ("overview", "streams", f"streams/{STREAM}", "consumers", f"streams/{STREAM}/consumers/watch",
         f"streams/{STREAM}/consumers/watch/lag", f"streams/{STREAM}/partitions/0/messages?format=hex")


def poll(port: int, stop: threading.Event, counts: list[int]) -> None:
    """Refresh every page once a second until ``stop``."""
    while not stop.is_set():
        started = time.monotonic()
        for page in PAGES:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/{page}", timeout=30) as r:
                r.read()
            counts[0] += 1
        stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--measure", type=float, default=2.0)
    ap.add_argument("--control", action="store_true", help="neither server serves the console (A/A)")
    a = ap.parse_args()
    import tstreams_embedded as ts

    work = Path(tempfile.mkdtemp(prefix="tstreams-console-cost-"))
    http_port = free_port()
    servers: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    stop = threading.Event()
    counts = [0]
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "console": []}
    poller: threading.Thread | None = None
    try:
        for name in runs:
            endpoint = f"tcp://127.0.0.1:{free_port()}"
            ready = work / f"{name}.ready"
            extra = ["--http", f"127.0.0.1:{http_port}"] if name == "console" and not a.control else []
            p = subprocess.Popen([sys.executable, "-m", "tstreams_embedded.cli", "serve", "--data",
                                  str(work / name), "--bind", endpoint, "--durability", "async",
                                  "--ready-file", str(ready), "--log-level", "WARNING", *extra], cwd=work)
            deadline = time.monotonic() + 60
            while not ready.exists():
                if p.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the {name} server did not start")
                time.sleep(0.05)
            servers[name] = (p, endpoint)
            prepare_stream(endpoint)
            with ts.connect(endpoint, timeout=30) as engine:  # a consumer for the consumer pages
                engine.producer(STREAM, partition=0).instant([b"x"])
                consumer = engine.consumer(STREAM, name="watch", partitions=[0])
                consumer.get_transaction(0)
                consumer.checkpoint()
        poller = threading.Thread(target=poll, args=(http_port, stop, counts), daemon=True)
        polled_from = time.monotonic()
        if not a.control:
            poller.start()
        cfg = {"warmup": 0.5, "measure": a.measure, "window": 100, "settle": 0.3}
        for rep in range(a.reps):
            for name in (("plain", "console") if rep % 2 == 0 else ("console", "plain")):
                p, endpoint = servers[name]
                r = run_clients("pipelined", endpoint, a.clients, cfg, [p.pid])
                runs[name].append((r["rate"], r["server_cpu_us_per_req"] or 0.0))
        reads = {"fresh": 0, "kept": 0, "read_seconds": 0.0, "sample_seconds": 0.0}
        if not a.control:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/api/overview", timeout=30) as resp:
                reads = json.loads(resp.read())["reads"]
        polled = time.monotonic() - polled_from
    finally:
        stop.set()
        if poller is not None and poller.is_alive():
            poller.join()  # no request in flight when the servers stop
        for p, _ in servers.values():
            p.terminate()
            p.wait(30)
    medians = {name: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
               for name, v in runs.items()}
    for name, v in runs.items():
        print(f"{name}: {medians[name][0]:.0f} writes/s, {medians[name][1]:.1f} µs server CPU/write (medians); "
              f"rates {[round(x[0]) for x in v]}, CPU {[round(x[1], 1) for x in v]}")
    print(f"console/plain throughput: {medians['console'][0] / medians['plain'][0]:.3f} "
          f"(target >= 0.95); CPU per write console/plain: {medians['console'][1] / medians['plain'][1]:.3f}; "
          f"{counts[0]} console requests; load average {os.getloadavg()[0]:.2f}")
    print(f"console reads over {polled:.1f} s: {reads['fresh']} fresh ({reads['read_seconds']:.2f} s), "
          f"{reads['kept']} reused, lag samples {reads['sample_seconds']:.2f} s: "
          f"{(reads['read_seconds'] + reads['sample_seconds']) / polled:.1%} of the time")


if __name__ == "__main__":
    main()
