"""Profile a network server under one of the net suite's client loads (issue 11).

``python -m benchmarks.net_profile [--server ours|echo] [--kind pipelined|sync-now|...]``
starts the server process (``tstreams serve`` or the echo server of :mod:`benchmarks.net`),
drives it with the suite's own client processes (:func:`benchmarks.net.run_clients`) and
samples it with ``py-spy`` (``--profiler py-spy``, the default; needs ``py-spy`` on PATH or
beside the interpreter) for the measured window. It prints requests per second, the
server's CPU µs per request and, per function, the share of the server's samples and the
µs per request that share stands for (self and inclusive). ``--profiler cprofile`` runs
the server under cProfile instead and prints Python calls per request (cProfile slows
every call, so its times are not the server's real ones; its call counts are exact).

Hand-kept headlines of these profiles: ``benchmarks/results/net-notes.md``.
"""

from __future__ import annotations

import argparse
import collections
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.measure import free_port
from benchmarks.net import Proc, echo_server, moebius_server, prepare_stream, run_clients, start_ours


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.path.exists(found):
        raise SystemExit("py-spy is not installed (pip install py-spy)")
    return found


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each thread of ``pid``, by thread name
    (threads of the same name summed)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = collections.defaultdict(float)
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out["main" if tid == str(pid) else name] += (int(fields[11]) + int(fields[12])) / tick
    return out


def _summarise_raw(path: Path, cpu_us_per_req: float, top: int) -> str:
    """Self and inclusive shares of a py-spy ``--format raw`` (collapsed stacks) file."""
    self_n: collections.Counter[str] = collections.Counter()
    incl_n: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  if " (" in f else f for f in stack.split(";")]
        total += n
        self_n[frames[-1]] += n
        for f in set(frames):
            incl_n[f] += n
    out = [f"{total} samples (Python threads, idle excluded); µs/req = share x {cpu_us_per_req:.1f} µs "
           "of the main thread's CPU per request"]
    for title, counter in (("self", self_n), ("inclusive", incl_n)):
        out.append(f"\n  top {top} by {title} time:")
        shown = 0
        for name, n in counter.most_common():
            share = n / total if total else 0.0
            if title == "inclusive" and share > 0.9:
                continue  # the process's own entry frames
            shown += 1
            if shown > top:
                break
            out.append(f"    {share * 100:5.1f}%  {share * cpu_us_per_req:6.2f} µs/req  {name}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", choices=("ours", "echo", "moebius"), default="ours")
    ap.add_argument("--kind", default="pipelined",
                    help="client kind of benchmarks.net._client: pipelined, sync-now, sync-read, sync-write, ...")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--durability", default="async")
    ap.add_argument("--profiler", choices=("py-spy", "cprofile", "none"), default="py-spy")
    ap.add_argument("--rate", type=int, default=1000, help="py-spy samples per second")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--keep", help="directory to keep the raw profile in")
    a = ap.parse_args()

    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="tstreams-netprof-"))
    work.mkdir(parents=True, exist_ok=True)
    cprof = work / "server.pstats"
    if a.server in ("echo", "moebius"):
        proc = Proc(echo_server if a.server == "echo" else moebius_server, f"tcp://127.0.0.1:{free_port()}")
        endpoint, pid = proc.bind, proc.pid
    else:
        if a.profiler == "cprofile":
            port = free_port()
            endpoint = f"tcp://127.0.0.1:{port}"
            ready = work / "ready"
            cmd = [sys.executable, "-m", "cProfile", "-o", str(cprof), "-m", "tstreams_embedded.cli", "serve",
                   "--data", str(work / "data"), "--bind", endpoint, "--durability", a.durability,
                   "--ready-file", str(ready)]
            popen = subprocess.Popen(cmd)
            deadline = time.monotonic() + 60
            while not ready.exists():
                if time.monotonic() > deadline or popen.poll() is not None:
                    raise SystemExit("server did not start")
                time.sleep(0.05)
            pid = popen.pid
            proc = None
        else:
            proc = start_ours(work / "data", free_port(), a.durability, work, "serve")
            endpoint, pid = proc.bind, proc.pid
        prepare_stream(endpoint)
    cfg = {"warmup": 1.0, "measure": a.seconds, "window": a.window, "settle": 0.5}
    raw = work / "pyspy.txt"
    spy = None
    try:
        if a.profiler == "py-spy":
            def record() -> None:
                time.sleep(cfg["settle"] + cfg["warmup"])
                subprocess.run([_py_spy(), "record", "-p", str(pid), "-d", str(int(a.seconds)), "-r", str(a.rate),
                                "-f", "raw", "-o", str(raw), "--threads", "--nonblocking"],
                               check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            spy = threading.Thread(target=record)
            spy.start()
        threads: list[dict[str, float]] = []

        def sample_threads() -> None:
            time.sleep(cfg["settle"] + cfg["warmup"])
            threads.append(thread_cpu(pid))
            time.sleep(cfg["measure"])
            threads.append(thread_cpu(pid))

        sampler = threading.Thread(target=sample_threads)
        sampler.start()
        r = run_clients(a.kind, endpoint, a.clients, cfg, [pid])
        sampler.join()
        if spy is not None:
            spy.join()
    finally:
        if proc is not None:
            proc.stop()
        elif a.server == "ours" and a.profiler == "cprofile":
            os.kill(pid, signal.SIGTERM)
            popen.wait(60)
    us = r["server_cpu_us_per_req"] or 0.0
    print(f"{a.server} {a.kind} x{a.clients} ({a.durability}): {r['rate']:.0f} req/s, "
          f"server {us:.1f} µs CPU/req, p50 {r.get('p50_ms', 0):.2f} ms, load {os.getloadavg()[0]:.2f}")
    n_req = r["rate"] * a.seconds
    per_thread = {k: (threads[1].get(k, 0.0) - v) / n_req * 1e6 for k, v in threads[0].items()} if n_req else {}
    print("server CPU µs/req by thread: " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                       sorted(per_thread.items(), key=lambda kv: -kv[1]) if v > 0.05))
    if a.profiler == "py-spy" and raw.exists():
        print(_summarise_raw(raw, per_thread.get("main", us), a.top))
    elif a.profiler == "cprofile" and cprof.exists():
        st = pstats.Stats(str(cprof))
        table = st.stats  # type: ignore[attr-defined]
        calls = sum(v[1] for v in table.values())
        requests = sum(v[1] for k, v in table.items() if k[2] == "_dispatch" and k[0].endswith("server.py"))
        print(f"cProfile: {calls} calls for {requests} requests dispatched: "
              f"{calls / max(requests, 1):.1f} calls per request (start-up included)")
        st.sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
