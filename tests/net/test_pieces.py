"""Wire protocol 3 (issue 19 item 4): requests over 64 KiB travel in pieces, each its own
ZeroMQ message, reassembled and counted by the server. Against a real ``tstreams serve``:
large requests of this client in pieces, every way a piece can be wrong answered with a
specific error (hypothesis over the wire), and a request abandoned half-way freed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded import aio, errors
from tstreams_embedded.engine import ops as O
from tstreams_embedded.net import framing
from tstreams_embedded.net.client import encode_submit
from tstreams_embedded.testing import ServeProcess, eventually

MiB = 1024 * 1024
PIECE = framing.PIECE_BYTES


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("pieces")
    p = ServeProcess(root / "data", root / "w", durability="async", extra_args=["--piece-timeout", "1"]).start()
    with p.connect(timeout=20) as e:
        e.create_stream("p", partitions=1)
    yield p
    p.stop()


@pytest.fixture
def ctx() -> Iterator[zmq.Context[Any]]:
    c: zmq.Context[Any] = zmq.Context()
    yield c
    c.destroy(linger=0)


def dealer(srv: ServeProcess, ctx: zmq.Context[Any]) -> zmq.Socket[Any]:
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(srv.endpoint)
    return s


def reply(s: zmq.Socket[Any], timeout: float = 10.0) -> tuple[int, int, Any]:
    assert s.poll(int(timeout * 1000)), "no reply"
    frames = s.recv_multipart()
    if len(frames) == 2:  # (junk starting like a version-1 header is answered in version 1)
        return framing.unpack_legacy_reply(frames)
    return framing.unpack_reply(frames)


def submit(rid: int, *items: bytes) -> list[Any]:
    """The frames of a ``submit`` of one instant transaction of ``items``."""
    return framing.request_frames(rid, "submit", 0, encode_submit([O.Instant("p", 0, O.pack_items(list(items)))],
                                                                  False))


def stats(srv: ServeProcess) -> dict[str, Any]:
    with ts.connect(srv.endpoint, timeout=20) as e:
        got: dict[str, Any] = e.backend.server_stats()  # type: ignore[attr-defined]
        return got


def test_split_request_cuts_frames_into_pieces_and_leaves_small_requests_whole() -> None:
    small = submit(1, b"s" * 1000)
    assert framing.split_request(1, small) == [small]  # the fast path: one message, nothing added
    frames = submit(2, b"a" * (3 * PIECE), b"b" * 10)
    pieces = framing.split_request(2, frames)
    total = sum(len(f) for f in frames)
    heads = [framing.unpack_piece_header(h) for h, _ in pieces]
    assert [i for _, i, _, _ in heads] == list(range(len(pieces)))
    assert {(rid, t) for rid, _, t, _ in heads} == {(2, total)}
    assert all(len(p) <= PIECE for _, p in pieces)
    assert heads[-1][3] == framing.LAST_PIECE | framing.FRAME_END
    assert sum(1 for *_, f in heads if f & framing.FRAME_END) == len(frames)
    rebuilt, current = [], b""
    for (_, _, _, flags), (_, payload) in zip(heads, pieces, strict=True):
        current += bytes(payload)
        if flags & framing.FRAME_END:
            rebuilt.append(current)
            current = b""
    assert rebuilt == [bytes(f) for f in frames]


def test_large_requests_of_the_client_travel_in_pieces_and_equal_what_was_sent(srv: ServeProcess) -> None:
    """Through ``RemoteBackend``: an instant of a 5 MiB item, a transaction of items across
    piece boundaries, and a 10 MiB item; what is read back is what was written."""
    before = stats(srv)
    items = [bytes([i % 251]) * n for i, n in enumerate([1, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 7, 5 * MiB])]
    with srv.connect(timeout=30) as e:
        p = e.producer("p")
        tid = p.instant(items)
        txn = p.new_transaction()
        for item in items:
            txn.send(item)
        txn.send(b"z" * (10 * MiB))
        txn.checkpoint()
        b = e.backend
        got = b.get_transaction("p", 0, tid)
        assert got is not None and got.items == items
        got2 = b.get_transaction("p", 0, txn.id)
        assert got2 is not None and got2.items == [*items, b"z" * (10 * MiB)]
    after = stats(srv)
    assert after["pieces"] - before["pieces"] >= 20 * MiB // PIECE, (before, after)  # (20.4 MiB sent)
    assert after["assembling"] == 0 and after["assembling_bytes"] == 0, after


def pieces_of(rid: int, frames: list[Any]) -> list[list[Any]]:
    return [[h, bytes(p)] for h, p in framing.split_request(rid, frames)]


def with_header(message: list[Any], **change: int) -> list[Any]:
    rid, index, total, flags = framing.unpack_piece_header(message[0])
    fields = {"rid": rid, "index": index, "total": total, "flags": flags, **change}
    return [framing.piece_header(fields["rid"], fields["index"], fields["total"], fields["flags"]), *message[1:]]


def bad_sequences() -> dict[str, tuple[list[list[Any]], int, str, str]]:
    """name -> (messages, the request ID answered, error class, words of its message)."""
    ok = pieces_of(10, submit(10, b"o" * (4 * PIECE)))
    big = pieces_of(11, submit(11, b"o" * (4 * PIECE)))
    other = pieces_of(12, submit(12, b"x" * (2 * PIECE)))
    return {
        "out of order": ([ok[0], ok[2], ok[1], *ok[3:]], 10, "ProtocolError", "out of order: piece 1 was expected"),
        "duplicated": ([ok[0], ok[1], ok[1], *ok[2:]], 10, "ProtocolError", "a duplicate"),
        "lost": ([ok[0], *ok[2:]], 10, "ProtocolError", "pieces before it are missing"),
        "over the largest request": ([with_header(m, total=17 * MiB) for m in big], 11, "RequestTooLarge",
                                     "the limit is 16777216 bytes"),
        "more bytes than announced": ([with_header(m, total=PIECE) for m in ok], 10, "ProtocolError",
                                      "more than the 65536 bytes announced"),
        "ends short": ([*ok[:-2], ok[-1]], 10, "ProtocolError", "pieces before it are missing"),
        "last flag early": ([ok[0], with_header(ok[1], flags=framing.LAST_PIECE | framing.FRAME_END)], 10,
                            "ProtocolError", "ended after"),
        "totals disagree": ([ok[0], with_header(ok[1], total=10 * PIECE), *ok[2:]], 10, "ProtocolError",
                            "announces"),
        "interleaved": ([*ok[:2], *other], 10, "ProtocolError", "interrupted after"),
        "stray piece": ([ok[3]], 10, "ProtocolError", "without the pieces before it"),
        "three frames": ([[*ok[0], b"extra"]], 10, "ProtocolError", "a piece is two"),
    }


@pytest.mark.parametrize("case", list(bad_sequences()))
def test_wrong_pieces_get_specific_errors_and_nothing_is_executed(srv: ServeProcess, ctx: zmq.Context[Any],
                                                                  case: str) -> None:
    messages, rid, error, words = bad_sequences()[case]
    s = dealer(srv, ctx)
    with srv.connect(timeout=20) as e:
        head = e.backend.last_txn_id("p", 0)
    for m in messages:
        s.send_multipart(m)
    got_rid, flags, value = reply(s)
    assert (got_rid, flags & framing.ERROR, value[0]) == (rid, framing.ERROR, error), value
    assert words in value[1], value
    if case == "interleaved":  # the request that interrupted it is whole: it runs
        rid2, flags2, value2 = reply(s)
        assert rid2 == 12 and not flags2 & framing.ERROR, value2
    else:
        with srv.connect(timeout=20) as e:
            assert e.backend.last_txn_id("p", 0) == head  # nothing written
    # the same connection is served after, in pieces and whole
    for m in framing.split_request(99, submit(99, b"after" * PIECE)):
        s.send_multipart(m)
    s.send_multipart([framing.request_frame(100, "ping")])
    answers = {r[0]: r for r in (reply(s), reply(s))}
    assert set(answers) == {99, 100} and not any(f & framing.ERROR for _, f, _ in answers.values()), answers
    s.close(0)


#: What wrong messages may be answered with (every one a specific class of ``errors``).
WIRE_ERRORS = {"ProtocolError", "ProtocolVersionError", "RequestTooLarge", "ServerBusy", "InvalidArgument"}

_piece = st.tuples(
    st.sampled_from([1, 2, 2**64 - 1]),  # request ID
    st.integers(0, 5),  # index
    st.sampled_from([0, 10, PIECE, 3 * PIECE, 2**63]),  # total
    st.integers(0, 255),  # flags
    st.binary(max_size=64) | st.builds(lambda n: b"\x95" * n, st.sampled_from([PIECE - 1, PIECE])),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_piece | st.binary(max_size=40).map(lambda b: (b,)), max_size=12))
def test_random_pieces_never_harm_the_server(srv: ServeProcess, ctx: zmq.Context[Any],
                                             sequence: list[tuple[Any, ...]]) -> None:
    """Any sequence of pieces (and junk messages) gets only well-formed error replies, and a
    valid request on the same connection after it is answered correctly."""
    s = dealer(srv, ctx)
    for m in sequence:
        if len(m) == 1:
            s.send_multipart([m[0]])
        else:
            rid, index, total, flags, payload = m
            s.send_multipart([framing.piece_header(rid, index, total, flags), payload])
    s.send_multipart([framing.request_frame(7, "now_ms")])
    while True:
        rid, flags, value = reply(s)
        if rid == 7:
            assert not flags & framing.ERROR and type(value) is int, value
            break
        assert flags & framing.ERROR and value[0] in WIRE_ERRORS, value
    s.close(0)


def test_a_request_abandoned_half_way_is_freed(srv: ServeProcess, ctx: zmq.Context[Any]) -> None:
    """A client that sends half of a 12 MiB request and vanishes: the 6 MiB received count against the
    budget while it is assembled, and are freed after ``--piece-timeout`` (here 1 s)."""
    messages = framing.split_request(5, submit(5, b"h" * (12 * MiB)))
    s = dealer(srv, ctx)
    for m in messages[: len(messages) // 2]:
        s.send_multipart(m, copy=False)
    eventually(lambda: stats(srv)["assembling_bytes"] >= 6 * MiB, timeout=10)  # (what was received)
    s.close(0)
    final = eventually(lambda: (st := stats(srv))["assembling_bytes"] == 0 and st, timeout=10,
                       message=lambda: f"still assembling: {stats(srv)}")
    assert final["assembling"] == 0 and final["held_bytes"] < MiB, final


def test_a_version_2_client_is_answered_and_told_to_upgrade_for_large_requests(srv: ServeProcess,
                                                                               ctx: zmq.Context[Any]) -> None:
    """A client of the previous release (wire protocol 2: requests whole, in one message):
    small requests are answered as before; one larger than a message is refused with
    ProtocolVersionError (not executed) instead of being held whole."""
    s = dealer(srv, ctx)
    s.send_multipart([msgpack.packb([2, 1, "now_ms", 0, []])])
    rid, flags, value = reply(s)
    assert rid == 1 and not flags & framing.ERROR and type(value) is int
    frames = framing.request_frames(2, "submit", 0, encode_submit(
        [O.Instant("p", 0, O.pack_items([b"v" * 40_000])), O.Instant("p", 0, O.pack_items([b"w" * 40_000]))], False))
    assert frames[0][:2] == b"\x95\x03"  # [3, ...]
    v2 = [b"\x95\x02" + frames[0][2:], *frames[1:]]
    assert all(len(f) < framing.MESSAGE_LIMIT for f in v2)  # frames ZeroMQ takes, a message it must not hold
    s.send_multipart(v2)
    rid, flags, value = reply(s)
    assert (rid, value[0]) == (2, "ProtocolVersionError"), value
    assert "upgrade the client" in value[1]
    s.close(0)


def test_several_endpoints_send_whole_and_refuse_what_needs_pieces(srv: ServeProcess, tmp_path: Path) -> None:
    """One DEALER on several endpoints round-robins messages, so it cannot send pieces: a
    request over the servers' message size is refused unsent, with the way out named."""
    with ts.connect([srv.endpoint, srv.endpoint.replace("tcp://127.0.0.1", "tcp://localhost")], timeout=20) as e:
        p = e.producer("p")
        p.instant([b"small"])
        with pytest.raises(errors.RequestTooLarge, match="several endpoints"):
            p.instant([b"L" * (2 * PIECE)])



def test_the_aio_remote_path_sends_large_requests_in_pieces(srv: ServeProcess) -> None:
    """``aio.connect``: an instant of a 3 MiB item and a transaction of 1 MiB items travel in
    pieces (counted by the server) and read back equal."""
    before = stats(srv)

    async def main() -> list[list[bytes]]:
        async with await aio.connect(srv.endpoint, timeout=30.0) as engine:
            producer = await engine.producer("p")
            await producer.instant([b"A" * (3 * MiB)], partition=0)
            async with producer.transaction(partition=0) as txn:
                for i in range(3):
                    await txn.send(bytes([i]) * MiB)
        with ts.connect(srv.endpoint, timeout=20) as e:
            txns = e.backend.transactions_range("p", 0, 0, 2**63 - 1)
            return [t.items for t in txns[-2:]]

    last_two = asyncio.run(main())
    assert last_two == [[b"A" * (3 * MiB)], [bytes([i]) * MiB for i in range(3)]]
    assert stats(srv)["pieces"] - before["pieces"] >= 6 * MiB // PIECE
