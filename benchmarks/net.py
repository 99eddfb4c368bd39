"""Processes for the network suite: the servers under test and the load-generating clients.

* :func:`echo_server`: the same :class:`~tstreams_embedded.net.server.Server` loop and framing
  as ``tstreams serve``, with handlers that do nothing (the baseline of the pipelined figure);
* :func:`moebius_server`: a Moebius-style loop (``zmq.Poller``, one message per wakeup, JSON,
  linear handler scan, ROUTER_MANDATORY);
* :func:`start_ours` / :func:`start_haproxy`: ``tstreams serve`` and HAProxy (``cluster/haproxy.cfg``);
* :func:`run_clients`: N client processes (fork) that start together, warm up, then count
  replies in a common window; the servers' CPU time per request is measured alongside.

The systems built on these are in :mod:`benchmarks.systems.net_servers`.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from benchmarks.measure import latency_summary
from tstreams_embedded.testing import HAProxyProcess, ManagedProcess, ServeProcess, stop_process

REPO = Path(__file__).resolve().parents[1]
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
STREAM = "bench"
PARTITIONS = 4

# ------------------------------------------------------------------------------ servers
def echo_server(bind: str, ready: Any) -> None:
    """The baseline of the pipelined figure: our Server loop and framing, handlers that do nothing."""
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


def moebius_server(bind: str, ready: Any) -> None:
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

    @classmethod
    def of(cls, popen: subprocess.Popen, bind: str) -> Proc:
        """Wrap a process started elsewhere."""
        p = cls(bind=bind, args=None, popen=popen)
        return p

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(20)
        else:
            stop_process(self.mp, 10)


def start_ours(data: Path, port: int, durability: str, workdir: Path, name: str,
               extra_args: tuple[str, ...] = ()) -> Proc:
    server = ServeProcess(data, workdir, port=port, durability=durability, name=name,
                          extra_args=extra_args).start(60)
    return Proc(bind=server.endpoint, server=server)


def start_haproxy(front: int, servers: list[int], workdir: Path) -> Proc:
    proxy = HAProxyProcess(servers, workdir, frontend_port=front, config=REPO / "cluster" / "haproxy.cfg").start(20)
    proxy.wait_servers_up()  # health checks mark both servers up (rise 2 x 500 ms)
    return Proc(bind=proxy.endpoint, server=proxy)


def prepare_stream(endpoint: str) -> None:
    from tstreams_embedded import errors
    from tstreams_embedded.engine.protocol import ops as O
    from tstreams_embedded.net.client import RemoteBackend

    b = RemoteBackend(endpoint, timeout=30)
    try:
        try:
            b.submit([O.CreateStream(STREAM, PARTITIONS, 86400)])
        except errors.StreamExists:
            pass
    finally:
        b.close()


# ------------------------------------------------------------------------------ clients
def _client(kind: str, endpoint: str, k: int, window: int, warmup: float, measure: float, start: Any,
            out: Any) -> None:
    """One client process: ``kind`` is pipelined | sync-read | sync-write | sync-now | moebius |
    remote-sync; ``KIND-v1`` sends the same requests in wire protocol version 1."""
    import zmq

    from tstreams_embedded.engine.protocol import ops as O
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
    legacy = kind.endswith("-v1")  # the same load in wire protocol version 1 (header, body, blob frames)
    kind = kind.removesuffix("-v1")
    if legacy:
        ins_body = [framing.pack([[O.encode(O.Instant(STREAM, part, framing.blob_ref(0)))], True]), chunk]
    else:
        ins_body = [framing.pack([[O.encode(O.Instant(STREAM, part, chunk))], True])]  # chunk inline
    read_body = [framing.pack([STREAM])]
    frames_of = framing.legacy_request if legacy else framing.request_frames
    unpack_reply = framing.unpack_legacy_reply if legacy else framing.unpack_reply

    def request(i: int) -> list[bytes]:
        if kind in ("pipelined", "sync-write"):
            return frames_of(i, "submit", 0, ins_body)
        if kind == "sync-read":
            return frames_of(i, "get_stream", 0, read_body)
        if kind == "sync-now":
            return frames_of(i, "now_ms", 0, ())
        return [json.dumps({"command": "echo", "id": i, "args": [STREAM]}).encode()]

    def check(frames: list[bytes]) -> int:
        if kind == "moebius":
            reply = json.loads(frames[0])
            if "error" in reply:
                raise RuntimeError(reply)
            return reply["id"]
        rid, flags, value = unpack_reply(frames)
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
    """User + system CPU time consumed so far by processes ``pids``."""
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


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
