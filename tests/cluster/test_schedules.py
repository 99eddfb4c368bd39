"""Scheduled delivery on a cluster (cluster/schedules.py): the leader fires due schedules
through the replicated log, every node delivers the same transactions, and a leader killed
before they are due leaves them to its successor; real node processes, a real ZooKeeper."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tstreams_embedded.testing import eventually

from .conftest import Cluster


def items_of(engine: Any, stream: str) -> list[bytes]:
    return sorted(bytes(i) for p in range(engine.get_stream(stream).partitions)
                  for t in engine.backend.transactions_range(stream, p, 0, 2**63 - 1) for i in t.items)


def test_the_leader_fires_each_schedule_once_and_its_successor_fires_the_rest(
        cluster: Cluster, connect: Callable[..., Any]) -> None:
    engine = connect()
    engine.create_stream("s", partitions=2)
    engine.schedule("s", [b"first"], delay=0.2)
    eventually(lambda: items_of(engine, "s") == [b"first"], 30, 0.05, message="the leader fired the schedule")
    later = [b"later-%02d" % i for i in range(20)]
    ids = [engine.schedule("s", [item], delay=2 + i * 0.05) for i, item in enumerate(later)]
    assert [s.id for s in engine.schedules()] == ids  # pending, replicated
    leader = cluster.leader()
    leader.kill()  # before any is due: the next leader fires them
    eventually(lambda: items_of(engine, "s") == sorted([b"first", *later]), 90, 0.1, ignore=(Exception,),
               message="the new leader fired the schedules")
    assert engine.schedules() == []
    leader.start()
    state = eventually(cluster.converged, 90, 0.2, message="every node applied the same firings")
    assert state["transactions"] == 21  # each schedule delivered once, on every node
