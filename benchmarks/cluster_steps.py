"""Where a replicated commit's time goes (issue 20, part 5).

``python -m benchmarks.cluster_steps [--txns N] [--clients C]`` starts a real ZooKeeper,
three ``tstreams serve --cluster`` nodes (``--durability sync``, quorum acks) and one
``tstreams serve --durability sync``, writes ``N`` durable transactions of 100 × 100 B from
``C`` client threads to each (the cluster suite's ``replicated_produce``), and prints:

* per node, the step timers of the commit path (``tstreams_cluster_step_seconds_total``
  and ``tstreams_cluster_steps_total`` from ``/metrics``, :class:`~tstreams_embedded.cluster.counters.StepTimes`):
  mean milliseconds per occurrence and occurrences per transaction;
* the CPU seconds each server process used per item (psutil), leader and followers
  against the single node, in the same run.

Hand-kept headlines: ``benchmarks/results/cluster-notes.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from benchmarks.systems.base import items_range
from benchmarks.systems.cluster import SESSION_TIMEOUT, ZK_TICK_MS

IDLE_SECONDS = 5.0


def scrape_steps(port: int) -> dict[str, tuple[float, int]]:
    """``step -> (seconds, count)`` from a node's ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    seconds: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        for prefix, into in (("tstreams_cluster_step_seconds_total{", seconds),
                             ("tstreams_cluster_steps_total{", counts)):
            if line.startswith(prefix):
                into[line.split('step="', 1)[1].split('"', 1)[0]] = float(line.rsplit(" ", 1)[1])
    return {s: (seconds[s], int(counts.get(s, 0))) for s in seconds}


def produce(engine_of: Any, txns: int, clients: int) -> float:
    """``txns`` durable 100 × 100 B transactions from ``clients`` threads; wall seconds."""
    stream = f"s{time.monotonic_ns()}"
    first = engine_of()
    first.create_stream(stream, partitions=1)
    engines = [first] + [engine_of() for _ in range(clients - 1)]
    items = items_range(0, 100)
    per = txns // clients

    def work(engine: Any) -> None:
        producer = engine.producer(stream, partition=0)
        for _ in range(per):
            producer.instant(items, partition=0)

    threads = [threading.Thread(target=work, args=(e,)) for e in engines]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    for e in engines:
        e.close()
    return seconds


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """``tid -> (thread name, CPU seconds)`` of every thread of ``pid`` (Linux /proc)."""
    out: dict[int, tuple[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def thread_breakdown(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                     items: int) -> str:
    """CPU µs per item by thread name (threads of one name summed), largest first."""
    by: dict[str, float] = {}
    for tid, (name, sec) in after.items():
        by[name] = by.get(name, 0.0) + sec - before.get(tid, (name, 0.0))[1]
    return ", ".join(f"{name} {sec / items * 1e6:.1f}" for name, sec in sorted(by.items(), key=lambda kv: -kv[1])
                     if sec > 0)


def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def spy(directory: str | None, name: str, pid: int) -> subprocess.Popen[bytes] | None:
    """Start ``py-spy record`` on ``pid`` (collapsed stacks to ``directory/name.txt``)."""
    if directory is None:
        return None
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    Path(directory).mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([exe, "record", "-p", str(pid), "-f", "raw", "-r", "250", "--threads",
                             "-o", str(Path(directory) / f"{name}.txt")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_spies(spies: list[subprocess.Popen[bytes] | None]) -> None:
    for p in spies:
        if p is not None:
            p.send_signal(signal.SIGINT)
    for p in spies:
        if p is not None:
            p.wait(30)


def main() -> None:
    import tstreams_embedded as ts
    from tstreams_embedded.cluster.zk import init_cluster
    from tstreams_embedded.testing import LocalCluster, ServeProcess, ZooKeeperServer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--txns", type=int, default=400)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--py-spy", metavar="DIR", help="sample the leader, a follower and the single node with py-spy "
                    "while they are measured, writing collapsed stacks to DIR/<node>.txt")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cluster-steps-") as tmp:
        work = Path(tmp)
        zk = ZooKeeperServer(work / "zk", tick_time_ms=ZK_TICK_MS).start()
        cluster = single = None
        try:
            url = f"zk://{zk.address}/steps"
            init_cluster(url, 3)
            cluster = LocalCluster(url, work, 3, session_timeout=SESSION_TIMEOUT, log_level="WARNING").start()
            leader = cluster.ready()
            followers = cluster.followers(leader)
            single = ServeProcess(work / "single", work, durability="sync", name="single").start(60)
            produce(lambda: ts.connect(url, timeout=60), 20, 1)  # warm up
            produce(lambda: ts.connect(single.endpoint, timeout=60), 20, 1)
            idle0 = {n.node_id: cpu_seconds(n.pid) for n in cluster.nodes}
            idle_s0 = cpu_seconds(single.pid)
            time.sleep(IDLE_SECONDS)
            idle = {n.node_id: (cpu_seconds(n.pid) - idle0[n.node_id]) / IDLE_SECONDS for n in cluster.nodes}
            print(f"idle CPU (share of one core over {IDLE_SECONDS:g} s): one node "
                  f"{(cpu_seconds(single.pid) - idle_s0) / IDLE_SECONDS:.1%}, "
                  + ", ".join(f"{k} {v:.1%}" for k, v in sorted(idle.items())))
            before = {n.node_id: scrape_steps(n.http_port) for n in cluster.nodes}
            cpu0 = {n.node_id: cpu_seconds(n.pid) for n in cluster.nodes}
            threads0 = {n.node_id: thread_cpu(n.pid) for n in cluster.nodes}
            spies = [spy(args.py_spy, name, pid) for name, pid in (("leader", leader.pid),
                                                                    ("follower", followers[0].pid))]
            t_cluster = produce(lambda: ts.connect(url, timeout=60), args.txns, args.clients)
            cpu1 = {n.node_id: cpu_seconds(n.pid) for n in cluster.nodes}
            threads1 = {n.node_id: thread_cpu(n.pid) for n in cluster.nodes}
            stop_spies(spies)
            after = {n.node_id: scrape_steps(n.http_port) for n in cluster.nodes}
            s0 = cpu_seconds(single.pid)
            st0 = thread_cpu(single.pid)
            spies = [spy(args.py_spy, "single", single.pid)]
            t_single = produce(lambda: ts.connect(single.endpoint, timeout=60), args.txns, args.clients)
            s1 = cpu_seconds(single.pid)
            st1 = thread_cpu(single.pid)
            stop_spies(spies)
            items = args.txns // args.clients * args.clients * 100
            txns = items // 100
            print(f"{args.clients} client(s), {txns} transactions of 100 x 100 B")
            print(f"cluster {items / t_cluster:,.0f} items/s ({t_cluster / txns * 1e3:.2f} ms/txn); one node "
                  f"{items / t_single:,.0f} items/s ({t_single / txns * 1e3:.2f} ms/txn); "
                  f"ratio {t_single / t_cluster:.2f}x")
            single_cpu = (s1 - s0) / items * 1e6
            print(f"one node: {single_cpu:.2f} CPU us/item; by thread: {thread_breakdown(st0, st1, items)}")
            for n in [leader, *followers]:
                role = "leader" if n is leader else "follower"
                cpu = (cpu1[n.node_id] - cpu0[n.node_id]) / items * 1e6
                print(f"{n.node_id} ({role}): {cpu:.2f} CPU us/item ({cpu / single_cpu:.2f}x one node); by thread: "
                      f"{thread_breakdown(threads0[n.node_id], threads1[n.node_id], items)}")
                for step, (sec, count) in sorted(after[n.node_id].items()):
                    sec0, count0 = before[n.node_id].get(step, (0.0, 0))
                    dn = count - count0
                    if dn:
                        print(f"  {step:18s} {(sec - sec0) / dn * 1e3:8.3f} ms x {dn / txns:5.2f}/txn")
        finally:
            if single is not None:
                single.stop()
            if cluster is not None:
                cluster.stop()
            zk.stop()


if __name__ == "__main__":
    main()
