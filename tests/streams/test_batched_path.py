"""The batched record path (issue 21, part 1): a task moves a whole input transaction
through its nodes as one batch. The results must be what record-by-record processing gives:
windowed counts, lateness, suppression and updates against the brute-force model of
``test_windows``, with transactions of many records (TestDriver writes one record per
transaction); bad records inside a batch under ``on_record_error``; and the same app with a
Processor (which keeps the record-by-record path) giving the same output."""

from __future__ import annotations

import json
import tempfile
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded.engine.storage.core import Core
from tstreams_embedded.streams import App, Processor, Record, StreamsBuilder, TimeWindows, Windowed, send_records
from tstreams_embedded.streams.records import pack_envelope

from .harness import read_envelopes
from .test_windows import events_strategy, model_time_windows


def counting(windows: TimeWindows, suppress: bool, passthrough: bool = False) -> Any:
    """JSON values ``{"k": key, "t": ts, "keep": bool}`` (plain items, timestamp extracted) ->
    filter -> map_values -> group_by(k) -> windowed count -> (suppress) -> ``out``;
    ``passthrough``: a Processor in front, which keeps the task on the record-by-record path."""
    b = StreamsBuilder()
    s = b.stream("in", value_serde="json", timestamp=lambda _k, v: v["t"])
    if passthrough:
        s = s.process(Forward)
    table = (s.filter(lambda _k, v: v["keep"])
             .map_values(lambda v: {"k": v["k"], "t": v["t"]})
             .group_by(lambda _k, v: v["k"], key_serde="str")
             .windowed_by(windows)
             .count(store="counts"))
    if suppress:
        table = table.suppress_until_window_closes()
    table.to_stream().map(lambda wk, n: (wk.key, [wk.key, wk.start, wk.end, n])).to("out", key_serde="str",
                                                                                   value_serde="json")
    return b.build()


class Forward(Processor):
    def process(self, record: Record) -> None:
        self.context.forward(record)


def run(events: list[tuple[str, int, bool]], cuts: list[int], windows: TimeWindows, suppress: bool,
        passthrough: bool = False) -> tuple[list[tuple[str, list[Any]]], dict[str, int]]:
    """Write ``events`` as plain JSON items in transactions cut at ``cuts``, run the app until
    idle: its output (key, value) in order and its counters."""
    with tempfile.TemporaryDirectory() as tmp, ts.open(tmp) as engine:
        engine.create_stream("in")
        producer = engine.producer("in")
        items = [json.dumps({"k": k, "t": t, "keep": keep}).encode() for k, t, keep in events]
        bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(items))), len(items)]
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            producer.instant(items[lo:hi])
        app = App(engine, application_id="batch", topology=counting(windows, suppress, passthrough))
        app.run(until_idle=True)
        out = [(kb.decode(), json.loads(vb)) for kb, vb, _, _ in read_envelopes(engine, "out")]
        metrics = dict(app.metrics)
        app.close()
        return out, metrics


kept_events = st.tuples(events_strategy, st.lists(st.booleans(), min_size=40, max_size=40),
                        st.lists(st.integers(1, 40), max_size=6))


@settings(max_examples=10, deadline=None)
@given(data=kept_events, size=st.sampled_from([10, 25]), hop=st.sampled_from([1, 5]), grace=st.sampled_from([0, 7]))
def test_batches_of_records_give_the_models_final_windows(data: Any, size: int, hop: int, grace: int) -> None:
    raw, keeps, cuts = data
    events = [(k, t, keeps[i]) for i, (k, t) in enumerate(raw)]
    advance = size // hop
    windows = TimeWindows(size_ms=size, grace_ms=grace, advance_ms=advance, retention_ms=10**9)
    kept = [(k, t) for k, t, keep in events if keep]
    counts, closed, late, _ = model_time_windows(kept, size, advance, grace) if kept else ({}, [], 0, 0)
    out, metrics = run(events, cuts, windows, suppress=True)
    assert out == [(w.key, [w.key, w.start, w.end, counts[w]]) for w in closed]  # each closed window once, in order
    assert metrics.get("late_dropped", 0) == late


@settings(max_examples=6, deadline=None)
@given(data=kept_events, grace=st.sampled_from([0, 10]))
def test_batches_of_records_give_every_update_in_order(data: Any, grace: int) -> None:
    raw, keeps, cuts = data
    events = [(k, t, keeps[i]) for i, (k, t) in enumerate(raw)]
    windows = TimeWindows(10, grace_ms=grace, retention_ms=10**9)
    kept = [(k, t) for k, t, keep in events if keep]
    counts = model_time_windows(kept, 10, 10, grace)[0] if kept else {}
    out, _ = run(events, cuts, windows, suppress=False)
    assert out == run(events, cuts, windows, suppress=False, passthrough=True)[0]  # as record by record
    last: dict[Windowed, int] = {}
    for key, (_, start, end, n) in out:
        w = Windowed(key, start, end)
        assert n == last.get(w, 0) + 1
        last[w] = n
    assert last == counts


def test_a_key_too_long_inside_a_batch_is_dead_lettered_once_and_the_rest_counted(
        tstreams_embedded_engine: ts.Engine) -> None:
    engine = tstreams_embedded_engine
    engine.create_stream("in")
    long_key = "x" * 300
    keys = ["a", "b", long_key, "a", "bad", "c", long_key]
    items = [pack_envelope(k.encode(), b"1", 10 + i, None) for i, k in enumerate(keys)]
    items[4] = pack_envelope(b"bad", b"{oops", 15, None)  # not JSON: the transaction goes record by record
    engine.producer("in").instant(items[:4])
    engine.producer("in").instant(items[4:])
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str").count(store="n")
    app = App(engine, application_id="a", topology=b.build(), on_record_error="dead_letter")
    app.run(until_idle=True)
    letters = [msgpack.unpackb(vb) for _, vb, _, _ in read_envelopes(engine, "a-dead-letters")]
    assert [(g["index"], str(g["error"]).split(":")[0]) for g in letters] == [
        (2, "StoreKeyTooLong"), (0, "SerdeError"), (2, "StoreKeyTooLong")]
    assert app.metrics["records_dead_lettered"] == 3
    assert dict(app.store("n").all()) == {"a": 2, "b": 1, "c": 1}
    app.close()


def test_send_records_in_one_transaction_count_like_one_record_each(tstreams_embedded_engine: ts.Engine) -> None:
    engine = tstreams_embedded_engine
    engine.create_stream("in")
    send_records(engine, "in", [(k, 1, t) for t, k in enumerate("abcabca")], key_serde="str", value_serde="json")
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
     .windowed_by(TimeWindows(3)).count(store="n").to_stream()
     .map(lambda wk, n: (wk.key, [wk.start, n])).to("out", key_serde="str", value_serde="json"))
    app = App(engine, application_id="a", topology=b.build())
    app.run(until_idle=True)
    assert [(kb.decode(), json.loads(vb)) for kb, vb, _, _ in read_envelopes(engine, "out")] == [
        ("a", [0, 1]), ("b", [0, 1]), ("c", [0, 1]), ("a", [3, 1]), ("b", [3, 1]), ("c", [3, 1]), ("a", [6, 1])]
    app.close()


class CountingReads:
    """Counts the state-store reads an app makes of its engine's backend (a spy on the
    real backend: every call goes through)."""

    def __init__(self, engine: ts.Engine) -> None:
        self.calls = {"store_get": 0, "store_snapshot": 0}
        backend = engine.backend
        for name in self.calls:
            real = getattr(backend, name)

            def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
                self.calls[_name] += 1
                return _real(*args, **kwargs)
            setattr(backend, name, counted)


def test_a_batch_reads_its_keys_and_windows_in_few_round_trips(tstreams_engine: ts.Engine) -> None:
    """The keys of a transaction's records in one read (served), new windows in none: before,
    a windowed count read the store once per new window and a count once per new key, one
    round trip each to a served engine (issue 21: a remote app 50x slower than embedded)."""
    engine = tstreams_engine
    engine.create_stream("in")
    keys = [f"k{i}" for i in range(300)]
    send_records(engine, "in", [(k, 1, 10 * i) for i, k in enumerate(keys * 2)], key_serde="str",
                 value_serde="json", records_per_transaction=600)
    counting, windowed = StreamsBuilder(), StreamsBuilder()
    counting.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str").count(store="n")
    (windowed.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
     .windowed_by(TimeWindows(1_000_000)).count(store="w"))
    reads = CountingReads(engine)
    app = App(engine, application_id="w", topology=windowed.build())
    app.run(until_idle=True)
    calls = dict(reads.calls)
    assert len(list(app.store("w").all())) == 300
    assert calls["store_get"] <= 3 and calls["store_snapshot"] == 0  # none per new window
    app.close()
    reads = CountingReads(engine)
    app = App(engine, application_id="n", topology=counting.build())
    app.run(until_idle=True)
    calls = dict(reads.calls)
    assert dict(app.store("n").all()) == dict.fromkeys(keys, 2)
    if isinstance(engine.backend, Core):  # embedded: point reads of the keys (cheaper than scans)
        assert calls["store_get"] <= 300 + 3
    else:  # served: the keys of the transaction in one read
        assert calls["store_get"] <= 3 and calls["store_snapshot"] == 1
    app.close()


def test_windows_counted_in_batches_go_on_counting_record_by_record_before_a_commit(
        tstreams_embedded_engine: ts.Engine) -> None:
    """Batches keep their windows' counts in memory until the commit; a transaction with a
    bad record goes record by record and must count on from them (no commit in between)."""
    engine = tstreams_embedded_engine
    engine.create_stream("in")
    producer = engine.producer("in")
    producer.instant([pack_envelope(b"a", b"1", t, None) for t in (1, 2, 3)])
    producer.instant([pack_envelope(b"a", b"1", 4, None), pack_envelope(b"a", b"{oops", 5, None),
                      pack_envelope(b"a", b"1", 6, None)])
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
     .windowed_by(TimeWindows(100)).count(store="w").to_stream()
     .map(lambda wk, n: (wk.key, n)).to("out", key_serde="str", value_serde="json"))
    app = App(engine, application_id="a", topology=b.build(), on_record_error="skip", commit_interval_ms=60_000)
    app.run(until_idle=True)
    assert [json.loads(vb) for _, vb, _, _ in read_envelopes(engine, "out")] == [1, 2, 3, 4, 5]
    assert dict(app.store("w").all()) == {Windowed("a", 0, 100): 5}
    app.close()


def test_a_stream_read_by_two_nodes_gives_each_its_records_unchanged(tstreams_embedded_engine: ts.Engine) -> None:
    """select_key, map and map_values change the records of a batch in place: a stream with
    several readers hands each the records one at a time, so no reader sees another's change."""
    engine = tstreams_embedded_engine
    engine.create_stream("in")
    engine.producer("in").instant([json.dumps({"k": k, "n": n}).encode() for n, k in enumerate("abc")])
    b = StreamsBuilder()
    s = b.stream("in", value_serde="json")
    s.select_key(lambda _k, v: v["k"]).map_values(lambda v: v["n"] * 10).to("keyed", key_serde="str",
                                                                              value_serde="json")
    s.map(lambda _k, v: (v["k"] * 2, [v["n"]])).to("mapped", key_serde="str", value_serde="json")
    s.to("plain", value_serde="json")
    app = App(engine, application_id="a", topology=b.build())
    app.run(until_idle=True)

    def out(stream: str) -> list[tuple[Any, Any]]:
        return [(kb if kb is None else kb.decode(), json.loads(vb)) for kb, vb, _, _ in read_envelopes(engine, stream)]
    assert out("keyed") == [("a", 0), ("b", 10), ("c", 20)]
    assert out("mapped") == [("aa", [0]), ("bb", [1]), ("cc", [2])]
    assert out("plain") == [(None, {"k": "a", "n": 0}), (None, {"k": "b", "n": 1}), (None, {"k": "c", "n": 2})]
    app.close()
