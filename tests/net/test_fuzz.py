"""Fuzz: 10,000+ malformed messages against a real ``tstreams serve``; afterwards it still
serves a normal client and no stored data has changed."""

from __future__ import annotations

import random
from typing import Any

import msgpack
import zmq

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.net import framing
from tstreams_embedded.testing import eventually

MAX_MSG = framing.MESSAGE_LIMIT  # the smallest allowed: a piece
METHODS = ["submit", "get_stream", "list_streams", "fetch", "get_transaction", "transactions_range",
           "last_transaction", "last_txn_id", "get_offsets", "get_marker", "list_consumers", "describe_partitions",
           "first_open_at",
           "stats", "now_ms",
           "wait_for_commit", "watch", "ping", "server_info", "cancel", "server_stats"]


def rand_value(r: random.Random, depth: int = 0) -> Any:
    k = r.randrange(12 if depth < 2 else 9)
    if k == 0:
        return None
    if k == 1:
        return r.choice([True, False])
    if k == 2:
        return r.randint(-(2**63), 2**64 - 1)
    if k == 3:
        return r.randint(-3, 3)
    if k == 4:
        return r.random() * r.choice([1, -1, 1e300])
    if k == 5:
        return "".join(r.choice("s\x00\u00e9\u4e2d/ab") for _ in range(r.randrange(0, 8)))
    if k == 6:
        return r.randbytes(r.randrange(0, 40))
    if k == 7:
        return "s"  # the existing stream's name
    if k == 8:
        return msgpack.ExtType(r.randrange(0, 128), r.randbytes(r.randrange(0, 6)))
    if k == 9:
        return [rand_value(r, depth + 1) for _ in range(r.randrange(0, 5))]
    if k == 10:
        keys = [r.choice([None, 0, -1, 2**40, "k", b"b", 1.5]) for _ in range(r.randrange(0, 3))]
        return {k: rand_value(r, depth + 1) for k in keys}
    return tuple(rand_value(r, depth + 1) for _ in range(r.randrange(0, 4)))


def safe_pack(v: Any) -> bytes:
    try:
        return msgpack.packb(v, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return b"\xc1"


def request(version: int, i: int, method: str, flags: int, body: list[bytes]) -> list[bytes]:
    """A request in wire ``version``: 2 (one frame) or 1 (header, body and blob frames)."""
    if version == framing.VERSION:
        return framing.request_frames(i, method, flags, body)
    return framing.legacy_request(i, method, flags, body)


def malformed(r: random.Random, i: int) -> list[bytes]:
    """Message ``i``: the kinds of a version-2 client, a version-1 client and of version 2's
    single frames alternate by tens."""
    kind = i % 10
    if (i // 10) % 3 == 2:
        return malformed_frame(r, i, kind)
    version = framing.VERSION if (i // 10) % 3 == 0 else framing.LEGACY_VERSION
    if kind == 0:  # random bytes, random frame count
        return [r.randbytes(r.randrange(0, 64)) for _ in range(r.randrange(1, 6))]
    if kind == 1:  # wrong frame counts: a valid request with far too many frames
        return request(version, i, "get_stream", 0, [framing.pack(["s"])]) + [b"x"] * r.randrange(2, 5000)
    if kind == 2:  # invalid msgpack in header or body
        return [r.choice([b"\xc1", b"\x93\x01", b"\xdc\xff\xff", b"\x92\x01\xa3ab", b"\x95\x02"]),
                r.choice([b"\xc1", b"\x91", b"\xdb\xff\xff\xff\xff"])]
    if kind == 3:  # unknown methods
        name = r.choice(["", "x" * 300, "__init__", "_dispatch", "SUBMIT", "close", "compact_", "\x00"])
        return request(version, i, name, 0, [framing.pack([])])
    if kind == 4:  # wrong header shapes and types
        return [safe_pack(r.choice([[i, "ping"], [str(i), "ping", 0], [i, 5, 0], [i, "ping", "f"], {"id": i},
                                    [i, "ping", 0, 1], None, [2**64 - 1, "ping", 2**63],
                                    [2, i, "ping", 0], [2, i, "ping", "f", []], [2, str(i), "ping", 0, []],
                                    [2, i, "ping", 0, {}], [2, i, None, 0, []], [2.0, i, "ping", 0, []]]))]
    if kind == 5:  # known methods, wrong argument types and counts
        args = [rand_value(r) for _ in range(r.randrange(0, 6))]
        method = r.choice(METHODS[1:12] + ["get_stream", "store_snapshot"])
        return request(version, i, method, r.randrange(0, 4), [safe_pack(args)])
    if kind == 6:  # submits that cannot apply: garbage ops, always with a poison op (atomic: nothing written)
        ops = [[r.randrange(-2, 16), *[rand_value(r) for _ in range(r.randrange(0, 6))]]
               for _ in range(r.randrange(0, 4))]
        ops.insert(r.randrange(0, len(ops) + 1), [99])
        return request(version, i, "submit", 0, [safe_pack([ops, rand_value(r)])])
    if kind == 7:  # blob references that do not match the frames
        body = framing.pack([[O.encode(O.Instant("s", 0, msgpack.ExtType(1, r.randbytes(4))))], True])
        return request(version, i, "submit", 0, [body]) + [b"\x91\xc4\x01x"] * r.randrange(0, 3)
    if kind == 8:  # oversized frame (ZMQ_MAXMSGSIZE: the server drops the connection)
        if i % 100 == 8:
            return request(version, i, "ping", 0, [b"\0" * (MAX_MSG + r.randrange(1, 1000))])
        return request(version, i, "fetch", 0, [safe_pack(["s", 0, 0, r.choice([0, -1, 2**40, "x"])])])
    # kind 9: long polls and subscriptions with junk, cancels of unknown requests
    m = r.choice(["wait_for_commit", "watch", "cancel"])
    return request(version, i, m, 0, [safe_pack([rand_value(r) for _ in range(r.randrange(0, 3))])])


def malformed_frame(r: random.Random, i: int, kind: int) -> list[bytes]:
    """Version 2's own failure modes: one frame holding the header and the arguments."""
    good = framing.request_frame(i, r.choice(METHODS), r.randrange(0, 2), safe_pack([rand_value(r)]))
    if kind in (0, 1):  # truncated anywhere, the header included
        return [good[: r.randrange(0, len(good))]]
    if kind == 2:  # wrong versions
        return [safe_pack([r.choice([0, 1, 3, 7, 255, 2**32, -1]), i, "ping", 0, []])]
    if kind == 3:  # a byte flipped
        b = bytearray(good)
        b[r.randrange(len(b))] = r.randrange(256)
        return [bytes(b)]
    if kind == 4:  # junk appended (two msgpack values in one frame)
        return [good + r.choice([b"\xc0", b"\x90", r.randbytes(r.randrange(1, 20))])]
    if kind == 5:  # a version-2 frame followed by stray frames
        return [good, *[r.randbytes(r.randrange(0, 30)) for _ in range(r.randrange(1, 4))]]
    if kind == 6:  # the arguments of another request glued to a random head
        return [framing.request_frame(i, r.choice(METHODS), 0, b"") + r.randbytes(r.randrange(0, 30))]
    if kind == 7:  # a large single frame of a valid shape and random arguments
        return [framing.request_frame(i, "submit", 0, safe_pack([[r.randbytes(r.randrange(1000, 8000))], True]))]
    if kind == 8:  # nested depth and huge declared lengths
        return [framing.request_frame(i, "get_stream", 0, r.choice([b"\x91" * 2000, b"\xdd\xff\xff\xff\xff",
                                                                     b"\xdf\x7f\xff\xff\xff"]))]
    return [r.randbytes(r.randrange(0, 200))]  # kind 9: random single frames


def check_reply(frames: list[bytes]) -> None:
    """Every reply is well-formed in one of the two versions (one frame, or two)."""
    rid, flags, value = (framing.unpack_reply if len(frames) == 1 else framing.unpack_legacy_reply)(frames)
    assert type(rid) is int and flags in (0, framing.ERROR, framing.MORE), (rid, flags, value)
    if flags & framing.ERROR:
        assert type(value) is list and len(value) == 2 and all(type(v) is str for v in value), value


def snapshot(engine: Any) -> Any:
    b = engine.backend
    out = [b.stats()["log_seq"], [s.to_wire() for s in b.list_streams()]]
    for p in range(2):
        out.append([t.to_wire() for t in b.transactions_range("s", p, 0, 2**62)])
    out.append(b.get_offsets("s", "c"))
    out.append(b.get_marker("m"))
    return out


def test_fuzz_10000_malformed_messages(make_server: Any) -> None:
    srv = make_server(extra_args=["--max-msg-size", str(MAX_MSG)])
    engine = ts.connect(srv.endpoint, timeout=20)
    try:
        engine.create_stream("s", partitions=2)
        p = engine.producer("s")
        for i in range(20):
            p.instant([b"item-%d" % i, b"x" * 100])
        c = engine.consumer("s", name="c")
        c.get_transaction(0)
        c.checkpoint()
        engine.backend.submit([O.SetMarker("m", 7, True)])
        before = snapshot(engine)

        r = random.Random(20261122)
        ctx = zmq.Context.instance()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVHWM, 0)
        s.connect(srv.endpoint)
        sent = 0
        replies = 0
        try:
            for i in range(10_500):
                frames = malformed(r, i)
                if sum(map(len, frames)) > MAX_MSG:  # gets its sender disconnected: use a throwaway socket
                    big = ctx.socket(zmq.DEALER)
                    big.setsockopt(zmq.LINGER, 1000)
                    big.connect(srv.endpoint)
                    big.send_multipart(frames)
                    big.close()
                else:
                    s.send_multipart(frames)
                sent += 1
                if i % 100 == 99:
                    while s.poll(0):
                        check_reply(s.recv_multipart())
                        replies += 1

            def answered() -> bool:
                nonlocal replies
                while s.poll(0):
                    check_reply(s.recv_multipart())
                    replies += 1
                stats = engine.backend.server_stats()
                return replies > 5_000 and stats["malformed"] > 1_000 and stats["errors"] > 5_000

            # the server kept answering throughout (errors mostly), and counted what it refused
            eventually(answered, 20, 0.05, message=lambda: f"{replies} replies, {engine.backend.server_stats()}")
        finally:
            s.close(0)
        assert sent >= 10_000
        assert srv.alive()
        assert snapshot(engine) == before  # no stored data changed
        # and a normal client is served as before
        fresh = ts.connect(srv.endpoint, timeout=20)
        try:
            tid = fresh.producer("s").instant([b"after"], partition=1)
            assert fresh.backend.get_transaction("s", 1, tid).items == [b"after"]
            assert fresh.consumer("s", name="c").offsets == c.offsets
        finally:
            fresh.close()
    finally:
        engine.close()


def test_forged_records_on_the_wire_are_refused(make_server: Any) -> None:
    """A client that bypasses RemoteBackend and writes rows by hand still cannot set fields
    only the engine resolves, nor submit engine-only records: the server refuses the batch."""
    srv = make_server()
    engine = ts.connect(srv.endpoint, timeout=20)
    try:
        engine.create_stream("s", partitions=2)
        existing = engine.producer("s").instant([b"committed"], partition=0)
        before = snapshot(engine)
        chunk = O.pack_items([b"FORGED"])
        rows = [
            [int(O.Opcode.INSTANT), "s", 0, chunk, existing],
            [int(O.Opcode.OPEN), "s", 0, 1000, None, 2**63 - 1, None],
            [int(O.Opcode.KEEPALIVE), [["s", 0, existing]], 1000, 2**63 - 1],
            [int(O.Opcode.COMPACT), "s", 0, 2**63 - 1],
            [int(O.Opcode.INVALIDATE), "s", 0, existing],
            [int(O.Opcode.INSTANT), "s", 0],  # too few fields
            [int(O.Opcode.INSTANT), "s", 0, chunk, None, "extra"],  # too many
        ]
        s = zmq.Context.instance().socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(srv.endpoint)
        try:
            for i, row in enumerate(rows):
                s.send_multipart(framing.request_frames(i, "submit", 0, [framing.pack([[row], True])]))
                assert s.poll(20_000), f"no reply to {row!r:.60}"
                req_id, flags, value = framing.unpack_reply(s.recv_multipart())
                assert req_id == i and flags & framing.ERROR, f"{row!r:.60} was accepted: {value!r}"
                assert value[0] == "InvalidArgument", value
        finally:
            s.close(0)
        assert snapshot(engine) == before
    finally:
        engine.close()
