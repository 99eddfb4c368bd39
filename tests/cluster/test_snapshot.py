"""Snapshot transfer between two engines in one process (cluster/snapshot.py): the streamed
hot copy carries the applied position, installs over another directory's state with
``Core.reopen``, and a transfer closed half-way releases its read transaction."""

from __future__ import annotations

import select
from pathlib import Path
from typing import Any

import pytest

from tstreams_embedded import errors
from tstreams_embedded.cluster import snapshot as snap
from tstreams_embedded.cluster.messages import SnapshotBegin, decode_request, pack
from tstreams_embedded.cluster.serve import state_digest
from tstreams_embedded.engine.storage.core import Core


def make_core(path: Path) -> Core:
    return Core(path, "sync", compaction_interval=None, fire_schedules=False)  # as a cluster node's engine


def set_position(core: Core, p: snap.Position) -> None:
    cdb = core.store.env.open_db(b"cluster")
    with core.store.env.begin(write=True) as txn:
        txn.put(snap.APPLIED_KEY, snap.encode_applied(p), db=cdb)


def load(core: Core, n: int, size: int = 4096) -> None:
    from tstreams_embedded.engine.protocol import ops as O

    core.submit([O.CreateStream("s", 2, 86400)])
    for i in range(n):
        core.submit([O.Instant("s", i % 2, O.pack_items([bytes([i % 256]) * size] * 8))])


def stream(source: snap.SnapshotSource, sink: snap.SnapshotSink) -> int:
    chunks = 0
    while True:
        data = source.read_chunk()
        if data is None:  # not ready yet (the pump runs in its own thread): wait for its signal
            select.select([source.fileno()], [], [], 1.0)
            continue
        if not data:
            return chunks
        assert len(data) <= snap.CHUNK_BYTES
        sink.write(data)
        chunks += 1


def test_snapshot_round_trip(tmp_path: Path) -> None:
    leader, follower = make_core(tmp_path / "leader"), make_core(tmp_path / "follower")
    try:
        load(leader, 300)  # about 10 MiB: several chunks
        position = snap.Position(42, 3, 1234)
        set_position(leader, position)
        cdb = leader.store.env.open_db(b"cluster")
        source = snap.SnapshotSource("t1", leader.store, cdb)
        assert source.position == position
        load_more = 10  # written while the copy runs: not in the snapshot
        from tstreams_embedded.engine.protocol import ops as O

        for _ in range(load_more):
            leader.submit([O.Instant("s", 0, O.pack_items([b"later"]))])
        sink = snap.SnapshotSink(str(follower.path), position)
        chunks = stream(source, sink)
        source.close()
        assert chunks > 1 and sink.received == source.sent
        sink.finish()
        before = state_digest(leader)["transactions"]
        snap.install(follower, sink)
        assert not Path(snap.partial_dir(follower.path)).exists()
        got = state_digest(follower)
        assert got["transactions"] == before - load_more  # the state as of the copy's read transaction
        fcdb = follower.store.env.open_db(b"cluster")
        with follower.store.read() as txn:
            assert snap.read_applied(txn, fcdb) == (42, position)
        follower.close()
        follower = make_core(tmp_path / "follower")  # it is this directory's own data file now
        assert state_digest(follower) == got
    finally:
        leader.close()
        follower.close()


def test_announced_position_is_checked(tmp_path: Path) -> None:
    leader, follower = make_core(tmp_path / "leader"), make_core(tmp_path / "follower")
    try:
        load(leader, 3)
        set_position(leader, snap.Position(7, 1, 1))
        source = snap.SnapshotSource("t2", leader.store, leader.store.env.open_db(b"cluster"))
        sink = snap.SnapshotSink(str(follower.path), snap.Position(8, 1, 1))
        stream(source, sink)
        source.close()
        with pytest.raises(errors.DataCorrupted, match="announced"):
            sink.finish()
        sink.abort()
        assert not Path(snap.partial_dir(follower.path)).exists()
    finally:
        leader.close()
        follower.close()


def test_a_transfer_closed_half_way_releases_its_read_transaction(tmp_path: Path) -> None:
    leader = make_core(tmp_path / "leader")
    load(leader, 300)
    source = snap.SnapshotSource("t3", leader.store, leader.store.env.open_db(b"cluster"))
    while source.read_chunk() is None:
        select.select([source.fileno()], [], [], 1.0)
    source.close()  # the copy thread gets EPIPE; the pump ends; the read transaction ends
    leader.close()  # would wait forever for the store's readers otherwise
    assert leader.closed


def test_reopen_needs_an_engine_without_maintenance(tmp_path: Path) -> None:
    core = Core(tmp_path / "c", "sync", compaction_interval=60.0)
    try:
        with pytest.raises(errors.InvalidArgument, match="maintenance"):
            core.reopen(lambda: None)
    finally:
        core.close()


def test_snapshot_server_answers_bad_chunk_requests_with_gone(tmp_path: Path) -> None:
    leader = make_core(tmp_path / "leader")
    replies: list[dict[str, object]] = []
    server = snap.SnapshotServer(lambda ident, rep: replies.append(rep.to_wire()))

    def request(**wire: object) -> Any:
        return decode_request(pack({"op": "snapshot", "node": "n2", **wire}))

    try:
        load(leader, 3)
        set_position(leader, snap.Position(5, 2, 9))
        cdb = leader.store.env.open_db(b"cluster")
        for bad in ({"sid": "nope", "offset": 0}, {"sid": None}):
            if bad["sid"] is None:
                server.begin(b"f", request(rid=1, sid=None), 2, leader.store, cdb, None, None)
                assert replies[-1]["status"] == "ok" and replies[-1]["index"] == 5
                sid = replies[-1]["sid"]
                for wrong in (7, "x", None, -1):
                    server.chunk(b"f", request(rid=2, sid=sid, offset=wrong))
                    assert replies[-1]["status"] == "gone", wrong
            else:
                server.chunk(b"f", request(rid=3, **bad))
                assert replies[-1]["status"] == "gone"
        assert server.needed_from() == [6, 6]  # the transfer in flight, and n2's install
        server.fetched("n2")
        assert server.needed_from() == [6]
        while len(server.transfers) < snap.MAX_TRANSFERS:
            server.begin(b"g", SnapshotBegin("n3", 0, rid=4), 2, leader.store, cdb, None, None)
        server.begin(b"h", SnapshotBegin("n4", 0, rid=5), 2, leader.store, cdb, None, None)
        assert replies[-1]["status"] == "busy"
    finally:
        server.close()
        leader.close()
