"""The server loop's own CPU per request, without the noise of a shared machine (issue 11).

``python -m benchmarks.net_drain [--requests N] [--rounds R]`` queues ``N`` pipelined
requests in a :class:`~tstreams_embedded.net.server.Server`'s socket while its loop is
stopped, then runs the loop until every request is answered and reports the loop thread's
CPU time (``time.thread_time``) per request: ZeroMQ receive and send, decoding, dispatch,
the handler, the reply. ZeroMQ's I/O thread and the clients are not counted. Figures are
the minimum over ``R`` rounds (each round a fresh burst), taken ``--drain`` requests per wakeup, for:

* ``echo``: the handlers of the net suite's echo server (the baseline of the pipelined
  figure: the same loop, handlers that do nothing);
* ``instant``: ``tstreams serve``'s handlers on an engine with ``durability="async"``, each
  request a 1-item ``INSTANT`` (the pipelined figure's request);
* ``now_ms``: the same server answering ``now_ms`` (the sync12 figure's request).

``--sync N`` measures instead ``--clients`` threads sending N requests each, one at a time
(the sync12 figure's pattern: few requests per wakeup), the minimum over ``--rounds``.

The requests are sent by ``--clients`` DEALER sockets, as the suite's clients do. Use it to
judge a change of the loop; the suite (``python -m benchmarks --suite net``) gives the
end-to-end figures.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import tempfile
import threading
import time
from typing import Any

import zmq
from tornado.ioloop import IOLoop

from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.storage.core import Core
from tstreams_embedded.net import framing
from tstreams_embedded.net.handlers import backend_registry
from tstreams_embedded.net.registry import Registry
from tstreams_embedded.net.server import Server, ServerOptions

STREAM, PARTITIONS = "bench", 4


def _echo_registry() -> Registry:
    reg = Registry()
    reg.add("submit", lambda session, ops, durable=True: [0])
    reg.add("now_ms", lambda session: 0)
    return reg


def _requests(kind: str, part: int, n: int, first: int, version: int = framing.VERSION) -> list[list[bytes]]:
    """``n`` requests of ``kind`` in wire protocol ``version`` (1: header, body and blob frames)."""
    chunk = O.pack_items([b"x" * 100])
    frames_of = framing.request_frames if version == framing.VERSION else framing.legacy_request
    if kind == "now_ms":
        return [frames_of(first + i, "now_ms", 0, ()) for i in range(n)]
    if version == framing.VERSION:
        body = [framing.pack([[O.encode(O.Instant(STREAM, part, chunk))], True])]
    else:
        body = [framing.pack([[O.encode(O.Instant(STREAM, part, framing.blob_ref(0)))], True]), chunk]
    return [frames_of(first + i, "submit", 0, body) for i in range(n)]


def measure(registry: Registry, kind: str, n: int, clients: int, rounds: int, drain: int,
            version: int = framing.VERSION) -> float:
    """Minimum over ``rounds`` of the loop thread's CPU µs per request."""
    ctx = zmq.Context()
    opts = ServerOptions(rcvhwm=0, max_drain=drain, inline_writes=True)
    server = Server(registry, "tcp://127.0.0.1:0", opts, context=ctx)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    io = IOLoop.current()
    server.start(io)
    socks = []
    for _ in range(clients):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
        s.connect(server.endpoints[0])
        socks.append(s)
    best = float("inf")
    first = 0
    try:
        for _ in range(rounds + 1):  # the first round warms up
            per = n // clients
            target = server.stats.received + per * clients
            for k, s in enumerate(socks):
                for frames in _requests(kind, k % PARTITIONS, per, first, version):
                    s.send_multipart(frames)
            first += per
            time.sleep(0.3 + n / 50_000)  # ZeroMQ's I/O threads move the burst into the server's socket

            t0 = time.thread_time()
            io.run_sync(functools.partial(_until_answered, server, target), timeout=120)
            dt = time.thread_time() - t0
            for s in socks:  # drop the replies
                while s.poll(0):
                    s.recv_multipart()
            if first > per:
                best = min(best, dt / (per * clients) * 1e6)
    finally:
        io.run_sync(lambda: _stop(server))
        for s in socks:
            s.close(0)
        loop.close()
        ctx.term()
    return best


def measure_sync(registry: Registry, kind: str, n: int, clients: int, version: int = framing.VERSION) -> float:
    """The loop thread's CPU µs per request when ``clients`` threads each send ``n``
    requests one at a time (each waits for its reply): a wakeup per request or few."""
    ctx = zmq.Context()
    server = Server(registry, "tcp://127.0.0.1:0", ServerOptions(inline_writes=True), context=ctx)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    io = IOLoop.current()
    server.start(io)
    finished = asyncio.Event()
    left = [clients]

    def client(k: int) -> None:
        s = ctx.socket(zmq.DEALER)
        s.connect(server.endpoints[0])
        for frames in _requests(kind, k % PARTITIONS, n, 0, version):
            s.send_multipart(frames)
            s.recv_multipart()
        s.close(0)
        io.add_callback(_one_done, left, finished)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]

    async def run() -> float:
        t0 = time.thread_time()
        for t in threads:
            t.start()
        await finished.wait()
        return time.thread_time() - t0

    try:
        dt = io.run_sync(run, timeout=300)
    finally:
        for t in threads:
            t.join()
        io.run_sync(lambda: _stop(server))
        loop.close()
        ctx.term()
    return dt / (n * clients) * 1e6


def _one_done(left: list[int], finished: asyncio.Event) -> None:
    left[0] -= 1
    if not left[0]:
        finished.set()


async def _until_answered(server: Server, replies: int) -> None:
    while server.stats.replies < replies:
        await asyncio.sleep(0.001)


async def _stop(server: Server) -> None:
    done = asyncio.Event()
    server.stop(5, on_stopped=done.set)
    await done.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--drain", type=int, default=256,
                    help="requests per wakeup (max_drain; the suite's pipelined runs see about 250)")
    ap.add_argument("--only", choices=("echo", "instant", "now_ms"), action="append")
    ap.add_argument("--sync", type=int, default=0, metavar="N",
                    help="instead: N requests per client, one at a time (a synchronous client's wakeups)")
    ap.add_argument("--wire", type=int, choices=framing.SUPPORTED_VERSIONS, default=framing.VERSION,
                    help="wire protocol version of the requests (1: header, body and blob frames)")
    a = ap.parse_args()
    out: dict[str, Any] = {}
    if a.sync:
        with tempfile.TemporaryDirectory(prefix="tstreams-drain-") as d:
            core = Core(d, "async")
            try:
                core.submit([O.CreateStream(STREAM, PARTITIONS, 86400)])
                for name in a.only or ("now_ms",):
                    reg = _echo_registry() if name == "echo" else backend_registry(core)
                    kind = "now_ms" if name != "instant" else "instant"
                    best = min(measure_sync(reg, kind, a.sync, a.clients, a.wire) for _ in range(a.rounds))
                    out[f"sync {name}"] = best
            finally:
                core.close()
        print("  ".join(f"{k} {v:.2f} µs/req" for k, v in out.items()))
        return
    for name in a.only or ("echo", "instant", "now_ms"):
        if name == "echo":
            out[name] = measure(_echo_registry(), "instant", a.requests, a.clients, a.rounds, a.drain, a.wire)
            continue
        with tempfile.TemporaryDirectory(prefix="tstreams-drain-") as d:
            core = Core(d, "async")
            try:
                core.submit([O.CreateStream(STREAM, PARTITIONS, 86400)])
                out[name] = measure(backend_registry(core), "instant" if name == "instant" else "now_ms",
                                    a.requests, a.clients, a.rounds, a.drain, a.wire)
            finally:
                core.close()
    print("  ".join(f"{k} {v:.2f} µs/req" for k, v in out.items()))
    if "echo" in out and "instant" in out:
        print(f"instant - echo = {out['instant'] - out['echo']:.2f} µs/req (the write path's own cost)")


if __name__ == "__main__":
    main()
