"""The asyncio API, embedded and remote alike: produce, consume (woken by commits),
checkpoint, checkpoint groups, subscriptions, cancellation."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tstreams_embedded import Transaction, aio, errors
from tstreams_embedded.testing import ServeProcess

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
    """A write handed over (to the pool, or sent on the connection) completes; CancelledError
    then means it was committed."""
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s")
            producer = await engine.producer("s")
            task = asyncio.create_task(producer.instant([b"kept"]))
            await asyncio.sleep(0)  # the task runs until its write is handed over, and waits there
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            consumer = await engine.consumer("s", "c")
            got = await consumer.next(timeout=0)  # already there: the cancel waited for it
            assert got is not None and got.items == [b"kept"]

    asyncio.run(main())


def test_cancelled_failing_write_raises_its_error_not_cancelled_error(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s")
            producer = await engine.producer("s")
            await engine.delete_stream("s")
            task = asyncio.create_task(producer.instant([b"lost"]))
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(errors.StreamNotFound):  # not applied, and the caller is told so
                await task

    asyncio.run(main())


def test_a_cancelled_read_loses_no_transaction(open_async: OpenAsync) -> None:
    """A read cancelled while under way hands each transaction out once or not at all: the
    next reads return the rest, none skipped. (Regression: embedded, the abandoned read went
    on in its thread and moved the consumer past a transaction that nobody received.)"""
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s")
            producer = await engine.producer("s")
            await producer.instant([b"a"])
            await producer.instant([b"b"])
            consumer = await engine.consumer("s", "c")
            loop_thread = threading.current_thread()
            started, proceed = threading.Event(), threading.Event()
            read = consumer.sync.get_transaction

            def gated_read(partition: int | None = None) -> Transaction | None:
                started.set()
                if threading.current_thread() is not loop_thread:  # a pool thread: held until the cancel
                    proceed.wait(10)
                return read(partition)

            consumer.sync.get_transaction = gated_read  # type: ignore[method-assign]
            task = asyncio.create_task(consumer.get_transaction())
            await asyncio.to_thread(started.wait, 10)  # the read is under way
            task.cancel()
            proceed.set()
            try:
                first = await task
                received = [first.items] if first is not None else []
            except asyncio.CancelledError:
                received = []
            consumer.sync.get_transaction = read  # type: ignore[method-assign]
            while (txn := await consumer.next(timeout=0)) is not None:
                received.append(txn.items)
            assert received == [[b"a"], [b"b"]]

    asyncio.run(main())


def test_a_group_checkpoint_during_a_flush_of_its_transaction_writes_each_item_once(
        open_async: OpenAsync) -> None:
    """A flush (whose first write opens the transaction) and a group checkpoint of the same
    transaction, from two tasks at once, take turns. (Regression: over tcp:// both ran on
    the loop's thread, which the sync transaction's re-entrant lock let in together: the
    group wrote the items as a second transaction while the first stayed open, and readers
    stopped at it.)"""
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s")
            producer = await engine.producer("s")
            group = engine.checkpoint_group(producer)
            txn = await producer.new_transaction()
            await txn.send(b"a")
            await asyncio.gather(txn.flush(), group.checkpoint())
            assert txn.state == "checkpointed"
            consumer = await engine.consumer("s", "c")
            got = await consumer.next(timeout=5)
            assert got is not None and got.items == [b"a"]
            assert await consumer.next(timeout=0) is None

    asyncio.run(main())


def test_commit_of_another_handle_wakes_a_waiting_consumer(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as reader, await open_async() as writer:
            await writer.create_stream("s")
            consumer = await reader.consumer("s", "c")
            waiting = asyncio.ensure_future(consumer.next(timeout=20))
            await asyncio.sleep(0)
            producer = await writer.producer("s")
            await producer.instant([b"from the other handle"])
            got = await waiting
            assert got is not None and got.items == [b"from the other handle"]

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


def test_remote_calls_start_no_thread_per_call(tmp_path: Path) -> None:
    """Over tcp://, 1,000 concurrent calls of several kinds (instant writes, transactions,
    stream reads, schedules, work-queue receives and acks, consumer checkpoints and commit
    waits) run with no thread started: ``threading.active_count()`` stays flat throughout."""
    data = tmp_path / "data"
    data.mkdir()
    with ServeProcess(data, tmp_path, durability="sync") as server:
        async def main() -> None:
            async with await aio.connect(server.endpoint, timeout=20.0) as engine:
                assert engine.native is not None
                await engine.create_stream("s", partitions=4)
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

                async def receive_and_ack() -> None:
                    for delivery in await queue.receive(max_items=10, timeout=5):
                        await delivery.ack()

                sampler = asyncio.create_task(sample())
                waiting = asyncio.ensure_future(engine.signal.wait_past(await engine.signal.current(), 20))
                kinds = [lambda i: producer.instant([b"%d" % i]), transaction,
                         lambda i: engine.get_stream("s"), lambda i: engine.schedules(),
                         lambda i: jobs.instant([b"job%d" % i])]
                results = await asyncio.wait_for(asyncio.gather(*(kinds[i % 5](i) for i in range(1000))), 60)
                assert len(results) == 1000
                assert await asyncio.wait_for(waiting, 20) > 0
                await asyncio.wait_for(asyncio.gather(*(receive_and_ack() for _ in range(20)),
                                                      consumer.checkpoint()), 60)
                done.set()
                await sampler
                assert (peak, threading.active_count()) == (before, before)
                assert len([t async for t in _drain(consumer)]) > 0

        asyncio.run(main())


def test_sync_api_on_the_loop_of_a_remote_handle_raises_instead_of_blocking(tmp_path: Path) -> None:
    """The sync handle underneath a tcp:// async handle is usable from other threads; on the
    event loop itself a blocking call raises InvalidArgument (it would stall the loop)."""
    data = tmp_path / "data"
    data.mkdir()
    with ServeProcess(data, tmp_path, durability="sync") as server:
        async def main() -> None:
            async with await aio.connect(server.endpoint, timeout=20.0) as engine:
                await engine.create_stream("s")
                with pytest.raises(errors.InvalidArgument, match="event loop"):
                    engine.sync.get_stream("s")
                info = await asyncio.to_thread(engine.sync.get_stream, "s")  # handed to the loop
                assert info.name == "s"
                producer = await asyncio.to_thread(engine.sync.producer, "s")
                txn_id = await asyncio.to_thread(producer.instant, [b"from a thread"])
                consumer = await engine.consumer("s", "c")
                got = await consumer.next(timeout=5)
                assert got is not None and (got.id, got.items) == (txn_id, [b"from a thread"])

        asyncio.run(main())


async def _drain(consumer: aio.AsyncConsumer) -> AsyncIterator[Transaction]:
    while (txn := await consumer.next(timeout=0)) is not None:
        yield txn


def test_waiting_iteration_ends_when_the_sync_handle_underneath_closes(open_async: OpenAsync) -> None:
    """The watcher sees the backend close (a failed long poll or subscription) and ends the
    waits with EngineClosed instead of leaving them hanging."""
    async def main() -> None:
        engine = await open_async()
        await engine.create_stream("s")
        consumer = await engine.consumer("s", "c")
        waiting = asyncio.ensure_future(consumer.next(timeout=60))
        await asyncio.sleep(0)
        await engine.runner.write(engine.sync.close)
        with pytest.raises(errors.EngineClosed):
            await asyncio.wait_for(waiting, 20)
        await engine.close()

    asyncio.run(main())


def test_group_checkpoint_after_a_group_cancel_ignores_the_cancelled_transactions_items(
        open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("out")
            producer = await engine.producer("out")
            group = engine.checkpoint_group(producer)
            cancelled = await producer.new_transaction()
            await cancelled.send(b"dropped")  # buffered in the async transaction
            await group.cancel()
            kept = await producer.new_transaction()
            await kept.send(b"kept")
            await group.checkpoint()
            assert (cancelled.state, kept.state) == ("cancelled", "checkpointed")
            consumer = await engine.consumer("out", "c")
            got = await consumer.next(timeout=5)
            assert got is not None and got.items == [b"kept"]
            assert await consumer.next(timeout=0) is None

    asyncio.run(main())


def test_remote_write_to_a_killed_server_raises_remote_error_and_resumes_after_restart(tmp_path: Path) -> None:
    """A native remote write cannot be sent while the server is down: RemoteError after the
    timeout (never a hang, never a silent loss); after the restart the same handle works."""
    data = tmp_path / "data"
    data.mkdir()
    with ServeProcess(data, tmp_path, durability="sync") as server:
        async def main() -> None:
            async with await aio.connect(server.endpoint, timeout=2.0) as engine:
                await engine.create_stream("s")
                producer = await engine.producer("s")
                await producer.instant([b"before"])
                server.kill()
                with pytest.raises(errors.RemoteError):
                    await producer.instant([b"while down"])
                server.restart()
                await producer.instant([b"after"])  # reconnected by ZeroMQ
                consumer = await engine.consumer("s", "c")
                got = [await consumer.next(timeout=10) for _ in range(2)]
                assert [t.items for t in got if t] == [[b"before"], [b"after"]]

        asyncio.run(main())


def test_unopened_transaction_and_finished_transaction_give_specific_errors(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s")
            producer = await engine.producer("s")
            txn = producer.transaction()
            with pytest.raises(errors.InvalidArgument, match="not open"):
                await txn.send(b"x")
            async with txn:
                await txn.send(b"x")
            with pytest.raises(errors.TransactionFinished):
                await txn.send(b"late")

    asyncio.run(main())


def test_schedules_through_the_async_handle(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s")
            soon = await engine.schedule("s", [b"soon"], delay=0.1)
            later = await engine.schedule("s", [b"later"], delay=3600)
            assert [i.id for i in await engine.schedules()] == [soon, later]
            assert await engine.cancel_schedule(later) is True
            consumer = await engine.consumer("s", "c")
            txn = await consumer.next(timeout=10)  # woken by the firing commit
            assert txn is not None and txn.items == [b"soon"]
            assert await engine.schedules() == []

    asyncio.run(main())


def test_a_named_async_producer_names_its_open_transactions(open_async: OpenAsync) -> None:
    async def main() -> None:
        async with await open_async() as engine:
            await engine.create_stream("s")
            producer = await engine.producer("s", name="async-loader")
            async with producer.transaction(partition=0) as txn:
                await txn.send(b"x")
                await txn.flush()
                [p0] = await asyncio.to_thread(engine.sync.backend.describe_partitions, "s")
                assert [t.producer for t in p0.open] == ["async-loader"]
            with pytest.raises(errors.InvalidArgument, match="producer name"):
                await engine.producer("s", name="")

    asyncio.run(main())
