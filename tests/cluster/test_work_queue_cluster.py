"""Work queues on a replicated cluster (``ts.connect("zk://…")``), with real node processes
and ZooKeeper: deliveries, a redelivery and a dead letter made on the leader survive its
SIGKILL, and the new leader's state agrees (the receives were replicated as typed records
and replayed on the followers); an ack riding on the next receive is written with it."""

from __future__ import annotations

from typing import Any

import msgpack

from .conftest import Cluster


def test_a_work_queue_on_a_cluster_survives_a_leader_kill(cluster: Cluster, connect: Any) -> None:
    engine = connect(timeout=60)
    engine.create_stream("jobs")
    engine.create_stream("dlq")
    engine.producer("jobs").instant([b"a", b"b", b"c"])
    q = engine.work_queue("jobs", "w", max_deliveries=1, dead_letter="dlq", ack_timeout=60)
    a, b, c = q.receive(10, timeout=5)
    a.ack()
    b.nak(0, "poison")  # its only delivery failed: dead-lettered in the same write
    before = q.status(full=True)
    assert (before.in_flight, before.counters["acked"], before.counters["dead_lettered"]) == (1, 1, 1)

    cluster.leader().kill()
    after = q.status(full=True)  # read from the new leader
    assert after.in_flight == 1 and after.counters == before.counters
    c.ack()  # the delivery made by the old leader is settled on the new one
    assert q.status().counters["acked"] == 2
    dead = engine.consumer("dlq", "x").get_transaction()
    assert dead is not None and msgpack.unpackb(dead.items[0])["item"] == b"b"
    engine.producer("jobs").instant([b"d"])
    [d] = q.receive(10, timeout=10)
    assert d.item == b"d" and d.delivery_count == 1
    d.ack(commit=False)  # rides on the next receive: one replicated write with it
    engine.producer("jobs").instant([b"e"])
    [e] = q.receive(10, timeout=10, commit_staged=True)
    assert e.item == b"e" and q.status().counters["acked"] == 3
