"""The asyncio API, embedded and remote alike: produce, consume (woken by commits),
checkpoint, checkpoint groups, subscriptions, cancellation."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tstreams_embedded import aio, errors

from .conftest import OpenAsync


def test_instant_transaction_and_consume(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s", partitions=2)
            producer = await engine.producer("s", batch_size=3)
            await producer.instant([b"a", b"b"], partition=0)
            async with producer.transaction(partition=1) as txn:
                for i in range(10):  # crosses batch_size: flushed 3 at a time, visible at exit
                    await txn.send(b"%d" % i)
            consumer = await engine.consumer("s", "c")
            got = [await consumer.next(timeout=5), await consumer.next(timeout=5)]
            assert sorted(len(t) for t in got if t) == [2, 10]
            assert await consumer.next(timeout=0.05) is None
            await consumer.checkpoint()
            again = await engine.consumer("s", "c")
            assert await again.get_transaction() is None  # resumes after the stored positions

    asyncio.run(main())


def test_async_for_is_woken_by_a_commit(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s")
            producer = await engine.producer("s")
            consumer = await engine.consumer("s", "c")
            waiting = asyncio.Event()
            received: list[list[bytes]] = []

            async def read() -> None:
                waiting.set()
                async for txn in consumer:
                    received.append(txn.items)
                    if len(received) == 3:
                        return

            reader = asyncio.create_task(read())
            await waiting.wait()
            for i in range(3):
                await producer.instant([b"x%d" % i])
            # no poll interval exists: only a commit wake-up can end the reader
            await asyncio.wait_for(reader, 10)
            assert received == [[b"x0"], [b"x1"], [b"x2"]]

    asyncio.run(main())


def test_iteration_ends_when_the_handle_closes(open_async: OpenAsync) -> None:
    async def main() -> None:
        engine = await open_async()
        await engine.create_stream("s")
        consumer = await engine.consumer("s", "c")

        async def drain() -> int:
            return len([t async for t in consumer])

        task = asyncio.create_task(drain())
        await asyncio.sleep(0)  # let it start waiting (any order is correct; this one tests the wait)
        await engine.close()
        assert await asyncio.wait_for(task, 10) == 0

    asyncio.run(main())


def test_group_checkpoint_is_atomic_read_process_write(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("in")
            await engine.create_stream("out")
            source = await engine.producer("in")
            for i in range(3):
                await source.instant([b"%d" % i])
            consumer = await engine.consumer("in", "worker")
            producer = await engine.producer("out")
            group = engine.checkpoint_group(consumer, producer)
            txn = await producer.new_transaction()
            for _ in range(3):
                t = await consumer.next(timeout=5)
                assert t is not None
                await txn.send(t.items[0] + b"!")
            await group.checkpoint()  # the buffered items, the output and the offsets: one write
            assert txn.state == "checkpointed"
            out = await engine.consumer("out", "check")
            got = await out.next(timeout=5)
            assert got is not None and got.items == [b"0!", b"1!", b"2!"]
            resumed = await engine.consumer("in", "worker")
            assert await resumed.get_transaction() is None

    asyncio.run(main())


def test_subscription_delivers_and_stores_positions(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s")
            producer = await engine.producer("s")
            await producer.instant([b"a"])
            await producer.instant([b"b"])
            seen: list[bytes] = []
            async with await engine.subscribe("s", "sub", start="oldest") as sub:
                async for txn in sub:
                    seen.extend(txn.items)
                    if len(seen) == 2:
                        break
            assert seen == [b"a", b"b"]
            again = await engine.consumer("s", "sub")
            assert await again.get_transaction() is None

    asyncio.run(main())


def test_bad_input_raises_specific_errors(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            with pytest.raises(errors.StreamNotFound):
                await engine.producer("missing")
            await engine.create_stream("s")
            producer = await engine.producer("s")
            with pytest.raises(errors.InvalidArgument):
                await producer.instant([])
            async with producer.transaction() as txn:
                with pytest.raises(errors.InvalidArgument):
                    await txn.send("not bytes without a serializer")
                await txn.send(b"ok")
            consumer = await engine.consumer("s", "c")
            got = await consumer.next(timeout=5)
            assert got is not None and got.items == [b"ok"]

    asyncio.run(main())


def test_cancelled_instant_write_is_committed_when_cancelled_error_is_raised(open_async: OpenAsync) -> None:
    """A write handed to the engine completes; CancelledError then means it was committed."""
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s")
            producer = await engine.producer("s")
            entered, release = threading.Event(), threading.Event()
            sync_instant = producer.sync.instant

            def slow_instant(items: list[bytes], partition: int | None = None) -> int:
                entered.set()  # the write is in its thread; hold it there until cancelled
                release.wait(10)
                return sync_instant(items, partition)

            producer.sync.instant = slow_instant  # type: ignore[method-assign]
            task = asyncio.create_task(producer.instant([b"kept"]))
            await asyncio.to_thread(entered.wait, 10)
            task.cancel()
            await asyncio.sleep(0)
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            consumer = await engine.consumer("s", "c")
            got = await consumer.next(timeout=0)  # already there: the cancel waited for it
            assert got is not None and got.items == [b"kept"]

    asyncio.run(main())


def test_cancelled_transaction_block_is_cancelled_not_half_written(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s")
            producer = await engine.producer("s", batch_size=2)
            inside = asyncio.Event()

            async def write() -> None:
                async with producer.transaction() as txn:
                    for i in range(5):  # two chunks are flushed to the engine before the cancel
                        await txn.send(b"%d" % i)
                    inside.set()
                    await asyncio.Event().wait()  # cancelled here

            task = asyncio.create_task(write())
            await inside.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert producer.sync.open_transactions() == []  # cancelled in the engine, not left open
            await producer.instant([b"after"])
            consumer = await engine.consumer("s", "c")
            got = await consumer.next(timeout=5)
            assert got is not None and got.items == [b"after"]  # nothing of the cancelled block

    asyncio.run(main())


def test_open_rejects_bad_options() -> None:
    async def main() -> None:
        with pytest.raises(errors.InvalidArgument):
            await aio.open("x", max_threads=0)
        with pytest.raises(errors.InvalidArgument):
            await aio.connect(7)  # type: ignore[arg-type]

    asyncio.run(main())
