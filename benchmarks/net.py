"""Network-layer figures (issue 3), each side by side with its baseline in the same run.

    python -m benchmarks.net [--quick] [--reps 3] [--out benchmarks/results]

1. **pipelined**: 1-item ``INSTANT`` transactions (``submit``), ``CLIENTS`` client processes
   with ``WINDOW`` requests in flight each, through one ``tstreams serve`` process — vs an
   echo server running the very same :class:`~tstreams_embedded.net.server.Server` loop and
   framing whose ``submit`` handler does nothing (goal: ours >= 0.8x echo). p50/p99 latency
   per request (send to reply, queueing in the window included).
2. **sync12**: 12 synchronous client processes (one request in flight each, as in Moebius'
   own test) — ours vs a Moebius-style loop (``zmq.Poller``, one message per wakeup, JSON,
   linear handler scan, ROUTER_MANDATORY) answering a trivial JSON request (goal: ours >= 1.5x).
   Ours answers real engine requests: ``get_stream`` (an LMDB read) and, as a second row,
   1-item ``instant`` writes.
3. **haproxy**: the pipelined workload and the sync12 read workload through HAProxy
   (``cluster/haproxy.cfg``, TCP mode) in front of 2 server processes on one data directory,
   vs 1 server direct; the ratio is reported (2 cores here: the clients, HAProxy and both
   servers share them).

Every client runs in its own process (multiprocessing, fork); all clients of a run start
together, warm up, then count replies in a common window. Systems are interleaved within
each repetition; medians over repetitions are reported with their spread. The servers run
with ``--durability async`` for the headline figures (the network layer is measured, not
the disk); the pipelined workload is also run against a ``sync`` server.

Writes ``benchmarks/results/net.json`` (and ``net.png``).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from benchmarks.measure import NOISY_SPREAD, free_port, latency_summary, machine_info, median, spread
from benchmarks.report import fmt_num, fmt_rate, fmt_ratio, write_json
from tstreams_embedded.testing import HAProxyProcess, ManagedProcess, ServeProcess, stop_process

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(__file__).resolve().parent / "results"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
STREAM = "bench"
PARTITIONS = 4

MODES = {
    # seconds of warm-up / measurement per run; pipelined clients and window
    "quick": {"warmup": 0.2, "measure": 0.8, "clients": 4, "window": 100, "sync_clients": 12, "settle": 0.2},
    "full": {"warmup": 1.0, "measure": 4.0, "clients": 4, "window": 100, "sync_clients": 12, "settle": 0.5},
}


# ------------------------------------------------------------------------------ servers
def _echo_server(bind: str, ready: Any) -> None:
    """The baseline for figure 1: our Server loop and framing, handlers that do nothing."""
    import asyncio

    from tornado.ioloop import IOLoop

    from tstreams_embedded.net.registry import Registry
    from tstreams_embedded.net.server import Server

    reg = Registry()
    reg.add("submit", lambda session, ops, durable=True: [0])
    reg.add("get_stream", lambda session, name: [name, 1, PARTITIONS, 86400, "", 0])

    async def main() -> None:
        Server(reg, bind).start(IOLoop.current())
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def _moebius_server(bind: str, ready: Any) -> None:
    """A Moebius-style loop (bwsw/moebius server.py, ported to Python 3): zmq.Poller with a
    5 ms poll, ONE message per ready socket per wakeup, JSON payloads, handlers found by a
    linear scan of the registered commands, ROUTER_MANDATORY."""
    import json as _json

    import zmq

    class Handler:
        command = ""

        def run(self, client: bytes, data: dict) -> dict:
            raise NotImplementedError

    class Echo(Handler):
        command = "echo"

        def run(self, client: bytes, data: dict) -> dict:
            return {"id": data.get("id"), "result": data.get("args")}

    class Stream(Handler):
        command = "get_stream"

        def run(self, client: bytes, data: dict) -> dict:
            return {"id": data.get("id"), "result": [data["args"][0], 1, PARTITIONS, 86400, "", 0]}

    handlers = [Handler(), Stream(), Echo()]
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.bind(bind)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    ready.set()
    while True:
        events = dict(poller.poll(5))
        if sock in events:
            client, data = sock.recv_multipart()  # one message per wakeup
            msg = _json.loads(data)
            for h in handlers:
                if h.command == msg.get("command"):
                    reply = h.run(client, msg)
                    break
            else:
                reply = {"error": "unknown command"}
            try:
                sock.send_multipart([client, _json.dumps(reply).encode()])
            except zmq.ZMQError:
                pass


class Proc:
    """A server process stopped by PID: a forked ``target(bind, ready)`` or a started
    :class:`tstreams_embedded.testing.ManagedProcess`."""

    def __init__(self, target: Callable | None = None, bind: str = "", server: ManagedProcess | None = None) -> None:
        self.bind = bind
        self.server = server
        self.mp = None
        if target is not None:
            ctx = mp.get_context("fork")
            ready = ctx.Event()
            self.mp = ctx.Process(target=target, args=(bind, ready), daemon=True)
            self.mp.start()
            self.pid = self.mp.pid
            if not ready.wait(30):
                raise RuntimeError(f"{target.__name__} did not start")
        else:
            assert server is not None
            self.pid = server.pid

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(20)
        else:
            stop_process(self.mp, 10)


def start_ours(data: Path, port: int, durability: str, workdir: Path, name: str) -> Proc:
    server = ServeProcess(data, workdir, port=port, durability=durability, name=name).start(60)
    return Proc(bind=server.endpoint, server=server)


def start_haproxy(front: int, servers: list[int], workdir: Path) -> Proc:
    proxy = HAProxyProcess(servers, workdir, frontend_port=front, config=REPO / "cluster" / "haproxy.cfg").start(20)
    proxy.wait_servers_up()  # health checks mark both servers up (rise 2 x 500 ms)
    return Proc(bind=proxy.endpoint, server=proxy)


def prepare_stream(endpoint: str) -> None:
    from tstreams_embedded import errors
    from tstreams_embedded.engine import ops as O
    from tstreams_embedded.net.client import RemoteBackend

    b = RemoteBackend(endpoint, timeout=30)
    try:
        try:
            b.submit([(O.CREATE_STREAM, STREAM, PARTITIONS, 86400, "")])
        except errors.StreamExists:
            pass
    finally:
        b.close()


# ------------------------------------------------------------------------------ clients
def _client(kind: str, endpoint: str, k: int, window: int, warmup: float, measure: float, start: Any,
            out: Any) -> None:
    """One client process: ``kind`` is pipelined | sync-read | sync-write | moebius | remote-sync."""
    import msgpack
    import zmq

    from tstreams_embedded.engine import ops as O
    from tstreams_embedded.net import framing
    from tstreams_embedded.net.zmqfast import recv_multipart, send_multipart

    ctx = zmq.Context()
    block = 0  # blocking sends/receives (same helpers for every system: the clients cost the same)
    lat: list[int] = []
    count = 0
    if kind == "remote-sync":
        from tstreams_embedded.net.client import RemoteBackend

        b = RemoteBackend(endpoint, timeout=30)
        b.now_ms()
        start.wait()
        t_end_warm = time.perf_counter() + warmup
        while time.perf_counter() < t_end_warm:
            b.now_ms()
        t0 = time.perf_counter()
        t_end = t0 + measure
        now = t0
        while now < t_end:
            a = time.perf_counter_ns()
            b.now_ms()
            lat.append(time.perf_counter_ns() - a)
            count += 1
            now = time.perf_counter()
        out.put((count, now - t0, lat))
        b.close()
        return
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    part = k % PARTITIONS
    chunk = O.pack_items([b"x" * 100])
    ins_body = framing.pack([[[O.INSTANT, STREAM, part, msgpack.ExtType(framing.BLOB, b"\0\0\0\0"), None]],
                             True])
    read_body = framing.pack([STREAM])
    empty_body = framing.pack([])
    hdr = framing.pack_request_header

    def request(i: int) -> list[bytes]:
        if kind in ("pipelined", "sync-write"):
            return [hdr(i, "submit", 0), ins_body, chunk]
        if kind == "sync-read":
            return [hdr(i, "get_stream", 0), read_body]
        if kind == "sync-now":
            return [hdr(i, "now_ms", 0), empty_body]
        return [json.dumps({"command": "echo", "id": i, "args": [STREAM]}).encode()]

    def check(frames: list[bytes]) -> int:
        if kind == "moebius":
            reply = json.loads(frames[0])
            if "error" in reply:
                raise RuntimeError(reply)
            return reply["id"]
        rid, flags, value = framing.unpack_reply(frames)
        if flags & framing.ERROR:
            raise RuntimeError(value)
        return rid

    # connect, then wait for the common start
    send_multipart(s, request(0), block)
    check(recv_multipart(s, block))
    start.wait()
    i = 1
    if kind == "pipelined":
        sent: dict[int, int] = {}
        t_warm_end = time.perf_counter() + warmup
        t0 = t_end = None
        while True:
            while len(sent) < window:
                sent[i] = time.perf_counter_ns()
                send_multipart(s, request(i), block)
                i += 1
            s.poll(10_000)
            now_ns = time.perf_counter_ns()
            try:
                while True:
                    rid = check(recv_multipart(s))
                    t = sent.pop(rid)
                    if t0 is not None:
                        lat.append(now_ns - t)
                        count += 1
            except zmq.Again:
                pass
            now = time.perf_counter()
            if t0 is None and now >= t_warm_end:
                t0, t_end = now, now + measure
            elif t0 is not None and now >= t_end:
                break
        elapsed = time.perf_counter() - t0
        while sent:  # drain what is in flight
            if not s.poll(10_000):
                break
            sent.pop(check(recv_multipart(s, block)), None)
    else:
        t_warm_end = time.perf_counter() + warmup
        while time.perf_counter() < t_warm_end:
            send_multipart(s, request(i), block)
            check(recv_multipart(s, block))
            i += 1
        t0 = time.perf_counter()
        t_end = t0 + measure
        now = t0
        while now < t_end:
            a = time.perf_counter_ns()
            send_multipart(s, request(i), block)
            check(recv_multipart(s, block))
            lat.append(time.perf_counter_ns() - a)
            i += 1
            count += 1
            now = time.perf_counter()
        elapsed = now - t0
    out.put((count, elapsed, lat))
    s.close(0)
    ctx.term()


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time consumed so far by processes ``pids`` (Linux /proc)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def run_clients(kind: str, endpoint: str, n: int, cfg: dict, server_pids: list[int]) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    start = ctx.Event()
    out = ctx.Queue()
    procs = [ctx.Process(target=_client, args=(kind, endpoint, k, cfg["window"], cfg["warmup"], cfg["measure"],
                                               start, out), daemon=True) for k in range(n)]
    for p in procs:
        p.start()
    time.sleep(cfg["settle"])  # every client connected and did one request
    start.set()
    time.sleep(cfg["warmup"])
    cpu0, t0 = cpu_seconds(server_pids), time.perf_counter()
    time.sleep(cfg["measure"])
    cpu1, t1 = cpu_seconds(server_pids), time.perf_counter()
    results = [out.get(timeout=60 + cfg["warmup"] + cfg["measure"]) for _ in procs]
    for p in procs:
        p.join(30)
    total = sum(r[0] for r in results)
    window = max(r[1] for r in results)
    lat = [x for r in results for x in r[2]]
    rate = total / window if window else 0.0
    server_us = (cpu1 - cpu0) / (rate * (t1 - t0)) * 1e6 if rate else None
    return {"rate": rate, "requests": total, "server_cpu_us_per_req": server_us, **latency_summary(lat)}


# ------------------------------------------------------------------------------ the run
def run(mode: str, reps: int, workdir: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    cfg = MODES[mode]
    m_start = machine_info()
    figures: dict[str, dict[str, list[dict]]] = {}

    def record(fig: str, system: str, res: dict) -> None:
        figures.setdefault(fig, {}).setdefault(system, []).append(res)
        progress(f"  {fig:10s} {system:40s} {fmt_rate(res['rate']):>7s} req/s  "
                 f"p50 {fmt_num(res.get('p50_ms'))} ms  p99 {fmt_num(res.get('p99_ms'))} ms  "
                 f"server {fmt_num(res.get('server_cpu_us_per_req'), 0)} us/req")

    servers: dict[str, Proc] = {}
    try:
        # --- servers, started once and reused by every repetition -----------------------
        servers["ours"] = start_ours(workdir / "ours", free_port(), "async", workdir, "ours")
        servers["ours-sync"] = start_ours(workdir / "ours-sync", free_port(), "sync", workdir, "ours-sync")
        servers["echo"] = Proc(_echo_server, f"tcp://127.0.0.1:{free_port()}")
        servers["moebius"] = Proc(_moebius_server, f"tcp://127.0.0.1:{free_port()}")
        shared = workdir / "shared"
        a, b = free_port(), free_port()
        servers["s1"] = start_ours(shared, a, "async", workdir, "s1")
        servers["s2"] = start_ours(shared, b, "async", workdir, "s2")
        servers["haproxy"] = start_haproxy(free_port(), [a, b], workdir)
        for name in ("ours", "ours-sync", "s1"):
            prepare_stream(servers[name].bind)
        ep = {k: v.bind for k, v in servers.items()}
        pids = {v.bind: [v.pid] for v in servers.values()}
        pids[ep["haproxy"]] = [servers[k].pid for k in ("haproxy", "s1", "s2")]
        n, sync_n = cfg["clients"], cfg["sync_clients"]
        plan = [
            ("pipelined", "echo (same loop, no engine)", "pipelined", ep["echo"], n),
            ("pipelined", "ours (async durability)", "pipelined", ep["ours"], n),
            ("pipelined", "ours (sync durability)", "pipelined", ep["ours-sync"], n),
            ("sync12", "moebius-style (JSON echo)", "moebius", ep["moebius"], sync_n),
            ("sync12", "ours now_ms", "sync-now", ep["ours"], sync_n),
            ("sync12", "ours get_stream (LMDB read)", "sync-read", ep["ours"], sync_n),
            ("sync12", "ours instant (async write)", "sync-write", ep["ours"], sync_n),
            ("sync12", "ours now_ms via RemoteBackend", "remote-sync", ep["ours"], sync_n),
            ("haproxy", "1 server direct, pipelined", "pipelined", ep["s1"], n),
            ("haproxy", "2 servers + HAProxy, pipelined", "pipelined", ep["haproxy"], n),
            ("haproxy", "1 server direct, sync12 get_stream", "sync-read", ep["s1"], sync_n),
            ("haproxy", "2 servers + HAProxy, sync12 get_stream", "sync-read", ep["haproxy"], sync_n),
        ]
        for rep in range(reps):
            progress(f"repetition {rep + 1}/{reps}")
            order = plan if rep % 2 == 0 else list(reversed(plan))
            for fig, system, kind, endpoint, clients in order:
                record(fig, system, run_clients(kind, endpoint, clients, cfg, pids[endpoint]))
    finally:
        for p in servers.values():
            p.stop()

    summary: dict[str, Any] = {}
    for fig, systems in figures.items():
        summary[fig] = {}
        for system, runs in systems.items():
            rates = [r["rate"] for r in runs]
            summary[fig][system] = {
                "rate_median": median(rates),
                "rates": rates,
                "spread": spread(rates),
                "noisy": spread(rates) > NOISY_SPREAD,
                "p50_ms_median": median([r.get("p50_ms") for r in runs]),
                "p99_ms_median": median([r.get("p99_ms") for r in runs]),
                "server_cpu_us_per_req_median": median([r.get("server_cpu_us_per_req") for r in runs]),
            }

    def ratio(fig: str, a: str, b: str) -> float | None:
        x, y = summary[fig][a]["rate_median"], summary[fig][b]["rate_median"]
        return x / y if x and y else None

    goals = [
        {"figure": "pipelined", "goal": "ours >= 0.8x echo",
         "ratio": ratio("pipelined", "ours (async durability)", "echo (same loop, no engine)"), "target": 0.8},
        {"figure": "pipelined (sync server)", "goal": "informational",
         "ratio": ratio("pipelined", "ours (sync durability)", "echo (same loop, no engine)"), "target": None},
        {"figure": "sync12", "goal": "ours >= 1.5x moebius-style",
         "ratio": ratio("sync12", "ours now_ms", "moebius-style (JSON echo)"), "target": 1.5},
        {"figure": "sync12 (LMDB reads)", "goal": "informational",
         "ratio": ratio("sync12", "ours get_stream (LMDB read)", "moebius-style (JSON echo)"), "target": None},
        {"figure": "sync12 (writes)", "goal": "informational",
         "ratio": ratio("sync12", "ours instant (async write)", "moebius-style (JSON echo)"), "target": None},
        {"figure": "sync12 (RemoteBackend client)", "goal": "informational",
         "ratio": ratio("sync12", "ours now_ms via RemoteBackend", "moebius-style (JSON echo)"), "target": None},
        {"figure": "haproxy pipelined", "goal": "report the ratio",
         "ratio": ratio("haproxy", "2 servers + HAProxy, pipelined", "1 server direct, pipelined"), "target": None},
        {"figure": "haproxy sync12", "goal": "report the ratio",
         "ratio": ratio("haproxy", "2 servers + HAProxy, sync12 get_stream", "1 server direct, sync12 get_stream"),
         "target": None},
    ]
    for g in goals:
        g["met"] = None if g["target"] is None or g["ratio"] is None else g["ratio"] >= g["target"]
    m_end = machine_info()
    m_start["loadavg_at_end"] = m_end.get("loadavg_at_start")
    return {
        "benchmark": "net",
        "mode": mode,
        "reps": reps,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": m_start,
        "config": cfg,
        "figures": summary,
        "goals": goals,
    }


def plot(report: dict[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:  # pragma: no cover
        return None
    figs = report["figures"]
    fig, axes = plt.subplots(1, len(figs), figsize=(5 * len(figs), 4.5))
    for ax, (name, systems) in zip(axes, figs.items(), strict=True):
        labels = list(systems)
        vals = [systems[s]["rate_median"] or 0 for s in labels]
        ax.barh(range(len(labels)), vals, color=["#888" if ("echo" in s or "moebius" in s or "direct" in s)
                                                 else "#2a7" for s in labels])
        ax.set_yticks(range(len(labels)), [s.replace(", ", ",\n") for s in labels], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(name)
        ax.set_xlabel("requests/s (median)")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1000:.0f}k"))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@click.command()
@click.option("--quick", is_flag=True, help="Short runs: under a minute.")
@click.option("--reps", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option("--out", "out_dir", default=str(RESULTS_DIR), show_default=True, type=click.Path(file_okay=False))
@click.option("--no-plot", is_flag=True)
def main(quick: bool, reps: int, out_dir: str, no_plot: bool) -> None:
    """Network layer vs an echo server, a Moebius-style loop and HAProxy (see module docstring)."""
    if not os.path.exists(HAPROXY):
        raise click.ClickException("haproxy is not installed (apt-get install haproxy)")
    t0 = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="tsnet-"))
    try:
        report = run("quick" if quick else "full", reps, workdir, click.echo)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["seconds"] = round(time.monotonic() - t0, 1)
    out = Path(out_dir)
    write_json(report, out / "net.json")
    if not no_plot:
        plot(report, out / "net.png")
    click.echo("\nmedians:")
    for fig, systems in report["figures"].items():
        for system, r in systems.items():
            click.echo(f"  {fig:10s} {system:40s} {fmt_rate(r['rate_median']):>7s} req/s  "
                       f"p50 {fmt_num(r['p50_ms_median'])} ms  p99 {fmt_num(r['p99_ms_median'])} ms  "
                       f"server {fmt_num(r['server_cpu_us_per_req_median'], 0)} us/req"
                       f"{'  NOISY' if r['noisy'] else ''}")
    click.echo("goals:")
    for g in report["goals"]:
        verdict = {True: "met", False: "MISSED", None: "info"}[g["met"]]
        click.echo(f"  [{verdict}] {g['figure']}: {g['goal']} -> {fmt_ratio(g['ratio'])}")
    click.echo(f"wrote {out / 'net.json'} in {report['seconds']} s")


if __name__ == "__main__":
    main()
