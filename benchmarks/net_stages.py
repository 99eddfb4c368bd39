"""Per-request stage costs of a 1-item ``INSTANT`` on the server (issue 21).

``python -m benchmarks.net_stages`` prints, in µs per request (minimum of repetitions):
decoding the request, encoding the reply, receiving the request and sending the reply
through an inproc socket pair (ZeroMQ without TCP), and the write path (``submit_many`` of
256 merged 1-item instants, per call). It works with this tree's wire protocol 2 and with
trees from before issue 21 (protocol 1): run it with ``PYTHONPATH=OTHER_TREE`` to compare
two trees, alternating (``--write-only``: the write path alone). Headlines: ``benchmarks/results/net-notes.md``.
"""

from __future__ import annotations

import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from typing import Any

import msgpack
import zmq

from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.storage.core import Core
from tstreams_embedded.net import framing, zmqfast
from tstreams_embedded.net.handlers import submit_many

IDENTITY = b"\x00k\x8bEg"
VERSION_2 = hasattr(framing, "request_frame")  # else a tree from before issue 21


def _best(fn: Callable[[], Any], n: int = 20_000, repeat: int = 7) -> float:
    return min(timeit.repeat(fn, number=n, repeat=repeat)) / n * 1e6


def _request(chunk: bytes) -> list[bytes]:
    if VERSION_2:
        body = framing.pack([[O.encode(O.Instant("bench", 0, chunk))], True])
        return framing.request_frames(7, "submit", 0, [body])
    body = framing.pack([[O.encode(O.Instant("bench", 0, msgpack.ExtType(1, b"\0\0\0\0")))], True])
    return [framing.pack_request_header(7, "submit", 0), body, chunk]  # type: ignore[attr-defined]


def _reply(value: Any) -> list[bytes]:
    if VERSION_2:
        return [framing.pack((7, 0, value))]
    return [framing.pack_reply_header(7, 0), framing.pack(value)]  # type: ignore[attr-defined]


def _socket_pair_us(request: list[bytes], reply: list[bytes], n: int = 2000) -> float:
    """The server side's CPU per request: receive it and send the reply (inproc)."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind("inproc://stages")
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, IDENTITY)
    dealer.connect("inproc://stages")
    best = float("inf")
    try:
        for _ in range(7):
            for _ in range(n):
                zmqfast.send_multipart(dealer, request, 0)
            t = time.thread_time()
            for _ in range(n):
                frames, _, _ = zmqfast.recv_request(router, 1 << 30, 4096, 0)
                zmqfast.send_multipart(router, [frames[0], *reply], 0)
            best = min(best, (time.thread_time() - t) / n * 1e6)
            for _ in range(n):
                zmqfast.recv_multipart(dealer, 0)
    finally:
        dealer.close(0)
        router.close(0)
        ctx.term()
    return best


def _write_path_us(chunk: bytes, batch: int = 256) -> float:
    with tempfile.TemporaryDirectory(prefix="tstreams-stages-") as d:
        core = Core(d, "async")
        try:
            core.submit([O.CreateStream("bench", 4, 86400)])

            def calls() -> list[list[Any]]:
                return [[[O.encode(O.Instant("bench", i % 4, chunk))], True] for i in range(batch)]

            for _ in range(10):
                submit_many(core, calls())
            best = float("inf")
            for _ in range(25):
                c = calls()
                t = time.thread_time()
                submit_many(core, c)
                best = min(best, time.thread_time() - t)
        finally:
            core.close()
    return best / batch * 1e6


def main() -> None:
    chunk = O.pack_items([b"x" * 100])
    if "--write-only" in sys.argv[1:]:  # the write path alone (the noisiest stage: alternate trees often)
        print(f"write path per call {_write_path_us(chunk):.2f} µs")
        return
    request = _request(chunk)
    frames = [IDENTITY, *request]
    out = {
        "decode request": _best(lambda: framing.unpack_request(frames)),
        "encode reply": _best(lambda: _reply([123456789012345678])),
        "recv + send (inproc)": _socket_pair_us(request, _reply([1])),
        "write path per call": _write_path_us(chunk),
    }
    print(f"wire {'2' if VERSION_2 else '1'}: " + "  ".join(f"{k} {v:.2f} µs" for k, v in out.items()))


if __name__ == "__main__":
    main()
