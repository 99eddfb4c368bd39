"""Hostile piece senders (wire protocol 3) against a real ``tstreams serve``: what they can
make the server hold, and whether well-behaved clients are still served meanwhile."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from tstreams_embedded.net import framing
from tstreams_embedded.testing import ServeProcess, eventually

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("hostile")
    p = ServeProcess(root / "data", root / "w", durability="async",
                     extra_args=["--max-server-bytes", str(32 * MiB), "--piece-timeout", "60"]).start()
    with p.connect(timeout=20) as e:
        e.create_stream("p", partitions=1)
    yield p
    p.stop()


def test_first_pieces_announcing_large_requests_do_not_lock_out_other_clients(srv: ServeProcess) -> None:
    """Four DEALERs each send only the first (one-byte) piece of a request announcing 16 MiB
    and a zero-length piece now and then: a few bytes must not reserve the whole server
    budget; a well-behaved client's writes are served within its timeout."""
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        socks = []
        for k in range(4):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(srv.endpoint)
            s.send_multipart([framing.piece_header(k + 1, 0, 16 * MiB, 0), b"\x95"])
            s.send_multipart([framing.piece_header(k + 1, 1, 16 * MiB, 0), b""])
            socks.append(s)
        with srv.connect(timeout=20) as e:
            eventually(lambda: e.backend.server_stats()["assembling"] == 4, timeout=10)  # type: ignore[attr-defined]
            held = e.backend.server_stats()["held_bytes"]  # type: ignore[attr-defined]
        assert held < MiB, f"4 messages of a few bytes hold {held} bytes of the server's budget"
        with srv.connect(timeout=3) as e:
            e.producer("p").instant([b"served"])
            assert e.backend.last_txn_id("p", 0) is not None
    finally:
        ctx.destroy(linger=0)


def test_many_empty_pieces_count_against_the_budget_and_are_dropped(srv: ServeProcess) -> None:
    """40 000 pieces of no bytes for one request announcing 1 MiB: each takes memory in the
    server (its ZeroMQ frame and Python objects), so they count against the 32 MiB budget
    (``PIECE_OVERHEAD`` each) and the request is refused ``ServerBusy`` once over it, what
    it held dropped; the same connection is then served. (Counted as 0 bytes, they held
    264 MB per 460 000 pieces, unbounded.)"""
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)
        s.connect(srv.endpoint)
        n = 40_000
        for i in range(n):
            s.send_multipart([framing.piece_header(3, i, MiB, 0), b""])
        s.send_multipart([framing.piece_header(3, n, MiB, framing.LAST_PIECE | framing.FRAME_END), b""])
        assert s.poll(30_000), "no reply"
        rid, flags, value = framing.unpack_reply(s.recv_multipart())
        assert (rid, flags & framing.ERROR, value[0]) == (3, framing.ERROR, "ServerBusy"), value
        s.send_multipart([framing.request_frame(4, "now_ms")])
        assert s.poll(10_000), "no reply"
        rid, flags, value = framing.unpack_reply(s.recv_multipart())
        assert rid == 4 and not flags & framing.ERROR, value
        with srv.connect(timeout=20) as e:
            st = e.backend.server_stats()  # type: ignore[attr-defined]
        assert st["held_bytes"] < MiB, st
    finally:
        ctx.destroy(linger=0)
