"""Hypothesis: a random sequence of async producer and consumer operations behaves like a
small pure-Python model (per partition: a list of committed transactions, a read position
and a stored offset; an output stream), embedded and remote alike. ``process`` reads the
next transaction, writes it to the output stream and checkpoints both in one
AsyncCheckpointGroup write (or cancels the group: nothing of it happens)."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tstreams_embedded import aio

from .conftest import OpenAsync

PARTITIONS = 2
STREAMS = itertools.count()

items = st.lists(st.binary(min_size=0, max_size=8), min_size=1, max_size=5)
partition = st.integers(0, PARTITIONS - 1)
operation = st.one_of(
    st.tuples(st.just("instant"), partition, items),
    st.tuples(st.just("transaction"), partition, items, st.booleans()),
    st.tuples(st.just("read"), partition),
    st.tuples(st.just("wait_read"), partition, items),
    st.tuples(st.just("checkpoint"), partition),
    st.tuples(st.just("reopen"), partition),
    st.tuples(st.just("process"), partition, st.booleans()),
)


@dataclass
class Model:
    committed: list[list[list[bytes]]] = field(default_factory=lambda: [[] for _ in range(PARTITIONS)])
    position: list[int] = field(default_factory=lambda: [0] * PARTITIONS)
    stored: list[int] = field(default_factory=lambda: [0] * PARTITIONS)
    #: what "process" wrote to the output stream, in order
    output: list[list[bytes]] = field(default_factory=list)

    def read(self, p: int) -> list[bytes] | None:
        if self.position[p] == len(self.committed[p]):
            return None
        self.position[p] += 1
        return self.committed[p][self.position[p] - 1]


class Rollback(Exception):
    """Raised in a transaction block to cancel it."""


async def run(engine: aio.AsyncEngine, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    stream = f"s{next(STREAMS)}"
    await engine.create_stream(stream, partitions=PARTITIONS)
    producer = await engine.producer(stream, batch_size=2)

    async def consumer(p: int) -> aio.AsyncConsumer:
        return await engine.consumer(stream, f"c{p}", partitions=[p])

    consumers = [await consumer(p) for p in range(PARTITIONS)]
    await engine.create_stream(f"{stream}-out")
    output = await engine.producer(f"{stream}-out")
    model = Model()
    for op in ops:
        kind, p = op[0], op[1]
        if kind == "instant":
            await producer.instant(op[2], partition=p)
            model.committed[p].append(op[2])
        elif kind == "transaction":
            try:
                async with producer.transaction(partition=p) as txn:
                    for item in op[2]:
                        await txn.send(item)
                    if not op[3]:
                        raise Rollback
            except Rollback:
                pass
            else:
                model.committed[p].append(op[2])
        elif kind == "read":
            got = await consumers[p].next(timeout=0)
            assert (got.items if got else None) == model.read(p)
        elif kind == "wait_read":
            reader = asyncio.ensure_future(consumers[p].next(timeout=10))
            await asyncio.sleep(0)
            await producer.instant(op[2], partition=p)
            model.committed[p].append(op[2])
            got = await reader
            assert got is not None and got.items == model.read(p)
        elif kind == "checkpoint":
            await consumers[p].checkpoint()
            model.stored[p] = model.position[p]
        elif kind == "reopen":
            consumers[p] = await consumer(p)
            model.position[p] = model.stored[p]
        elif kind == "process":
            got = await consumers[p].next(timeout=0)
            expected = model.read(p)
            assert (got.items if got else None) == expected
            group = engine.checkpoint_group(consumers[p], output)
            txn = await output.new_transaction()
            for item in got.items if got else [b"-"]:
                await txn.send(item)
            if op[2]:
                await group.checkpoint()
                model.output.append(expected or [b"-"])
                model.stored[p] = model.position[p]
            else:
                await group.cancel()
    for p in range(PARTITIONS):  # what is left to read is what the model has left
        rest = []
        while (got := await consumers[p].next(timeout=0)) is not None:
            rest.append(got.items)
        assert rest == model.committed[p][model.position[p]:]
        resumed = await consumer(p)  # a restarted reader begins at the stored offsets
        again = []
        while (got := await resumed.next(timeout=0)) is not None:
            again.append(got.items)
        assert again == model.committed[p][model.stored[p]:]
    written = await engine.consumer(f"{stream}-out", "check")
    out = []
    while (got := await written.next(timeout=0)) is not None:
        out.append(got.items)
    assert out == model.output


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(operation, max_size=25))
def test_async_operations_match_the_model(open_async: OpenAsync, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    async def main() -> None:
        async with await open_async() as engine:
            await run(engine, ops)

    asyncio.run(main())
