"""The same program against an embedded engine and through ``tstreams serve``: identical
results, identical errors (class and message), and the remote-only behaviours (pipelined
transaction data, long polls, server-side atomic CheckpointGroup)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.net import framing
from tstreams_embedded.testing import ServeProcess, eventually


@pytest.fixture
def both(tmp_path: Path, remote: Any) -> dict[str, Any]:
    e = ts.open(tmp_path / "embedded", compaction_interval=None)
    yield {"embedded": e, "remote": remote}
    e.close()


class Ids:
    """Replaces transaction IDs (time-based, so different per run) by their order of
    appearance; IDs are per partition, so the key is (partition, id)."""

    def __init__(self) -> None:
        self.map: dict[tuple[int, int], str] = {}

    def __call__(self, partition: int, v: int | None) -> str | None:
        if v is None:
            return None
        return self.map.setdefault((partition, v), f"T{len(self.map)}")


def scenario(engine: Any) -> list:
    out: list = []
    ids = Ids()
    info = engine.create_stream("clicks", partitions=3, ttl=3600, description="d")
    out.append(("create", info.name, info.partitions, info.ttl, info.description))
    engine.create_stream("views")
    out.append(("list", [s.name for s in engine.list_streams()], [s.name for s in engine.list_streams("v")]))
    p = engine.producer("clicks", serializer="msgpack")
    with p.transaction(partition=0) as t:
        for i in range(250):  # more than batch_size: several pipelined DATA flushes
            t.send({"i": i})
    t2 = p.new_transaction(partition=1)
    t2.send_many(["a", "b"])
    t2.checkpoint()
    t3 = p.new_transaction(partition=2)
    t3.send("never")
    t3.cancel()
    inst = p.instant(["x", "y", "z"], partition=2)
    out.append(("instant", ids(2, inst)))
    c = engine.consumer("clicks", name="billing", serializer="msgpack")
    got = []
    for part in range(3):
        while (tx := c.get_transaction(part)) is not None:
            got.append((tx.partition, ids(tx.partition, tx.id), len(tx.items), tx.items[:2]))
    out.append(("consumed", got))
    c.checkpoint()
    out.append(("offsets", {k: ids(k, v) for k, v in sorted(c.offsets.items())}))
    c2 = engine.consumer("clicks", name="billing", serializer="msgpack")
    out.append(("resumed", c2.get_transaction(0)))
    out.append(("by_id", c2.get_transaction_by_id(2, inst).items))
    out.append(("last", ids(0, c2.get_last_transaction(0).id)))
    out.append(("range", [ids(0, t.id) for t in c2.get_transactions_from_to(0, 0, 2**62)]))
    # CheckpointGroup: a producer's open transaction and a consumer's offsets in one write
    out_p = engine.producer("views")
    reader = engine.consumer("clicks", name="etl", partitions=[1])
    txn = out_p.new_transaction(partition=0)
    for tx in iter(lambda: reader.get_transaction(1), None):
        txn.send_many(tx.items)
    ts.CheckpointGroup(out_p, reader).checkpoint()
    v = engine.consumer("views", name="check")
    out.append(("group", v.get_transaction(0).items, {k: ids(k, x) for k, x in engine.consumer(
        "clicks", name="etl", partitions=[1]).offsets.items()}))
    engine.delete_stream("views")
    out.append(("deleted", [s.name for s in engine.list_streams()]))
    return out


def test_same_program_same_results(both):
    results = {k: scenario(e) for k, e in both.items()}
    assert results["remote"] == results["embedded"]


def _norm(msg: str) -> str:
    return re.sub(r"\d+ ms", "<n> ms", re.sub(r"\d{12,}", "<id>", msg))


BAD_CALLS: list[tuple[str, Callable[[Any], Any]]] = [
    ("unknown stream", lambda e: e.get_stream("nope")),
    ("duplicate stream", lambda e: e.create_stream("s")),
    ("partition out of range", lambda e: e.producer("s").instant([b"x"], partition=7)),
    ("fetch partition out of range", lambda e: e.backend.fetch("s", 9, 0)),
    ("unknown transaction", lambda e: e.backend.submit([O.Checkpoint("s", 0, 12345)])),
    ("bad argument type", lambda e: e.backend.fetch("s", "zero", 0)),
    ("bad after", lambda e: e.backend.fetch("s", 0, -5)),
    ("bad marker name", lambda e: e.backend.get_marker(""),),
    ("ops not a list", lambda e: e.backend.submit("nonsense")),
    ("unknown opcode", lambda e: e.backend.submit([(99, "s")])),
    ("bad op field", lambda e: e.backend.submit([O.Open("s", 0, None)])),  # type: ignore[arg-type]
    ("engine-resolved field", lambda e: e.backend.submit([O.Instant("s", 0, O.pack_items([b"x"]), 5)])),
    ("item too large", lambda e: e.backend.submit(
        [O.Instant("s", 0, O.pack_items([b"x" * (10 * 1024 * 1024 + 1)]))])),
    ("marker conflict", lambda e: [e.backend.submit([O.SetMarker("m", 5, True)]) for _ in range(2)]),
    ("delete unknown stream", lambda e: e.delete_stream("ghost")),
    ("bad consumer name", lambda e: e.backend.get_offsets("s", "")),
    ("partial write rolled back", lambda e: e.backend.submit(
        [O.Instant("s", 0, O.pack_items([b"ok"])), O.Checkpoint("s", 0, 1)])),
]


@pytest.fixture(scope="module")
def shared_remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An engine connected to one server shared by the cases of :data:`BAD_CALLS` (one server
    per module, not per case; each case deletes its stream again)."""
    directory = tmp_path_factory.mktemp("bad-calls")
    with ServeProcess(directory / "data", directory) as server:
        engine = server.connect(timeout=20.0)
        yield engine
        engine.close()


@pytest.mark.parametrize("name,call", BAD_CALLS, ids=[b[0] for b in BAD_CALLS])
def test_bad_requests_raise_the_embedded_error(tmp_path: Path, shared_remote: Any, name: str,
                                               call: Callable) -> None:
    """Well-formed bad requests: the remote error has the embedded error's class and message,
    and nothing of a failed batch is written."""
    remote = shared_remote
    assert [s.name for s in remote.list_streams()] == []  # (every earlier case deleted its stream)
    emb = ts.open(tmp_path / "emb", compaction_interval=None)
    try:
        results = {}
        for kind, e in (("embedded", emb), ("remote", remote)):
            e.create_stream("s", partitions=2)
            with pytest.raises(errors.TStreamsError) as info:
                call(e)
            results[kind] = (type(info.value), _norm(str(info.value)))
            assert e.backend.last_transaction("s", 0) is None
        assert results["remote"] == results["embedded"]
    finally:
        emb.close()
        if any(s.name == "s" for s in remote.list_streams()):
            remote.delete_stream("s")


def _expired(engine: Any) -> None:
    """Wait until ``engine``'s store has expired the one open transaction of stream "s" (it no
    longer blocks partition 0)."""
    eventually(lambda: not engine.backend.fetch("s", 0, 0, 1).blocked, 10, 0.02,
               message="the open transaction expired")


def test_expired_transaction_error_matches(tmp_path: Path, remote: Any, tstreams_clock: Any) -> None:
    # without keep-alive the producer is as good as dead: nobody keeps its transaction alive
    emb = ts.open(tmp_path / "emb", compaction_interval=None, keepalive_interval=None, clock=tstreams_clock)
    silent = ts.connect(remote.backend.endpoint, keepalive_interval=None)
    try:
        got = {}
        for kind, e in (("embedded", emb), ("remote", silent)):
            e.create_stream("s")
            p = e.producer("s", txn_ttl=0.2)
            t = p.new_transaction()
            assert t.id  # reading the id opens it in storage now
            t.send(b"late")
            if kind == "embedded":
                tstreams_clock.advance(201)
            _expired(e)  # (the server's real clock: waited for)
            with pytest.raises(errors.TransactionExpired) as info:
                t.checkpoint()
            got[kind] = _norm(str(info.value))
            assert e.consumer("s", name="c").get_transaction(0) is None
        assert got["remote"] == got["embedded"]
    finally:
        emb.close()
        silent.close()


def test_pipelined_data_error_surfaces_before_checkpoint(remote: Any) -> None:
    """A failed pipelined DATA flush is raised instead of checkpointing a transaction
    that misses a chunk."""
    silent = ts.connect(remote.backend.endpoint, keepalive_interval=None)  # nobody keeps it alive
    try:
        silent.create_stream("s")
        p = silent.producer("s", txn_ttl=0.2, batch_size=10)
        t = p.new_transaction()
        assert t.id  # opened in storage now
        _expired(remote)  # expired on the server; the client does not know yet
        t.send_many([b"x"] * 25)  # flushes are pipelined: no error yet
        with pytest.raises(errors.TransactionExpired):
            t.checkpoint()
        assert remote.consumer("s", name="c").get_transaction(0) is None
    finally:
        silent.close()


def test_large_transaction_and_payload_frames(remote: Any) -> None:
    remote.create_stream("big")
    p = remote.producer("big", batch_size=50)
    items = [bytes([i % 256]) * (1000 + i) for i in range(1000)]
    with p.transaction() as t:
        t.send_many(items)
    c = remote.consumer("big", name="c")
    assert c.get_transaction(0).items == items


def test_long_poll_does_not_block_other_requests(remote: Any) -> None:
    """A client's wait_for_commit parks on the server; the same client's other requests and
    another thread's commit go through, and the commit ends the wait."""
    remote.create_stream("s")
    b = remote.backend
    seen = b.wait_for_commit(-1, 0)
    result: list = []
    base = b.server_stats()["received"]
    th = threading.Thread(target=lambda: result.append(b.wait_for_commit(seen, 30)))
    th.start()
    eventually(lambda: b.server_stats()["received"] >= base + 2)  # the long poll reached the server
    assert th.is_alive()
    assert b.now_ms() > 0  # served while the long poll waits
    remote.producer("s").instant([b"wake"])
    th.join(20)
    assert not th.is_alive() and result[0] > seen


def test_watch_subscription_and_two_generators(remote: Any) -> None:
    remote.create_stream("s")
    b = remote.backend
    seen = b.wait_for_commit(-1, 0)
    got1: list = []
    got2: list = []
    s1 = b.watch(seen, got1.append)
    s2 = b.watch(seen, got2.append)
    p = remote.producer("s")
    for i in range(5):
        p.instant([b"%d" % i])
    eventually(lambda: got1 and got2 and max(got1) >= seen + 5 and max(got2) >= seen + 5, 20,
               message=lambda: f"watch notifications {got1}, {got2} (seen {seen})")
    assert got1 == sorted(got1) and got2 == sorted(got2)
    s1.cancel()
    s2.cancel()
    eventually(lambda: b.server_stats()["running_generators"] == 0, 10)


def test_subscriber_over_the_network(remote: Any) -> None:
    remote.create_stream("s", partitions=2)
    got: list = []
    sub = remote.subscribe("s", name="alerts", callback=lambda t: got.append(t.items), start="newest")
    try:
        # the subscriber's consumer took its "newest" position when it was made: no sleep
        p = remote.producer("s")
        for i in range(6):
            p.instant([b"%d" % i])
        eventually(lambda: len(got) >= 6, 20)
        assert sorted(x[0] for x in got) == [b"%d" % i for i in range(6)]
    finally:
        sub.stop()


def test_remote_checkpoint_group_is_one_write(remote: Any) -> None:
    remote.create_stream("in")
    remote.create_stream("out")
    remote.producer("in").instant([b"a", b"b"])
    c = remote.consumer("in", name="etl")
    p = remote.producer("out")
    t = p.new_transaction()
    tx = c.get_transaction(0)
    t.send_many(tx.items)
    after_open = remote.backend.stats()["log_seq"]
    ts.CheckpointGroup(p, c).checkpoint()
    stats = remote.backend.stats()
    assert stats["log_seq"] - after_open == 1  # one commit-log entry holds both
    assert remote.consumer("in", name="etl").get_transaction(0) is None
    assert remote.consumer("out", name="x").get_transaction(0).items == [b"a", b"b"]


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1.0, 10.0 ** 9])
def test_a_raw_wait_for_commit_with_a_bad_timeout_is_refused(server: Any, timeout: float) -> None:
    """The server checks ``wait_for_commit`` as the engine does (one check): a raw wire request
    with a nan, infinite, negative or huge timeout is refused with InvalidArgument, and the
    server goes on answering."""
    ctx: zmq.Context[Any] = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.connect(server.endpoint)
    try:
        s.send_multipart(framing.request_frames(1, "wait_for_commit", 0, framing.encode_args([0, timeout])))
        assert s.poll(10_000), "no reply"
        _, flags, value = framing.unpack_reply(s.recv_multipart())
        assert flags & framing.ERROR and value[0] == "InvalidArgument", value
        assert "timeout" in value[1]
        s.send_multipart(framing.request_frames(2, "ping", 0, framing.encode_args([])))
        assert s.poll(10_000)
        assert framing.unpack_reply(s.recv_multipart())[2] == "pong"
    finally:
        s.close(0)
        ctx.term()
