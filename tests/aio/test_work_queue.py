"""Async work queues (``await engine.work_queue``), embedded and remote alike: ``async for``
woken by a commit, redelivery, exactly-once acks in an AsyncCheckpointGroup, and acks that
ride on the next receive."""

from __future__ import annotations

import asyncio

from tstreams_embedded import aio, errors

from .conftest import OpenAsync


def test_async_for_gets_items_as_they_are_committed_and_acks_settle_them(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("jobs")
            q = await engine.work_queue("jobs", "w")
            got: list[bytes] = []

            async def work() -> None:
                async for d in q:
                    got.append(d.item)
                    await d.ack()
                    if len(got) == 3:
                        return

            task = asyncio.ensure_future(work())
            await asyncio.sleep(0)
            producer = await engine.producer("jobs")
            await producer.instant([b"a", b"b"])
            await producer.instant([b"c"])
            await asyncio.wait_for(task, 30)
            assert sorted(got) == [b"a", b"b", b"c"]
            status = await q.status(full=True)
            assert status.counters["acked"] == 3 and status.in_flight == 0

    asyncio.run(main())


def test_an_unacked_delivery_comes_back_and_a_group_acks_exactly_once(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("in")
            await engine.create_stream("out")
            await (await engine.producer("in")).instant([b"x"])
            slow = await engine.work_queue("in", "g", ack_timeout=0.3, consumer="slow")
            fast = await engine.work_queue("in", "g", ack_timeout=0.3, consumer="fast")
            [first] = await slow.receive(timeout=0)
            [again] = await fast.receive(timeout=10)  # the lock ran out
            assert again.delivery_count == 2 and again.item == b"x"
            try:
                await first.ack()
                raise AssertionError("a stale ack was accepted")
            except errors.DeliveryExpired:
                pass
            out = await engine.producer("out")
            txn = await out.new_transaction()
            await txn.send(again.item.upper())
            await again.ack(commit=False)
            await aio.AsyncCheckpointGroup(out, fast).checkpoint()
            reader = await engine.consumer("out", "check")
            done = await reader.next(timeout=10)
            assert done is not None and done.items == [b"X"]
            assert (await fast.status()).counters["acked"] == 1

    asyncio.run(main())


def test_staged_acks_ride_on_the_next_receive_and_a_stale_one_writes_nothing(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("jobs")
            producer = await engine.producer("jobs")
            await producer.instant([b"a", b"b"])
            q = await engine.work_queue("jobs", "w", consumer="w", ack_timeout=0.3)
            other = await engine.work_queue("jobs", "w", consumer="other", ack_timeout=0.3)
            [a] = await q.receive(max_items=1, timeout=0)
            await a.ack(commit=False)
            [b] = await q.receive(max_items=1, timeout=0, commit_staged=True)  # a's ack went with it
            assert (await q.status()).counters["acked"] == 1 and b.item == b"b"
            await b.ack(commit=False)
            [again] = await other.receive(timeout=10)  # b's lock ran out: other has it now
            await producer.instant([b"c"])
            try:
                await q.receive(timeout=0, commit_staged=True)
                raise AssertionError("a stale staged ack was written")
            except errors.DeliveryExpired:
                pass
            status = await q.status(full=True)
            assert status.counters["acked"] == 1 and status.pending == {0: 1}  # c was not handed out
            await again.ack()
            [c] = await q.receive(timeout=10, commit_staged=True)
            assert c.item == b"c"

    asyncio.run(main())
