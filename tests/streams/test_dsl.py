"""Every DSL operation through the TestDriver, against results computed independently."""

from __future__ import annotations

from typing import Any

import pytest

from tstreams_embedded import errors
from tstreams_embedded.streams import Processor, Record, StreamsBuilder, TestDriver

EVENTS = [("u1", {"page": "/a", "n": 1}), ("u2", {"page": "/b", "n": 2}), ("u1", {"page": "/health", "n": 3}),
          ("u3", {"page": "/a", "n": 4}), ("u2", {"page": "/c", "n": 5}), (None, {"page": "/a", "n": 6})]


def run(build: Any, outputs: list[str], partitions: int = 1, events: list[tuple[Any, Any]] = EVENTS
        ) -> dict[str, list[tuple[Any, Any]]]:
    b = StreamsBuilder()
    build(b.stream("in", key_serde="str", value_serde="json"))
    with TestDriver(b.build(), partitions=partitions) as d:
        for i, (k, v) in enumerate(events):
            d.pipe("in", k, v, 1000 + i)
        return {o: [(r.key, r.value) for r in d.read_output(o)] for o in outputs}


def by_key(pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    return sorted(pairs, key=repr)


@pytest.mark.parametrize("partitions", [1, 3])
def test_stateless_operations(partitions: int) -> None:
    def build(s: Any) -> None:
        s.filter(lambda k, v: v["page"] != "/health").to("filtered")
        s.filter_not(lambda k, v: v["page"] != "/health").to("health")
        s.map(lambda k, v: (v["page"], v["n"])).to("mapped")
        s.map_values(lambda v: v["n"] * 10).to("values")
        s.map_values(lambda k, v: f"{k}:{v['n']}", with_key=True).to("values-with-key")
        s.flat_map(lambda k, v: [(k, v["n"])] * (v["n"] % 3)).to("flat")
        s.flat_map_values(lambda v: list(range(v["n"] % 3))).to("flat-values")
        s.select_key(lambda k, v: v["page"]).map_values(lambda v: v["n"]).to("rekeyed")

    out = run(build, ["filtered", "health", "mapped", "values", "values-with-key", "flat", "flat-values", "rekeyed"],
              partitions)
    ev = EVENTS
    assert by_key(out["filtered"]) == by_key([(k, v) for k, v in ev if v["page"] != "/health"])
    assert out["health"] == [("u1", {"page": "/health", "n": 3})]
    assert by_key(out["mapped"]) == by_key([(v["page"], v["n"]) for k, v in ev])
    assert by_key(out["values"]) == by_key([(k, v["n"] * 10) for k, v in ev])
    assert by_key(out["values-with-key"]) == by_key([(k, f"{k}:{v['n']}") for k, v in ev])
    assert by_key(out["flat"]) == by_key([(k, v["n"]) for k, v in ev for _ in range(v["n"] % 3)])
    assert by_key(out["flat-values"]) == by_key([(k, i) for k, v in ev for i in range(v["n"] % 3)])
    assert by_key(out["rekeyed"]) == by_key([(v["page"], v["n"]) for k, v in ev])


def test_peek_foreach_split_merge() -> None:
    seen: list[Any] = []
    peeked: list[Any] = []

    def build(s: Any) -> None:
        branches = (s.peek(lambda k, v: peeked.append(v["n"]))
                    .split(prefix="p-")
                    .branch(lambda k, v: v["page"] == "/a", name="a")
                    .branch(lambda k, v: v["n"] % 2 == 0, name="even")
                    .default_branch(name="rest"))
        assert sorted(branches) == ["p-a", "p-even", "p-rest"]
        branches["p-a"].to("a")
        branches["p-even"].to("even")
        branches["p-rest"].to("rest")
        branches["p-a"].merge(branches["p-even"]).foreach(lambda k, v: seen.append(v["n"]))

    out = run(build, ["a", "even", "rest"])
    assert [v["n"] for _, v in out["a"]] == [1, 4, 6]
    assert [v["n"] for _, v in out["even"]] == [2]
    assert [v["n"] for _, v in out["rest"]] == [3, 5]
    assert sorted(seen) == [1, 2, 4, 6]
    assert peeked == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("partitions", [1, 2])
def test_count_reduce_aggregate(partitions: int) -> None:
    def build(s: Any) -> None:
        g = s.group_by(lambda k, v: v["page"], key_serde="str")
        g.count(store="count").to_stream().to("counts")
        g.reduce(lambda a, b: {"page": a["page"], "n": a["n"] + b["n"]}, store="sum").to_stream().to("sums")
        g.aggregate(list, lambda k, v, agg: agg + [v["n"]], store="lists")
        s.group_by_key(key_serde="str").count(store="per-user")

    b = StreamsBuilder()
    build(b.stream("in", key_serde="str", value_serde="json"))
    with TestDriver(b.build(), partitions=partitions) as d:
        for i, (k, v) in enumerate(EVENTS):
            d.pipe("in", k, v, i)
        counts = d.read_output("counts")
        pages = [v["page"] for _, v in EVENTS]
        final = {r.key: r.value for r in counts}
        assert final == {p: pages.count(p) for p in set(pages)}
        assert len(counts) == len(EVENTS)  # one update per record
        assert d.store("count").all() == {p: pages.count(p) for p in set(pages)}
        assert d.store("sum").get("/a") == {"page": "/a", "n": 1 + 4 + 6}
        assert sorted(d.store("lists").get("/a")) == [1, 4, 6]
        assert d.store("per-user").all() == {"u1": 2, "u2": 2, "u3": 1}  # the None key is skipped
        assert d.store("per-user").get("nobody") is None
        assert d.metrics["skipped_null_key"] == 1


def test_through_and_repartition() -> None:
    def build(s: Any) -> None:
        s.select_key(lambda k, v: v["page"]).through("by-page", key_serde="str", value_serde="json") \
            .map_values(lambda v: v["n"]).to("via-through")
        s.repartition(name="again").map_values(lambda v: v["n"]).to("via-repartition")

    out = run(build, ["via-through", "via-repartition"], partitions=2)
    assert by_key(out["via-through"]) == by_key([(v["page"], v["n"]) for _, v in EVENTS])
    assert by_key(out["via-repartition"]) == by_key([(k, v["n"]) for k, v in EVENTS])


def test_group_by_names_its_repartition_stream() -> None:
    """``group_by(..., name=)`` (Kafka's ``Grouped.as``), on a stream and on a table: the
    repartition streams are ``<application_id>-<name>-repartition``, whatever comes before."""
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").map_values(lambda v: v) \
        .group_by(lambda k, v: v["page"], key_serde="str", name="by-page").count(store="per-page")
    b.table("users", key_serde="str", value_serde="json") \
        .group_by(lambda k, v: (v["team"], 1), key_serde="str", name="by-team").count(store="per-team")
    topology = b.build()
    with TestDriver(topology, application_id="names", partitions=2) as d:
        assert sorted(d.app.topology.stream_names("names")[0]) == [
            "in", "names-by-page-repartition", "names-by-team-repartition", "users"]
        for i, (k, v) in enumerate(EVENTS):
            d.pipe("in", k, v, 1000 + i)
        d.pipe("users", "ann", {"team": "red"}, 0)
        assert d.store("per-page").all() == {"/a": 3, "/b": 1, "/health": 1, "/c": 1}
        assert d.store("per-team").all() == {"red": 1}
    with pytest.raises(errors.InvalidArgument):
        b.stream("other").group_by(lambda k, v: v, name="")


class Dedup(Processor):
    """Forwards the first record of each key; counts the rest in its store; emits a summary
    on punctuation."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_store("seen")
        context.schedule(2, "stream_time", self.tick)
        context.schedule(1000, "wall_clock", self.wall)

    def process(self, record: Record) -> None:
        n = self.store.get(record.key)
        self.store.put(record.key, (n or 0) + 1)
        if n is None:
            self.context.forward(record)

    def tick(self, now: int) -> None:
        self.context.forward(Record("tick", now, now))

    def wall(self, now: int) -> None:
        self.context.forward(Record("wall", now, now))


def test_processor_api_with_store_and_punctuators() -> None:
    b = StreamsBuilder()
    b.add_state_store("seen", key_serde="str")
    b.stream("in", key_serde="str", value_serde="json").process(Dedup, stores=["seen"]).to("out")
    with TestDriver(b.build(), wall_clock_ms=0) as d:
        for i, k in enumerate(["a", "b", "a", "c", "b"]):
            d.pipe("in", k, {"i": i}, 10 + i)
        out = [(r.key, r.value) for r in d.read_output("out")]
        assert out == [("a", {"i": 0}), ("b", {"i": 1}), ("tick", 12), ("c", {"i": 3}), ("tick", 14)]
        assert d.store("seen").all() == {"a": 2, "b": 2, "c": 1}
        d.advance_wall_clock(999)
        assert d.read_output("out") == []
        d.advance_wall_clock(1)
        assert [(r.key, r.value) for r in d.read_output("out")] == [("wall", 1000)]


def test_plain_items_have_no_key_and_the_transaction_time() -> None:
    b = StreamsBuilder()
    b.stream("in", value_serde="str").map_values(str.upper).to("out", value_serde="str")
    with TestDriver(b.build()) as d:
        d.pipe_raw("in", b"hello")
        (r,) = d.read_output("out")
        assert (r.key, r.value) == (None, "HELLO")
        assert abs(r.timestamp - d.engine.backend.now_ms()) < 600_000


def test_topology_errors() -> None:
    b = StreamsBuilder()
    s = b.stream("in")
    with pytest.raises(errors.TopologyError):
        b.stream("in")
    with pytest.raises(errors.InvalidArgument):
        s.filter("not callable")  # type: ignore[arg-type]
    with pytest.raises(errors.TopologyError):
        s.process(Dedup, stores=["missing"])
    with pytest.raises(errors.SerdeError):
        b.stream("other", value_serde="yaml")
    with pytest.raises(errors.TopologyError):
        s.group_by_key().count().suppress_until_window_closes()
    with pytest.raises(errors.TopologyError):
        StreamsBuilder().build()
    with pytest.raises(errors.InvalidArgument):
        s.group_by_key().windowed_by("5 minutes")  # type: ignore[arg-type]


def test_add_processor_by_name() -> None:
    class Double(Processor):
        def process(self, record: Record) -> None:
            self.context.forward(record.with_(value=record.value * 2))

    b = StreamsBuilder()
    source = b.stream("in", key_serde="str", value_serde="json")
    doubled = b.add_processor("double", Double, source)
    assert doubled.name == "double"
    doubled.to("out")
    with pytest.raises(errors.TopologyError):
        b.add_processor("double", Double, source)
    with TestDriver(b.build()) as d:
        d.pipe("in", "k", 21, 1)
        assert [(r.key, r.value) for r in d.read_output("out")] == [("k", 42)]
