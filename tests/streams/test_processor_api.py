"""The Processor API through the TestDriver and an App: wall-clock punctuators from the
driver's start, and windowed stores for processors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.storage import state_stores as state
from tstreams_embedded.streams import (
    App,
    Processor,
    ReadOnlyWindowStore,
    Record,
    StreamsBuilder,
    TestDriver,
    TimeWindows,
    WindowStore,
    partition_of,
    send_records,
)
from tstreams_embedded.streams.topology import Topology
from tstreams_embedded.streams.windows import Windowed


class Ticker(Processor):
    def init(self, context: Any) -> None:
        super().init(context)
        context.schedule(1000, "wall_clock", lambda now: context.forward(Record("tick", now, now)))

    def process(self, record: Record) -> None:
        pass


def ticker() -> Topology:
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").process(Ticker).to("out", key_serde="str", value_serde="json")
    return b.build()


@pytest.mark.parametrize(("pipe_first", "moves", "ticks"), [
    (False, [1000], [1000]),  # the first call: the punctuator is due from the driver's start
    (False, [999, 1], [1000]),
    (False, [1000, 1000], [1000, 2000]),
    (False, [5000], [5000]),  # one call per move, as Kafka's TopologyTestDriver
    (True, [5000], [5000]),  # a record first: still scheduled from the start, not from it
    (True, [500, 500, 500], [1000]),
])
def test_wall_clock_punctuators_start_with_the_driver(pipe_first: bool, moves: list[int], ticks: list[int]) -> None:
    with TestDriver(ticker(), wall_clock_ms=0) as d:
        if pipe_first:
            d.pipe("in", "k", 1, 1)
        got = []
        for ms in moves:
            d.advance_wall_clock(ms)
            got += [r.value for r in d.read_output("out")]
        assert got == ticks


def test_wall_clock_punctuators_from_a_given_start() -> None:
    with TestDriver(ticker(), wall_clock_ms=10_000) as d:
        d.advance_wall_clock(1000)
        assert [r.value for r in d.read_output("out")] == [11_000]


class WindowCounter(Processor):
    """Counts records per key in 10 ms windows of a processor's windowed store and forwards
    what ``fetch`` and ``get`` see of the key (this commit's changes included)."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.windows = context.get_store("counts")
        assert isinstance(self.windows, WindowStore)

    def process(self, record: Record) -> None:
        start = record.timestamp - record.timestamp % 10
        n = self.windows.get(record.key, start) or 0
        self.windows.put(record.key, n + 1, start)
        seen = [(w.start, w.end, v) for w, v in self.windows.fetch(record.key, 0, record.timestamp)]
        self.context.forward(Record(record.key, seen, record.timestamp))


def window_counter() -> Topology:
    b = StreamsBuilder()
    b.add_window_store("counts", size_ms=10, retention_ms=30, key_serde="str", value_serde="msgpack")
    b.stream("in", key_serde="str", value_serde="json").process(WindowCounter, stores=["counts"]).to(
        "out", key_serde="str", value_serde="json")
    return b.build()


EVENTS = [("a", 1), ("a", 5), ("b", 7), ("a", 12), ("a", 31), ("b", 33), ("a", 44), ("a", 3)]


def expected_window_counts(events: list[tuple[str, int]]) -> tuple[list[Any], dict[tuple[str, int], int]]:
    """What WindowCounter forwards and keeps, computed independently: windows of 10 ms,
    kept while end + 30 > the largest timestamp so far; a put into an expired one is dropped."""
    counts: dict[tuple[str, int], int] = {}
    out: list[Any] = []
    now = -1
    for key, t in events:
        now = max(now, t)
        alive = {kw: n for kw, n in counts.items() if kw[1] + 10 + 30 > now}
        start = t - t % 10
        if start + 10 + 30 > now:
            alive[(key, start)] = alive.get((key, start), 0) + 1
        counts = alive
        out.append(sorted([[s, s + 10, n] for (k, s), n in counts.items() if k == key and s <= t],
                          key=lambda w: (w[1], w[0])))
    return out, counts


def test_processor_window_store_through_the_driver() -> None:
    forwarded, final = expected_window_counts(EVENTS)
    with TestDriver(window_counter()) as d:
        commits = d.metrics.get("commits", 0)
        for key, t in EVENTS:
            d.pipe("in", key, {}, t)
        assert [r.value for r in d.read_output("out")] == forwarded
        # each piped record is processed at once: output, windows and offsets in one write each
        assert d.metrics["commits"] == commits + len(EVENTS)
        store = d.store("counts")
        assert isinstance(store, ReadOnlyWindowStore)
        assert {(w.key, w.start): v for w, v in store.all().items()} == final
        assert store.get("a", 40, 50) == 1
        assert store.fetch("a", 0, 100) == [(Windowed("a", 10, 20), 1), (Windowed("a", 30, 40), 1),
                                            (Windowed("a", 40, 50), 1)]  # [0, 10) expired


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 120)), min_size=1, max_size=25))
def test_processor_window_store_against_a_model(events: list[tuple[str, int]]) -> None:
    """Random keys and disordered timestamps: what the processor sees and what is committed
    equal the model's (windows, counts, expiry)."""
    forwarded, final = expected_window_counts(events)
    with TestDriver(window_counter()) as d:
        for key, t in events:
            d.pipe("in", key, {}, t)
        assert [r.value for r in d.read_output("out")] == forwarded
        store = d.store("counts")
        assert {(w.key, w.start): v for w, v in store.all().items()} == final


def test_processor_window_store_checks_its_arguments() -> None:
    b = StreamsBuilder()
    for options in ({"size_ms": 0}, {"size_ms": "10"}, {"size_ms": 10, "retention_ms": 5},
                    {"size_ms": 10, "retention_ms": True}):
        with pytest.raises(errors.InvalidArgument):
            b.add_window_store("w", **options)

    class Bad(Processor):
        def process(self, record: Record) -> None:
            store = self.context.get_store("w")
            assert isinstance(store, WindowStore)
            store.put(record.key, 1, record.value)

    b.add_window_store("w", size_ms=10, key_serde="str")
    b.stream("in", key_serde="str", value_serde="json").process(Bad, stores=["w"])
    for bad, words in (("x", "window_start"), (2**63, "window_start"), (state.MAX_TIME - 5, "window_end")):
        with TestDriver(b.build()) as d:
            with pytest.raises(errors.InvalidArgument, match=words):
                d.pipe("in", "k", bad, 1)  # processed at once


class DslWindowReader(Processor):
    """Reads the windowed counts of a DSL aggregation in the same task."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.windows = context.get_store("per-window")

    def process(self, record: Record) -> None:
        assert isinstance(self.windows, WindowStore)
        start = record.timestamp - record.timestamp % 10
        self.context.forward(Record(record.key, [self.windows.get(record.key, start),
                                                 [v for _, v in self.windows.fetch(record.key)]], record.timestamp))


def test_get_store_of_a_dsl_windowed_store_is_windowed() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_serde="str", value_serde="json")
    s.group_by_key(key_serde="str").windowed_by(TimeWindows(10)).count(store="per-window")
    s.process(DslWindowReader, stores=["per-window"]).to("out", key_serde="str", value_serde="json")
    with TestDriver(b.build()) as d:
        for key, t in [("a", 1), ("a", 2), ("b", 3), ("a", 15)]:
            d.pipe("in", key, {}, t)
        assert [r.value for r in d.read_output("out")] == [[1, [1]], [2, [2]], [1, [1]], [1, [2, 1]]]


def test_processor_window_store_in_an_app(tstreams_embedded_engine: ts.Engine) -> None:
    engine = tstreams_embedded_engine
    engine.create_stream("in", partitions=2)
    send_records(engine, "in", [(k, {}, t) for k, t in EVENTS], key_serde="str", value_serde="json",
                 records_per_transaction=1)
    with App(engine, application_id="windows", topology=window_counter(), commit_records=3) as app:
        assert app.run()["records"] == len(EVENTS)
        store = app.store("counts")
        assert isinstance(store, ReadOnlyWindowStore)
        expected: dict[tuple[str, int], int] = {}
        for p in range(2):  # windows expire on the stream time of their key's task
            expected |= expected_window_counts([e for e in EVENTS if partition_of(e[0].encode(), 2) == p])[1]
        assert {(w.key, w.start): v for w, v in store.all().items()} == expected
