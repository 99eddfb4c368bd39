"""Dedup on input whose records are not on their dedup key's partition (#19 item 25): a
dedup reading a multi-partition input directly refuses records without a key, with the fix
in the message; repartitioned by the dedup key, it catches every duplicate."""

from __future__ import annotations

from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.streams import App, StreamsBuilder, TestDriver
from tstreams_embedded.streams.kstream import KStream
from tstreams_embedded.streams.records import pack_envelope
from tstreams_embedded.streams.serdes import serde

PARTITIONS = 4
ORDERS = 200


def round_robin_orders(engine: ts.Engine) -> int:
    """Orders 0..199, each sent twice, without keys, round-robin over the partitions; the
    number of duplicates."""
    vs = serde("json")
    sent = [n for n in range(ORDERS)] + [n for n in range(ORDERS)]
    engine.backend.submit([O.Instant("orders", i % PARTITIONS, O.pack_items(
        [pack_envelope(None, vs.serialize({"id": n}), i, None)])) for i, n in enumerate(sent)])
    return len(sent) - ORDERS


def run(tmp: Path, repartition: bool) -> dict[str, int]:
    b = StreamsBuilder()
    orders: KStream = b.stream("orders", value_serde="json")
    if repartition:
        orders = orders.select_key(lambda k, v: v["id"]).repartition(name="by-id")
    orders.dedup(key=lambda k, v: v["id"], ttl_ms=10_000).to("unique")
    with ts.open(str(tmp), compaction_interval=None, durability="async") as engine:
        engine.create_stream("orders", partitions=PARTITIONS)
        duplicates = round_robin_orders(engine)
        with App(engine, application_id="dedup-rr", topology=b.build()) as app:
            metrics = app.run()
        assert metrics.get("dedup_dropped", 0) == duplicates
        return metrics


def test_dedup_refuses_unkeyed_records_of_a_multi_partition_input(tmp_path: Path) -> None:
    with pytest.raises(errors.TopologyError, match=r"without a key.*Repartition by the dedup key"):
        run(tmp_path, repartition=False)


def test_dedup_after_a_repartition_by_its_key_catches_every_duplicate(tmp_path: Path) -> None:
    run(tmp_path, repartition=True)


def test_dedup_takes_unkeyed_records_of_a_single_partition_input() -> None:
    b = StreamsBuilder()
    b.stream("orders", value_serde="json").dedup(key=lambda k, v: v["id"], ttl_ms=100).to("unique")
    with TestDriver(b.build()) as d:
        for ident, t in [(1, 0), (1, 10), (2, 20)]:
            d.pipe("orders", None, {"id": ident}, timestamp=t)
        assert [r.timestamp for r in d.read_output("unique")] == [0, 20]
