"""The asyncio API on a replicated cluster (``aio.connect("zk://…")``), with real node
processes and ZooKeeper: produce, a consumer woken by a commit, an exactly-once group
checkpoint, a write that survives the leader's SIGKILL, no thread per call, and many
concurrent writes across a leader's SIGKILL."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest

from tstreams_embedded import aio, errors
from tstreams_embedded.testing import eventually

from .conftest import Cluster

pytestmark = pytest.mark.timeout(120)


def test_aio_on_a_cluster_produces_consumes_and_survives_a_leader_kill(cluster: Cluster) -> None:
    leader = cluster.leader()

    async def main() -> None:
        async with await aio.connect(cluster.url, timeout=60) as engine:
            assert engine.native is not None  # zk://: the cluster client's calls run on the loop
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


def test_aio_cluster_calls_start_no_thread_per_call(cluster: Cluster) -> None:
    """Over zk://, 500 concurrent calls of several kinds (instant writes, transactions,
    stream reads, schedules, work-queue receives and acks, a checkpoint, commit waits) run
    with no thread started: ``threading.active_count()`` stays flat throughout (kazoo's
    threads follow ZooKeeper, started with the handle)."""
    async def main() -> None:
        async with await aio.connect(cluster.url, timeout=30) as engine:
            assert engine.native is not None
            await engine.create_stream("s", partitions=2)
            await engine.create_stream("jobs")
            producer = await engine.producer("s")
            jobs = await engine.producer("jobs")
            queue = await engine.work_queue("jobs", "workers")
            consumer = await engine.consumer("s", "c", partitions=[0])
            assert await consumer.next(timeout=0) is None  # (starts the commit watcher)
            before = threading.active_count()
            peak = before
            done = asyncio.Event()

            async def sample() -> None:
                nonlocal peak
                while not done.is_set():
                    peak = max(peak, threading.active_count())
                    await asyncio.sleep(0)

            async def transaction(i: int) -> None:
                async with producer.transaction() as txn:
                    await txn.send(b"t%d" % i)
                    await txn.send(b"u%d" % i)

            jobs_acked = 0

            async def receive_and_ack() -> None:
                nonlocal jobs_acked
                for delivery in await queue.receive(max_items=10, timeout=5):
                    await delivery.ack()
                    jobs_acked += 1

            sampler = asyncio.create_task(sample())
            waiting = asyncio.ensure_future(engine.signal.wait_past(await engine.signal.current(), 30))
            kinds = [lambda i: producer.instant([b"%d" % i]), transaction,
                     lambda i: engine.get_stream("s"), lambda i: engine.schedules(),
                     lambda i: jobs.instant([b"job%d" % i])]
            results = await asyncio.wait_for(asyncio.gather(*(kinds[i % 5](i) for i in range(500))), 90)
            assert len(results) == 500
            assert await asyncio.wait_for(waiting, 30) > 0
            await asyncio.wait_for(asyncio.gather(*(receive_and_ack() for _ in range(10)),
                                                  consumer.checkpoint()), 60)
            done.set()
            await sampler
            assert (peak, threading.active_count()) == (before, before)
            assert jobs_acked > 0

    asyncio.run(main())


def test_aio_writes_over_zk_across_a_leader_sigkill(cluster: Cluster) -> None:
    """32 coroutines write through one zk:// handle while the leader is SIGKILLed: every
    acknowledged item is on the cluster exactly once, every other write raised an error
    saying it failed, and nothing is there twice (retries on the new leader are deduplicated)."""
    leader = cluster.leader()

    async def main() -> None:
        async with await aio.connect(cluster.url, timeout=30) as engine:
            await engine.create_stream("s")
            producer = await engine.producer("s")
            acked: list[str] = []
            failed: dict[str, errors.TStreamsError] = {}
            killed = asyncio.Event()
            enough_before_kill = asyncio.Event()

            async def writer(w: int) -> None:
                i = 0
                after_kill = 0
                while after_kill < 8:
                    item = f"w{w}-{i}"
                    i += 1
                    try:
                        await producer.instant([item.encode()])
                    except (errors.ClusterUnavailable, errors.RemoteError) as exc:
                        failed[item] = exc
                    else:
                        acked.append(item)
                    if len(acked) >= 100:
                        enough_before_kill.set()
                    if killed.is_set():
                        after_kill += 1

            writers = asyncio.gather(*(writer(w) for w in range(32)))
            await asyncio.wait_for(enough_before_kill.wait(), 60)
            await asyncio.to_thread(leader.kill)  # (writes are in flight meanwhile)
            killed.set()
            await asyncio.wait_for(writers, 90)
            assert cluster.leader() is not leader

            check = await engine.consumer("s", "check", start="oldest")
            seen: list[str] = []
            while True:
                txn = await check.next(timeout=2)
                if txn is None:
                    break
                seen.extend(item.decode() for item in txn.items)
            counts = Counter(seen)
            assert [item for item, n in counts.items() if n > 1] == [], "an item applied twice"
            assert [item for item in acked if counts[item] != 1] == [], "an acknowledged write was lost"
            assert set(seen) <= set(acked) | set(failed)
            for item, exc in failed.items():
                assert any(why in str(exc) for why in ("did not answer", "no leader", "may or may not")), (item, exc)
            assert len(acked) >= 32 * 8

    asyncio.run(main())


def test_aio_follower_reads_and_the_sync_handle_from_another_thread(cluster: Cluster) -> None:
    """``read_from="follower"`` over an aio zk:// handle: the follower is found in ZooKeeper
    and read on the loop; the sync handle underneath also works from another thread (its
    connections are made on the loop, its waits poll on its own thread)."""
    leader = cluster.leader()

    async def main() -> None:
        async with await aio.connect(cluster.url, timeout=30) as writer:
            await writer.create_stream("s")
            producer = await writer.producer("s", partition=0)
            await producer.instant([b"one"])
        async with await aio.connect(cluster.url, timeout=30, read_from="follower") as engine:
            assert engine.native is not None
            backend = engine.sync.backend

            def read_on_a_thread() -> list[bytes]:
                return [item for t in backend.transactions_range("s", 0, 0, 2**63 - 1) for item in t.items]

            got = await asyncio.to_thread(eventually, read_on_a_thread, 20, 0.1,
                                          message="a follower serves the committed item")
            assert got == [b"one"]
            assert backend.reading_from not in (None, leader.node_id)
            consumer = await engine.consumer("s", "c")
            txn = await consumer.next(timeout=20)
            assert txn is not None and txn.items == [b"one"]
            assert backend.reading_from not in (None, leader.node_id)

    asyncio.run(main())
