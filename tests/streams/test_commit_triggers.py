"""When a task commits (``commit_records``, ``commit_interval_ms`` on the app's injectable
clock, ``commit_bytes``), and the byte bound of its store caches (``store_cache_bytes``)."""

from __future__ import annotations

from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded.streams import App, Processor, Record, StreamsBuilder, TestDriver, send_records
from tstreams_embedded.streams.records import pack_envelope
from tstreams_embedded.streams.serdes import JsonSerde


class FakeClock:
    """Epoch ms that move only when a record is processed (``tick``)."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def tick(self, ms: int) -> None:
        self.now += ms


def run_app(engine: ts.Engine, app_id: str, **options: Any) -> int:
    """10 one-record transactions through ``count`` and a sink, the clock moving 10 ms per
    record; the number of commits."""
    clock = FakeClock()
    b = StreamsBuilder()
    s = b.stream("in", key_serde="str", value_serde="json").peek(lambda k, v: clock.tick(10))
    s.to(f"out-{app_id}", key_serde="str", value_serde="json")
    s.group_by_key(key_serde="str").count(store="n")
    if not engine.has_stream("in"):
        engine.create_stream("in")
        send_records(engine, "in", [("k", {"i": i}, i) for i in range(10)], key_serde="str", value_serde="json",
                     records_per_transaction=1)
    with App(engine, application_id=app_id, topology=b.build(), clock=clock, **options) as app:
        metrics = app.run()
        assert metrics["records"] == 10
        assert app.store("n").get("k") == 10
        return metrics["commits"]


LARGE = {"commit_records": 10**6, "commit_interval_ms": 10**9, "commit_bytes": 1 << 30}
OUTPUT_BYTES = len(pack_envelope(b"k", JsonSerde().serialize({"i": 0}), 0, None))


@pytest.mark.parametrize(("options", "commits"), [
    ({}, 1),  # only when the input runs out
    ({"commit_records": 3}, 4),  # after records 3, 6, 9, then the last one
    ({"commit_records": 5}, 2),
    ({"commit_interval_ms": 25}, 4),  # at 30, 60, 90 ms, then the last one
    ({"commit_interval_ms": 45}, 2),  # at 50 and 100 ms
    ({"commit_bytes": 2 * OUTPUT_BYTES}, 5),  # every second record's output
    ({"commit_bytes": 5 * OUTPUT_BYTES}, 2),
])
def test_each_commit_trigger(tstreams_embedded_engine: ts.Engine, options: dict[str, Any], commits: int) -> None:
    assert run_app(tstreams_embedded_engine, "a", **{**LARGE, **options}) == commits


VALUE = b"v" * 10_000
BOUND = 64 << 10
observed: list[int] = []


class PutLarge(Processor):
    """Puts a 10 kB value per record and reads back an older key; notes the cache's bytes."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_store("big")

    def process(self, record: Record) -> None:
        self.store.put(record.key, VALUE + record.key.encode())
        observed.append(self.store.cached_bytes)
        assert self.store.get(f"{record.value // 2:04d}") == VALUE + f"{record.value // 2:04d}".encode()
        observed.append(self.store.cached_bytes)


def test_store_cache_stays_within_its_byte_bound() -> None:
    observed.clear()
    b = StreamsBuilder()
    b.add_state_store("big", key_serde="str", value_serde="bytes")
    b.stream("in", key_serde="str", value_serde="json").process(PutLarge, stores=["big"])
    entry = len(VALUE) + 4 + 4
    with TestDriver(b.build(), store_cache_bytes=BOUND) as d:
        for i in range(60):
            d.pipe("in", f"{i:04d}", i, i)
        d.process()
        store = d.store("big")
        assert store.all() == {f"{i:04d}": VALUE + f"{i:04d}".encode() for i in range(60)}
    assert len(observed) == 120
    assert max(observed) <= BOUND + entry  # the changes of the transaction that passed it, until its commit
    assert sum(observed) / len(observed) <= BOUND
    assert 60 * entry > 4 * BOUND  # what the task stored is much more than its cache held
