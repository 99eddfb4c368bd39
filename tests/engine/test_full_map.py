"""A full map can always be freed (issue 19, item 7): at ``max_map_size``, deleting a stream
or a consumer still works, and the room it frees takes new writes at once and after a reopen."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O

KIB = 1024
MIB = 1024 * KIB


def _fill_large(engine: ts.Engine, stream: str) -> None:
    producer = engine.producer(stream)
    for i in range(10_000):
        producer.instant([b"%d:" % i + b"x" * (40 * KIB)])


def _fill_small(engine: ts.Engine, stream: str) -> None:
    producer = engine.producer(stream)
    for i in range(100_000):
        producer.instant([b"%d:" % i + b"y" * 200])


def _fill_batches(engine: ts.Engine, stream: str) -> None:
    producer = engine.producer(stream)
    for i in range(100_000):
        with producer.transaction() as txn:
            txn.send_many([b"%d.%d" % (i, j) for j in range(300)])


def _fill_partitions(engine: ts.Engine, stream: str) -> None:
    producer = engine.producer(stream)
    for i in range(100_000):
        producer.instant([b"z" * 3000], partition=i % 8)


def _fill_consumers(engine: ts.Engine, stream: str) -> None:
    producer = engine.producer(stream)
    tid = producer.instant([b"first"])
    for i in range(1_000_000):
        engine.backend.submit([ts_set_offsets(stream, f"consumer-{i:06d}" + "c" * 150, tid)])


def ts_set_offsets(stream: str, consumer: str, tid: int) -> O.SetOffsets:
    return O.SetOffsets(stream, consumer, {0: tid})


FILLS: dict[str, Callable[[ts.Engine, str], None]] = {
    "large-items": _fill_large,
    "small-items": _fill_small,
    "many-item-transactions": _fill_batches,
    "partitions": _fill_partitions,
    "consumers": _fill_consumers,
}


def _fits(engine: ts.Engine, stream: str, n: int) -> int:
    """How many of ``n`` 4 KiB instant writes fit."""
    producer = engine.producer(stream)
    done = 0
    try:
        for i in range(n):
            producer.instant([b"%d:" % i + b"n" * (4 * KIB)])
            done += 1
    except errors.StorageFull:
        pass
    return done


@pytest.mark.parametrize("fill", sorted(FILLS))
@pytest.mark.parametrize("log_retention", [100_000, None])
def test_deleting_a_stream_on_a_full_map_frees_room_for_new_writes(make_engine, tmp_path, fill: str,
                                                                   log_retention: int | None) -> None:
    path = tmp_path / "full"
    options = dict(map_size=2 * MIB, max_map_size=2 * MIB, durability="async", log_retention=log_retention)
    engine = make_engine(path, **options)
    engine.create_stream("big", partitions=8)
    with pytest.raises(errors.StorageFull):
        FILLS[fill](engine, "big")
    engine.delete_stream("big")  # never refused for lack of room
    engine.create_stream("after")
    assert _fits(engine, "after", 100) == 100
    engine.close()
    with ts.open(path, compaction_interval=None, **options) as again:  # and after a reopen
        again.create_stream("after-reopen")
        assert _fits(again, "after-reopen", 100) == 100
        again.delete_stream("after")
        again.delete_stream("after-reopen")


def test_deleting_a_consumer_on_a_full_map_works(make_engine) -> None:
    engine = make_engine(map_size=1 * MIB, max_map_size=1 * MIB, durability="async")
    engine.create_stream("s")
    with pytest.raises(errors.StorageFull):
        _fill_consumers(engine, "s")
    consumers = engine.backend.list_consumers("s")
    for c in consumers[: len(consumers) // 2]:
        assert engine.backend.submit([O.DeleteConsumer("s", c.name)]) == [1]
    assert _fits(engine, "s", 20) == 20
