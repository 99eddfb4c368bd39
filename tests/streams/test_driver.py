"""TestDriver processes each piped record at once, through every repartition (#19 item 26),
as Kafka's TopologyTestDriver does."""

from __future__ import annotations

from typing import Any

from tstreams_embedded.streams import StreamsBuilder, TestDriver, Topology, send_records


def two_repartitions() -> Topology:
    """Every record to one key through two repartitions, then appended to a list: the list
    is the order in which the records reached the aggregation."""
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json")
        .select_key(lambda k, v: "all").repartition(name="first")
        .map(lambda k, v: ("total", v)).repartition(name="second")
        .group_by_key(key_serde="str")
        .aggregate(list, lambda k, v, agg: [*agg, v], store="arrivals"))
    return b.build()


def test_each_piped_record_is_processed_before_the_next() -> None:
    """Eight records with equal timestamps on keys spread over two partitions reach the
    aggregation in the order piped (processed as a batch, a later record on one partition
    overtook earlier ones on the other)."""
    with TestDriver(two_repartitions(), partitions=2) as d:
        for n, key in enumerate("abcdefgh"):
            d.pipe("in", key, n, timestamp=0)
            assert d.engine.backend.get_offsets("in", "test-app"), "processed before pipe returns"
        assert d.store("arrivals").get("total") == list(range(8))


def test_records_written_by_other_means_are_processed_by_process() -> None:
    """``process()`` processes input the driver did not pipe (written with its engine)."""
    with TestDriver(two_repartitions()) as d:
        send_records(d.engine, "in", [("a", 1, 0), ("b", 2, 1)], key_serde="str", value_serde="json")
        assert d.app.store("arrivals").get("total") is None  # not processed yet
        metrics: dict[str, Any] = d.process()
        assert metrics["records"] == 2
        assert d.store("arrivals").get("total") == [1, 2]
