"""App on a real engine, embedded and served: run until idle, start/stop, restart from the
last commit, threads, store queries, and bad arguments."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.streams import App, StreamsBuilder, TimeWindows, Windowed
from tstreams_embedded.streams.serdes import JsonSerde, StrSerde, WindowedSerde
from tstreams_embedded.testing import eventually

from .harness import read_envelopes


def page_counts() -> Any:
    b = StreamsBuilder()
    (b.stream("views", value_serde="json", timestamp=lambda key, value: value["ts"])
        .filter(lambda k, v: v["page"] != "/health")
        .group_by(lambda k, v: v["page"], key_serde="str")
        .windowed_by(TimeWindows(size_ms=300_000, grace_ms=10_000))
        .count(store="views-per-page")
        .suppress_until_window_closes().to_stream().to("page-counts", key_serde="str", value_serde="json"))
    return b.build()


def write_views(engine: ts.Engine, views: list[tuple[str, int]], partition: int = 0) -> None:
    engine.producer("views", partition=partition).instant([json.dumps({"page": p, "ts": t}).encode()
                                                           for p, t in views])


def read_out(engine: ts.Engine) -> list[tuple[Any, Any]]:
    ks = WindowedSerde(StrSerde())
    out = [(ks.deserialize(kb), JsonSerde().deserialize(vb)) for kb, vb, _, _ in read_envelopes(engine, "page-counts")]
    return sorted(out, key=repr)


def test_run_until_idle_then_restart(tstreams_engine: ts.Engine) -> None:
    engine = tstreams_engine
    engine.create_stream("views", partitions=2)
    write_views(engine, [("/a", 1_000), ("/b", 2_000), ("/health", 3_000)], 0)
    write_views(engine, [("/a", 299_000)], 1)
    app = App(engine, application_id="pageviews", topology=page_counts(), num_threads=2)
    metrics = app.run(until_idle=True)
    assert metrics["records"] >= 4
    assert read_out(engine) == []  # nothing closed yet
    assert app.store("views-per-page").all() == {Windowed("/a", 0, 300_000): 2, Windowed("/b", 0, 300_000): 1}
    app.close()  # leaves the group: its task leases are free at once
    # a new app object (a restart) continues from the committed state, with no replay; stream
    # time is per task, so each page's task needs a later record to close its window
    write_views(engine, [("/a", 310_000)], 0)
    write_views(engine, [("/b", 310_000)], 1)
    App(engine, application_id="pageviews", topology=page_counts()).run(until_idle=True)
    got = read_out(engine)
    assert got == [(Windowed("/a", 0, 300_000), 2), (Windowed("/b", 0, 300_000), 1)]


def test_start_and_stop(tstreams_engine: ts.Engine) -> None:
    engine = tstreams_engine
    engine.create_stream("views")
    app = App(engine, application_id="live", topology=page_counts()).start()
    try:
        write_views(engine, [("/a", 1_000), ("/a", 400_000)])
        eventually(lambda: read_out(engine) == [(Windowed("/a", 0, 300_000), 1)], timeout=30)
    finally:
        app.stop()
    assert app.store("views-per-page").get("/a", 300_000, 600_000) == 1  # type: ignore[call-arg]


def test_bad_arguments(tstreams_embedded_engine: ts.Engine) -> None:
    engine = tstreams_embedded_engine
    topo = page_counts()
    with pytest.raises(errors.InvalidArgument):
        App("engine", application_id="x", topology=topo)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument):
        App(engine, application_id="a/b", topology=topo)
    with pytest.raises(errors.InvalidArgument):
        App(engine, application_id="x", topology="topo")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument):
        App(engine, application_id="x", topology=topo, processing="maybe_once")
    with pytest.raises(errors.InvalidArgument):
        App(engine, application_id="x", topology=topo, num_threads=0)
    with pytest.raises(errors.StreamNotFound):
        App(engine, application_id="x", topology=topo).run()
    engine.create_stream("views")
    with pytest.raises(errors.StoreNotFound):
        App(engine, application_id="x", topology=topo).store("nope")


def test_bad_data_stops_the_app_at_its_last_commit(tstreams_embedded_engine: ts.Engine) -> None:
    engine = tstreams_embedded_engine
    engine.create_stream("views")
    write_views(engine, [("/a", 1_000)])
    engine.producer("views").instant([b"not json"])
    app = App(engine, application_id="strict", topology=page_counts(), commit_records=1)
    with pytest.raises(errors.SerdeError):
        app.run()
    first = engine.backend.scan_index("views", 0, 0).entries[0][0]
    assert engine.backend.get_offsets("views", "strict") == {0: first}  # the good transaction only
    assert app.store("views-per-page").all() == {Windowed("/a", 0, 300_000): 1}


def test_a_commit_is_one_engine_write(tstreams_embedded_engine: ts.Engine) -> None:
    """Output, store changes and input offsets of a commit are ONE commit-log entry."""
    engine = tstreams_embedded_engine
    engine.create_stream("views")
    write_views(engine, [("/a", 1_000), ("/a", 400_000)])
    core: Any = engine.backend
    seq = core.log_seq()
    App(engine, application_id="one", topology=page_counts()).run(until_idle=True)
    entries = core.read_log(seq + 1, 100)
    with_offsets = [ops for _, _, ops in entries if any(type(op).__name__ == "SetOffsets" for op in ops)]
    assert len(with_offsets) == 1
    kinds = sorted({type(op).__name__ for op in with_offsets[0]})
    assert kinds == ["CheckLease", "Instant", "SetOffsets", "StoreWrite"]  # CheckLease: the task's fence


@pytest.mark.parametrize("processing", ["exactly_once", "at_least_once"])
def test_processing_modes_give_the_same_results(tstreams_embedded_engine: ts.Engine, processing: str) -> None:
    engine = tstreams_embedded_engine
    engine.create_stream("views")
    for t in range(0, 1_000_000, 50_000):
        write_views(engine, [("/a", t), ("/b", t + 1)])
    App(engine, application_id="m", topology=page_counts(), processing=processing, commit_records=3).run()
    expected = [(Windowed(p, s, s + 300_000), 6) for s in (0, 300_000, 600_000) for p in ("/a", "/b")]
    assert read_out(engine) == sorted(expected, key=repr)


@pytest.mark.parametrize(("options", "words"), [
    ({"processing": "maybe_once"}, "processing must be one of"),
    ({"on_record_error": "ignore"}, "on_record_error must be one of"),
    ({"num_threads": 0}, "num_threads must be a positive integer"),
    ({"commit_bytes": True}, "commit_bytes must be a positive integer"),
    ({"max_task_idle_ms": -1}, "max_task_idle_ms"),
    ({"turn_slack_ms": -5}, "turn_slack_ms must be None or a non-negative integer"),
    ({"idle_advance_ms": 0}, "idle_advance_ms must be None or a positive integer"),
    ({"http_port": 70_000}, "http_port"),
    ({"http_host": ""}, "http_host"),
    ({"static_id": ""}, "static_id"),
    ({"application_id": "a/b"}, "must not contain '/'"),
])
def test_app_config_checks_every_option_in_one_place(options: dict, words: str) -> None:
    """``AppConfig`` refuses each bad option by name; App takes the same keyword options."""
    from tstreams_embedded.streams import AppConfig

    with pytest.raises(errors.InvalidArgument, match=re.escape(words)):
        AppConfig(**{"application_id": "x", **options})


def test_choices_are_enums_that_accept_the_documented_strings(tstreams_embedded_engine: ts.Engine) -> None:
    from tstreams_embedded.streams import AppConfig, Processing, RecordErrorPolicy

    config = AppConfig("x", processing="at_least_once", on_record_error="skip")  # type: ignore[arg-type]
    assert config.processing is Processing.AT_LEAST_ONCE and config.processing == "at_least_once"
    assert config.on_record_error is RecordErrorPolicy.SKIP and not config.durable
    app = App(tstreams_embedded_engine, application_id="x", topology=page_counts(),
              processing=Processing.AT_LEAST_ONCE, on_record_error="dead_letter")
    assert app.config.on_record_error is RecordErrorPolicy.DEAD_LETTER and not app.durable
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_threads = 2  # type: ignore[misc]
