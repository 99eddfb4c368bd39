"""The server framework with a stand-in handler set: the three handler kinds, request IDs,
pipelining, cooperative generators, the draining loop, cancellation and departed clients."""

from __future__ import annotations

import threading
import time

import msgpack
import pytest
import zmq

from tstreams_embedded import errors
from tstreams_embedded.net import framing
from tstreams_embedded.net.connection import Connection
from tstreams_embedded.net.registry import Registry, Sleep
from tstreams_embedded.net.server import ServerOptions
from tstreams_embedded.testing import eventually

from .helpers import ThreadServer


def stand_in_registry() -> tuple[Registry, dict]:
    reg = Registry()
    state: dict = {"count": 0, "blocked": 0, "in_block": threading.Event()}

    @reg.call("echo")
    def echo(session, *args):
        return list(args)

    @reg.call("add")
    def add(session, a: int, b: int = 0):
        if not isinstance(a, int):
            raise errors.InvalidArgument("a must be an integer")
        return a + b

    @reg.call("block")
    def block(session, seconds: float):
        state["in_block"].set()
        time.sleep(seconds)  # deliberately blocks the loop: lets requests queue up
        state["blocked"] += 1
        return True

    @reg.call("slow", executor="pool")
    def slow(session, seconds: float):
        time.sleep(seconds)
        return "slept"

    @reg.notify("inc")
    def inc(session, n: int = 1):
        state["count"] += n

    @reg.call("count")
    def count(session):
        return state["count"]

    @reg.stream("range")
    def rng(session, n: int, pause: float = 0.0):
        for i in range(n):
            if pause:
                yield Sleep(pause)
            yield i
        return "end"

    @reg.stream("forever")
    def forever(session):
        i = 0
        while True:
            yield Sleep(0.01)
            yield i
            i += 1

    @reg.stream("fails")
    def fails(session):
        yield 1
        raise errors.StreamNotFound("gone midway")

    return reg, state


@pytest.fixture
def ts_server():
    reg, state = stand_in_registry()
    s = ThreadServer(reg, ServerOptions(rcvhwm=4096))  # (the drain test queues 2,000 requests in ZeroMQ)
    s.state = state
    yield s
    s.stop()


@pytest.fixture
def conn(ts_server):
    c = Connection(ts_server.endpoint, timeout=10.0)
    yield c
    c.close()


def test_plain_call_and_blob_frames(conn):
    assert conn.call("add", 2, 3) == 5
    body = framing.encode_args([b"x" * 100_000, "s", b"small"], blob_positions=(0, 2))
    assert len(body) == 2  # the large payload travels as its own frame, the small one inside the request
    assert conn.call_frames("echo", body) == [b"x" * 100_000, "s", b"small"]


def test_errors_keep_class_and_message(conn):
    with pytest.raises(errors.InvalidArgument, match="a must be an integer"):
        conn.call("add", "x")
    with pytest.raises(errors.InvalidArgument, match=r"add\(\) takes 1 to 2 arguments, got 3"):
        conn.call("add", 1, 2, 3)
    with pytest.raises(errors.ProtocolError, match="unknown method 'nope'"):
        conn.call("nope")
    # a TypeError inside a handler becomes InvalidArgument (error_to_wire)
    with pytest.raises(errors.InvalidArgument):
        conn.call("add", 1, "x")


def test_generator_gives_n_responses_then_its_return_value(conn):
    items: list = []
    fut = conn.request("range", framing.encode_args([5]), on_item=items.append)
    assert conn.wait(fut, 10) == "end"
    assert items == [0, 1, 2, 3, 4]


def test_generator_error_midway_is_final(conn):
    items: list = []
    fut = conn.request("fails", framing.encode_args([]), on_item=items.append)
    with pytest.raises(errors.StreamNotFound, match="gone midway"):
        conn.wait(fut, 10)
    assert items == [1]


def test_several_generators_of_one_client_run_cooperatively(conn):
    """Three generators in flight at once, plus plain calls answered while they run."""
    got: dict[str, list] = {"a": [], "b": [], "c": []}
    futs = {k: conn.request("range", framing.encode_args([20, 0.01]), on_item=got[k].append) for k in got}
    # a plain call is answered while all three generators are still running
    assert conn.call("add", 40, 2) == 42
    assert not any(f.done() for f in futs.values())
    for f in futs.values():
        assert conn.wait(f, 20) == "end"
    assert all(v == list(range(20)) for v in got.values())


def test_pool_handler_does_not_block_the_loop(conn):
    fut = conn.request("slow", framing.encode_args([0.5]))
    assert conn.call("add", 1, 1) == 2
    assert not fut.done()  # the inline call was answered while the slow one still ran
    assert conn.wait(fut, 10) == "slept"


def test_fire_and_forget_gets_no_reply(ts_server, conn):
    before = ts_server.stats()
    for _ in range(10):
        conn.notify("inc", framing.encode_args([2]))
    assert conn.call("count") == 20
    after = ts_server.stats()
    # 11 requests received (10 notifications + count), 1 reply sent
    assert after["received"] - before["received"] == 11
    assert after["replies"] - before["replies"] == 1


@pytest.mark.parametrize("version", framing.SUPPORTED_VERSIONS)
def test_request_ids_are_echoed_and_pipelining(ts_server, version):
    """In every wire version (version 1: the clients before issue 21, answered in kind;
    version 2: before pieces, the same request frame as version 3)."""

    def version_2(rid, method, flags, body):
        return [msgpack.packb([2, rid, method, flags, [rid, 1]])]

    frames_of = {framing.VERSION: framing.request_frames, framing.UNPIECED_VERSION: version_2,
                 framing.LEGACY_VERSION: framing.legacy_request}[version]
    unpack_reply = framing.unpack_legacy_reply if version == framing.LEGACY_VERSION else framing.unpack_reply
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.connect(ts_server.endpoint)
    try:
        ids = list(range(10_000, 10_000 + 500 * 7, 7))
        for i in ids:  # all in flight before any reply is read
            s.send_multipart(frames_of(i, "add", 0, [framing.pack([i, 1])]))
        seen = {}
        for _ in ids:
            assert s.poll(10_000)
            frames = s.recv_multipart()
            assert len(frames) == (2 if version == framing.LEGACY_VERSION else 1)
            rid, flags, value = unpack_reply(frames)
            seen[rid] = value
        assert seen == {i: i + 1 for i in ids}
    finally:
        s.close(0)


def test_each_wakeup_drains_every_queued_message(ts_server, conn):
    """2,000 requests queue while the loop is blocked; they are then handled in a handful
    of wakeups, not one callback per message."""
    blocker = conn.request("block", framing.encode_args([0.5]))
    assert ts_server.state["in_block"].wait(10)  # the loop is now inside `block`
    before = ts_server.server.stats.wakeups  # read racily: the loop is blocked
    futs = [conn.request("add", framing.encode_args([i, 0])) for i in range(2000)]
    assert conn.wait(blocker, 10) is True
    assert [conn.wait(f, 10) for f in futs] == list(range(2000))
    after = ts_server.stats()
    assert after["wakeups"] - before <= 20, after


def test_cancel_ends_a_generator(ts_server, conn):
    items: list = []
    fut = conn.request("forever", framing.encode_args([]), on_item=items.append)
    eventually(lambda: len(items) >= 3, 10, 0.01)
    assert ts_server.stats()["running_generators"] == 1
    conn.cancel(fut)
    eventually(lambda: ts_server.stats()["running_generators"] == 0, 10, 0.01)
    with pytest.raises(errors.EngineClosed, match="cancelled"):
        fut.result(0)


def test_reply_to_departed_client_never_crashes(ts_server):
    ctx = zmq.Context.instance()
    for _ in range(5):
        received = ts_server.stats()["received"]  # (read before sending: the server may be quick)
        s = ctx.socket(zmq.DEALER)
        s.connect(ts_server.endpoint)
        s.send_multipart(framing.request_frames(1, "slow", 0, [framing.pack([0.2])]))
        s.send_multipart(framing.request_frames(2, "range", 0, [framing.pack([1000, 0.001])]))
        eventually(lambda: ts_server.stats()["received"] >= received + 2, 10, 0.01)  # noqa: B023
        s.close(0)  # gone before the replies
    eventually(lambda: ts_server.stats()["unroutable"] >= 1, 10, 0.05)
    c = Connection(ts_server.endpoint, timeout=10)
    try:
        assert c.call("add", 1, 2) == 3
    finally:
        c.close()
    # the departed clients' generators ended
    eventually(lambda: ts_server.stats()["running_generators"] == 0, 10, 0.05)


def _replies(s: zmq.Socket, n: int) -> list[list[bytes]]:
    out = []
    for _ in range(n):
        assert s.poll(10_000)
        out.append(s.recv_multipart())
    return out


def test_malformed_messages_get_protocol_errors(ts_server):
    """Version 2: each request is one frame (plus blob frames); replies are one frame."""
    v2 = framing.request_frame
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.connect(ts_server.endpoint)
    try:
        cases = [
            [b"\xc1"],  # invalid msgpack
            [b""],  # an empty frame
            [msgpack.packb([2, 5, "add", 0])],  # too few fields (3 would be a version-1 header)
            [msgpack.packb([2, 6, "add", 0, {"a": 1}])],  # arguments not a list
            [msgpack.packb([2, 7, "add", 0, [1], "extra"])],  # too many fields
            [msgpack.packb([2, 8, 5, 0, []])],  # method not a string
            [v2(9, "echo", 0, framing.pack([msgpack.ExtType(1, b"\0\0\0\5")]))],  # dangling blob reference
            [v2(10, "echo", 0, framing.pack([msgpack.ExtType(1, b"\0\0\0\0")])), b"a", b"b"],  # unused blob
            [v2(11, "echo", 0, framing.pack([msgpack.ExtType(1, b"\0\0\0\0")] * 2)), b"a"],  # blob used twice
            [v2(12, "add", 0, framing.pack([1, 2]))[:-3]],  # truncated
        ]
        for frames in cases:
            s.send_multipart(frames)
        got = [framing.unpack_reply(f) for f in _replies(s, len(cases))]
        assert all(flags == framing.ERROR for _, flags, _ in got), got
        assert [v[0] for _, _, v in got] == ["ProtocolError"] * len(cases), got
        # the request ID is answered wherever the frame's head shows it
        assert [rid for rid, _, _ in got] == [-1, -1, 5, 6, 7, 8, 9, 10, 11, 12]
        assert "[3, int id, str method, int flags, [args]]" in got[2][2][1]
        assert "extension type 1 (no blob frames)" in got[6][2][1]
        assert "2 blob frames but 1 references" in got[7][2][1]
        assert ts_server.server.stats.malformed >= len(cases)
        # the connection still works
        s.send_multipart(framing.request_frames(13, "add", 0, [framing.pack([1, 2])]))
        assert framing.unpack_reply(_replies(s, 1)[0]) == (13, 0, 3)
    finally:
        s.close(0)


def test_malformed_version_1_messages_get_version_1_errors(ts_server):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.connect(ts_server.endpoint)
    try:
        cases = [
            [msgpack.packb([1, "add", 0]), b"\xc1"],  # bad body
            [msgpack.packb([8, "add", 0]), msgpack.packb({"a": 1})],  # body not a list
            [msgpack.packb([9, "add", 0]), framing.pack([msgpack.ExtType(1, b"\0\0\0\5")])],  # dangling blob
            [msgpack.packb([10, "add", 0])[:-1]],  # a truncated header
        ]
        for frames in cases:
            s.send_multipart(frames)
        got = [framing.unpack_legacy_reply(f) for f in _replies(s, len(cases))]
        assert [(rid, flags, v[0]) for rid, flags, v in got] == [
            (1, framing.ERROR, "ProtocolError"), (8, framing.ERROR, "ProtocolError"),
            (9, framing.ERROR, "ProtocolError"), (10, framing.ERROR, "ProtocolError")]
    finally:
        s.close(0)


@pytest.mark.parametrize("version", [0, 4, 255, 2**40])
def test_an_unknown_wire_version_is_refused_clearly(ts_server, version):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.connect(ts_server.endpoint)
    try:
        s.send_multipart([msgpack.packb([version, 21, "add", 0, [1, 2]])])
        rid, flags, value = framing.unpack_reply(_replies(s, 1)[0])
        assert (rid, flags, value[0]) == (21, framing.ERROR, "ProtocolVersionError")
        assert f"wire protocol version {version} is not supported" in value[1]
        assert ts_server.server.stats.received >= 1
    finally:
        s.close(0)


def test_a_client_facing_an_older_server_gets_protocol_version_error():
    """A version-1 server cannot read version-2 requests: it answers each with a version-1
    error reply (two frames), whose request ID is whatever it took for one. The client
    fails the requests it sent with ProtocolVersionError, never as another request's reply."""
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def old_server() -> None:  # what a version-1 server replies to any version-2 request
        while not stop.is_set():
            if router.poll(50):
                identity, *_ = router.recv_multipart()
                router.send_multipart([identity, msgpack.packb([2, framing.ERROR]), msgpack.packb(
                    ["ProtocolError", "header must be msgpack [int id, str method, int flags]"])])

    t = threading.Thread(target=old_server, daemon=True)
    t.start()
    c = Connection(f"tcp://127.0.0.1:{port}", timeout=10.0)
    try:
        with pytest.raises(errors.ProtocolVersionError, match="older tstreams-embedded"):
            c.call("add", 1, 2)
        with pytest.raises(errors.ProtocolVersionError):
            c.call("add", 3, 4)
    finally:
        c.close()
        stop.set()
        t.join(5)
        router.close(0)


@pytest.mark.timeout(120)
def test_many_threads_share_one_connection(ts_server, conn):
    """Synchronous callers (each may take the receiver role), pipelined callers and a
    running generator on one connection at once: every reply reaches its own caller."""
    errors_seen: list = []
    stream_items: list = []
    gen = conn.request("range", framing.encode_args([200, 0.002]), on_item=stream_items.append)

    def sync_caller(k: int) -> None:
        try:
            for i in range(300):
                assert conn.call("add", k * 1000, i) == k * 1000 + i
        except BaseException as e:  # noqa: BLE001
            errors_seen.append(e)

    def pipelined_caller(k: int) -> None:
        try:
            futs = [(i, conn.request("add", framing.encode_args([k, i]))) for i in range(300)]
            for i, f in futs:
                assert conn.wait(f, 30) == k + i
        except BaseException as e:  # noqa: BLE001
            errors_seen.append(e)

    threads = [threading.Thread(target=sync_caller, args=(k,)) for k in range(6)]
    threads += [threading.Thread(target=pipelined_caller, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads)
    assert not errors_seen, errors_seen[:3]
    assert conn.wait(gen, 30) == "end"
    assert stream_items == list(range(200))


def test_a_single_request_frame_over_the_size_limit_is_refused_under_its_id():
    """A version-2 request is one frame: over ``max_request_bytes`` only its head is kept
    (not the whole frame), enough to answer RequestTooLarge under its request ID."""
    reg, _ = stand_in_registry()
    srv = ThreadServer(reg, ServerOptions(max_request_bytes=10_000))
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.connect(srv.endpoint)
    try:
        big = framing.request_frame(77, "echo", 0, framing.pack([b"x" * 50_000]))
        s.send_multipart([big])
        legacy = framing.legacy_request(78, "echo", 0, [framing.pack([b"x" * 50_000])])
        s.send_multipart(legacy)
        s.send_multipart(framing.request_frames(79, "echo", 0, [framing.pack([b"ok"])]))
        got = _replies(s, 3)
        rid, flags, value = framing.unpack_reply(got[0])
        assert (rid, flags, value[0]) == (77, framing.ERROR, "RequestTooLarge"), value
        assert "more than 10000 bytes" in value[1]
        rid, flags, value = framing.unpack_legacy_reply(got[1])
        assert (rid, flags, value[0]) == (78, framing.ERROR, "RequestTooLarge"), value
        assert framing.unpack_reply(got[2]) == (79, 0, [b"ok"])
        assert srv.stats()["too_large"] == 2
    finally:
        s.close(0)
        srv.stop()


def test_a_version_1_client_gets_generator_responses_and_errors_in_version_1(ts_server):
    """Replies follow the client's version wherever they are made: the generator scheduler
    (MORE responses, the final one), a handler's error, an unknown method."""
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.connect(ts_server.endpoint)
    try:
        s.send_multipart(framing.legacy_request(1, "range", 0, [framing.pack([3])]))
        got = _replies(s, 4)
        assert all(len(f) == 2 for f in got), got
        assert [framing.unpack_legacy_reply(f) for f in got] == [
            (1, framing.MORE, 0), (1, framing.MORE, 1), (1, framing.MORE, 2), (1, 0, "end")]
        s.send_multipart(framing.legacy_request(2, "add", 0, [framing.pack(["x"])]))
        s.send_multipart(framing.legacy_request(3, "nope", 0))
        got = [framing.unpack_legacy_reply(f) for f in _replies(s, 2)]
        assert [(rid, flags, v[0]) for rid, flags, v in got] == [
            (2, framing.ERROR, "InvalidArgument"), (3, framing.ERROR, "ProtocolError")]
    finally:
        s.close(0)
