"""Bad input at the streams entry points (DSL, Processor API, TestDriver, stores) raises a
specific error of :mod:`tstreams_embedded.errors` with a clear message, never a plain Python
error, and writes nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tstreams_embedded import errors
from tstreams_embedded.streams import CalendarWindows, Processor, Record, StreamsBuilder, TestDriver, TimeWindows
from tstreams_embedded.streams.kstream import KStream
from tstreams_embedded.streams.topology import Topology


def source() -> KStream:
    return StreamsBuilder().stream("in", key_serde="str", value_serde="json")


def passthrough() -> Topology:
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").to("out", key_serde="str", value_serde="json")
    return b.build()


@pytest.mark.parametrize(("build", "error", "words"), [
    (lambda: source().split().branch(lambda k, v: True, name=5), errors.InvalidArgument, "branch name"),
    (lambda: source().split().branch(lambda k, v: True, name=""), errors.InvalidArgument, "branch name"),
    (lambda: source().split(prefix=None).branch(lambda k, v: True, name="a"),  # type: ignore[arg-type]
     errors.InvalidArgument, "prefix"),
    (lambda: source().split().default_branch(name=None), errors.InvalidArgument, "default branch"),  # type: ignore[arg-type]
    (lambda: source().map_values(lambda v: v, with_key="yes"), errors.InvalidArgument, "with_key"),  # type: ignore[arg-type]
    (lambda: source().group_by_key(key_serde="yaml"), errors.SerdeError, "yaml"),
    (lambda: (lambda b: b.add_processor("p", Processor, "x"))(StreamsBuilder()), errors.TopologyError, "parent"),
    (lambda: (lambda b: b.add_processor("p", Processor, source()))(StreamsBuilder()), errors.TopologyError,
     "this builder"),
])
def test_bad_dsl_arguments(build: Callable[[], Any], error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        build()


@pytest.mark.parametrize(("topology", "options", "words"), [
    ("topo", {}, "topology"),
    (None, {"wall_clock_ms": "x"}, "wall_clock_ms"),
    (None, {"wall_clock_ms": 1.5}, "wall_clock_ms"),
    (None, {"wall_clock_ms": 2**70}, "wall_clock_ms"),
])
def test_bad_driver_arguments(topology: Any, options: dict[str, Any], words: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=words):
        TestDriver(passthrough() if topology is None else topology, **options)


@pytest.fixture
def driver() -> Iterator[TestDriver]:
    with TestDriver(passthrough()) as d:
        yield d


@pytest.mark.parametrize(("pipe", "error", "words"), [
    (dict(timestamp=2**70), errors.InvalidArgument, "outside the valid timestamps"),
    (dict(timestamp=-10**17), errors.InvalidArgument, "outside the valid timestamps"),
    (dict(timestamp=1.5), errors.InvalidArgument, "epoch ms"),
    (dict(headers="x"), errors.InvalidArgument, "headers"),
    (dict(headers={"a": "str"}), errors.InvalidArgument, "bytes values"),
    (dict(headers={1: b"x"}), errors.InvalidArgument, "str names"),
])
def test_bad_pipes_write_nothing(driver: TestDriver, pipe: dict[str, Any], error: type[Exception],
                                 words: str) -> None:
    args: dict[str, Any] = {"timestamp": 1, **pipe}
    with pytest.raises(error, match=words):
        driver.pipe("in", "k", 1, **args)
    with pytest.raises(errors.PartitionOutOfRange):
        driver.pipe_raw("in", b"x", partition=5)
    assert driver.read_output("out") == []
    driver.pipe("in", "k", 1, 7, headers={"h": b"v"})
    assert driver.read_output("out") == [Record("k", 1, 7, {"h": b"v"})]


def run_one(build: Callable[[KStream], Any], key: Any = "k", value: Any = 1, timestamp: int = 1,
            extractor: Callable[[Any, Any], Any] | None = None) -> list[Record]:
    b = StreamsBuilder()
    build(b.stream("in", key_serde="str", value_serde="json", timestamp=extractor))
    with TestDriver(b.build()) as d:
        d.pipe("in", key, value, timestamp)
        return d.read_output("out")


class NotAProcessor:
    pass


class BadSchedule(Processor):
    def init(self, context: Any) -> None:
        super().init(context)
        context.schedule(10, "wall_clock", "not callable")

    def process(self, record: Record) -> None:
        pass


@pytest.mark.parametrize(("build", "extractor", "error", "words"), [
    (lambda s: s.process(NotAProcessor).to("out"), None, errors.TopologyError, "must return a Processor"),
    (lambda s: s.process(BadSchedule).to("out"), None, errors.InvalidArgument, "callback must be callable"),
    (lambda s: s.flat_map(lambda k, v: 5).to("out"), None, errors.TopologyError, "iterable"),
    (lambda s: s.flat_map_values(lambda v: None).to("out"), None, errors.TopologyError, "iterable"),
    (lambda s: s.to("out"), lambda k, v: 2**64, errors.InvalidArgument, "extractor of 'in'.*'k'"),
    (lambda s: s.to("out"), lambda k, v: -10**17, errors.InvalidArgument, "extractor of 'in'"),
    (lambda s: s.group_by_key(key_serde="str").windowed_by(CalendarWindows("day", tz="Europe/Berlin")).count()
     .to_stream().to("out", key_serde="str"), lambda k, v: -10**17, errors.InvalidArgument, "valid timestamps"),
    (lambda s: s.group_by_key(key_serde="str").windowed_by(TimeWindows(10)).count().to_stream()
     .to("out", key_serde="str"), lambda k, v: 2**64, errors.InvalidArgument, "valid timestamps"),
])
def test_bad_results_of_user_functions(build: Callable[[KStream], Any], extractor: Any, error: type[Exception],
                                       words: str) -> None:
    with pytest.raises(error, match=words):
        run_one(build, extractor=extractor)


def test_bad_window_store_queries() -> None:
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str").windowed_by(
        TimeWindows(10)).count(store="w")
    with TestDriver(b.build()) as d:
        d.pipe("in", "k", {}, 1)
        w = d.store("w")
        with pytest.raises(errors.InvalidArgument, match="start and end"):
            w.get("k")  # type: ignore[call-arg]
        with pytest.raises(errors.InvalidArgument, match="time_to"):
            w.fetch("k", 0, "x")  # type: ignore[call-arg,arg-type]
        with pytest.raises(errors.InvalidArgument, match="time_from"):
            w.fetch("k", "x")  # type: ignore[call-arg,arg-type]
        assert w.get("k", 0, 10) == 1  # type: ignore[call-arg]
