"""Replicated compaction (cluster/compaction.py): stream TTLs free the same transactions on
every node, through the log, with real node processes and a real ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tstreams_embedded import errors
from tstreams_embedded.cluster.retention import check_compaction_interval
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.testing import ZooKeeperServer, eventually

from .conftest import Cluster


@pytest.fixture
def make_cluster(zk: ZooKeeperServer, tmp_path: Path) -> Iterator[Any]:
    made: list[Cluster] = []

    def make(**config: Any) -> Cluster:
        c = Cluster(zk, tmp_path / f"c{len(made)}", **config)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.stop()


def _fill(engine: Any, stream: str, ttl: int, txns: int) -> None:
    engine.create_stream(stream, partitions=2, ttl=ttl)
    for i in range(txns):
        engine.producer(stream).instant([b"%s-%d" % (stream.encode(), i)], partition=i % 2)


def _transactions_on_every_node(cluster: Cluster) -> int | None:
    """The count of transactions, once every node applied the same state (else None)."""
    state = cluster.converged()
    return None if state is None else int(state["transactions"])


def test_compact_call_removes_expired_transactions_on_every_node(make_cluster: Any) -> None:
    cluster = make_cluster(compaction_interval=0)  # only the explicit call compacts
    engine = cluster.connect()
    cluster.closers.append(engine.close)
    _fill(engine, "short", ttl=1, txns=10)
    _fill(engine, "long", ttl=86_400, txns=4)
    assert eventually(lambda: _transactions_on_every_node(cluster) == 14, 30, 0.1)
    # the state clock moves on with the leader's idle entries: wait until "short" expired
    eventually(lambda: engine.consumer("short", "probe", "oldest").get_transaction() is None, 30, 0.2,
               message="the short stream's transactions expired by the state clock")
    removed = engine.compact()
    assert removed["transactions_removed"] == 10
    assert eventually(lambda: _transactions_on_every_node(cluster) == 4, 30, 0.1)
    assert engine.compact()["transactions_removed"] == 0  # nothing left to remove
    # the long stream is intact, on the leader and (digests equal) on every follower
    got = sorted(bytes(i) for p in range(2) for t in engine.backend.transactions_range("long", p, 0, 2**63 - 1)
                 for i in t.items)
    assert got == sorted(b"long-%d" % i for i in range(4))


def test_leader_compacts_by_itself_and_a_killed_follower_catches_up(make_cluster: Any) -> None:
    cluster = make_cluster(compaction_interval=0.5)
    engine = cluster.connect()
    cluster.closers.append(engine.close)
    leader = cluster.leader()
    follower = cluster.followers(leader)[0]
    follower.kill()  # it misses the compaction and applies it from the log when it is back
    _fill(engine, "short", ttl=1, txns=12)
    _fill(engine, "long", ttl=86_400, txns=3)
    eventually(lambda: leader.state()["transactions"] == 3, 60, 0.2,
               message=lambda: f"leader compacted the expired stream: {leader.state()}")
    follower.start()
    assert eventually(lambda: _transactions_on_every_node(cluster) == 3, 60, 0.2)
    assert leader.status()["applied"] == follower.status()["applied"]


def test_maintenance_batches_hold_compact_and_fire_schedule_records_only() -> None:
    assert O.check_maintenance_batch([O.Compact("s", 0, 5, 1)]) == [O.Compact("s", 0, 5, 1)]
    assert O.check_maintenance_batch([O.FireSchedule(3)]) == [O.FireSchedule(3)]
    with pytest.raises(errors.InvalidArgument, match="Compact and FireSchedule records only"):
        O.check_maintenance_batch([O.CreateStream("s", 1, 10)])
    with pytest.raises(errors.InvalidArgument):
        O.check_maintenance_batch("not a list")
    with pytest.raises(errors.InvalidArgument, match="written by the engine only"):  # clients cannot send one
        O.check_client_batch([O.Compact("s", 0, 5, 1)])


@pytest.mark.parametrize("bad", [-1, True, "60", None, 1e12])
def test_bad_compaction_interval_is_refused(bad: object) -> None:
    with pytest.raises(errors.InvalidArgument, match="compaction_interval"):
        check_compaction_interval(bad)
