"""Follower reads (docs/CLUSTER.md, guarantee 6): a follower serves reads only to clients
that asked for them, never shows a write that is not committed (even one it already holds
in its log), shows committed writes eventually, and never serves writes."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.net.client import RemoteBackend
from tstreams_embedded.testing import ZooKeeperServer, eventually

from .conftest import Cluster, ClusterNode

pytestmark = pytest.mark.timeout(180)


def items_read(engine: Any, stream: str = "s") -> list[str]:
    """Every item of partition 0, read through ``engine``'s backend (follower or leader)."""
    txns = engine.backend.transactions_range(stream, 0, 0, 2**63 - 1)
    return [item.decode() for t in txns for item in t.items]


def test_follower_serves_reads_only_on_request_and_never_writes(cluster: Cluster,
                                                                 connect: Callable[..., Any]) -> None:
    leader = cluster.leader()
    engine = connect()
    engine.create_stream("s")
    engine.producer("s", partition=0).instant([b"one"])
    follower = cluster.followers(leader)[0]
    remote = RemoteBackend(follower.endpoint, timeout=10, failover_retries=False)
    try:
        with pytest.raises(errors.NotLeader, match="not the leader"):
            remote.get_stream("s")  # a client that did not ask gets NotLeader, as before
        info = remote.connection.call("read_from_follower")
        assert info["node"] == follower.node_id and info["role"] == "follower"
        got = eventually(lambda: remote.transactions_range("s", 0, 0, 2**63 - 1), 20, 0.1,
                         ignore=(errors.NotLeader,), message="the follower serves the committed item")
        assert [t.items for t in got] == [[b"one"]]
        assert remote.get_stream("s").partitions == 1
        with pytest.raises(errors.NotLeader):  # writes: never on a follower
            remote.submit([O.Instant("s", 0, O.pack_items([b"two"]))])
        with pytest.raises(errors.StreamNotFound):  # errors are the engine's own
            remote.get_stream("nope")
    finally:
        remote.close()
    assert items_read(engine) == ["one"]
    engine.close()


def test_follower_read_never_sees_uncommitted_and_sees_committed(zk: ZooKeeperServer, tmp_path: Path) -> None:
    c = Cluster(zk, tmp_path, acks="all").start()  # every node must hold an entry to commit it
    opened: list[Any] = []
    try:
        leader = c.leader()
        live, down = c.followers(leader)
        writer = c.connect(timeout=60)
        opened.append(writer)
        writer.create_stream("s")
        writer.producer("s", partition=0).instant([b"committed"])
        down.kill()  # from now on nothing commits: the leader and `live` hold entries uncommitted
        reader = c.connect(read_from="follower")
        opened.append(reader)
        eventually(lambda: items_read(reader) == ["committed"] and reader.backend.reading_from == live.node_id, 30,
                   0.1, message="the reader reads the first item from the live follower")
        pool = concurrent.futures.ThreadPoolExecutor(1)
        try:
            pending = pool.submit(writer.producer("s", partition=0).instant, [b"pending"])

            def holds_uncommitted(node: ClusterNode) -> bool:
                st = node.status()
                return bool(st["last_index"] > st["commit"])

            eventually(lambda: holds_uncommitted(live), 20, 0.05, ignore=(OSError,),
                       message="the live follower holds the pending entry in its log, uncommitted")
            for _ in range(20):  # read it many times while it is uncommitted there
                assert items_read(reader) == ["committed"]
                assert reader.backend.reading_from == live.node_id
            assert holds_uncommitted(live) and not pending.done()
            down.start()  # all nodes again: the entry commits
            assert pending.result(timeout=60) > 0
        finally:
            pool.shutdown()
        eventually(lambda: items_read(reader) == ["committed", "pending"], 30, 0.1,
                   message="the follower read shows the committed write")
        assert reader.backend.reading_from != c.leader().node_id
    finally:
        for engine in opened:
            engine.close()
        c.stop()


def test_read_from_is_checked(cluster: Cluster, connect: Callable[..., Any]) -> None:
    with pytest.raises(errors.InvalidArgument, match="read_from"):
        connect(read_from="anywhere")
