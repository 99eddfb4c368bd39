"""The asyncio API on a replicated cluster (``aio.connect("zk://…")``), with real node
processes and ZooKeeper: produce, a consumer woken by a commit, an exactly-once group
checkpoint, and a write that survives the leader's SIGKILL."""

from __future__ import annotations

import asyncio

from tstreams_embedded import aio

from .conftest import Cluster


def test_aio_on_a_cluster_produces_consumes_and_survives_a_leader_kill(cluster: Cluster) -> None:
    leader = cluster.leader()

    async def main() -> None:
        async with await aio.connect(cluster.url, timeout=60) as engine:
            assert engine.native is None  # zk://: the cluster client follows ZooKeeper (threads), in the pool
            await engine.create_stream("in")
            await engine.create_stream("out")
            producer = await engine.producer("in")
            consumer = await engine.consumer("in", "worker")
            waiting = asyncio.ensure_future(consumer.next(timeout=60))
            await asyncio.sleep(0)
            await producer.instant([b"a"])
            got = await waiting
            assert got is not None and got.items == [b"a"]

            output = await engine.producer("out")
            group = engine.checkpoint_group(consumer, output)
            txn = await output.new_transaction()
            await txn.send(got.items[0] + b"!")
            await group.checkpoint()

            leader.kill()
            await producer.instant([b"after failover"])  # retried on the new leader
            more = await consumer.next(timeout=60)
            assert more is not None and more.items == [b"after failover"]
            check = await engine.consumer("out", "check")
            out = await check.next(timeout=30)
            assert out is not None and out.items == [b"a!"]
            resumed = await engine.consumer("in", "worker")
            again = await resumed.next(timeout=30)  # the group stored the offset past "a"
            assert again is not None and again.items == [b"after failover"]

    asyncio.run(main())
