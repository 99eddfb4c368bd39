"""Joins: stream–table, stream–global-table, and the windowed stream–stream join against a
brute-force model; co-partitioning errors."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.streams import App, JoinWindows, StreamsBuilder, TestDriver
from tstreams_embedded.streams.records import pack_envelope, partition_of
from tstreams_embedded.streams.serdes import serde

from .harness import read_envelopes


def test_stream_table_join_and_left_join_see_the_table_as_of_each_record() -> None:
    b = StreamsBuilder()
    users = b.table("users", key_serde="str", value_serde="json")
    clicks = b.stream("clicks", key_serde="str", value_serde="json")
    clicks.join(users, lambda c, u: [c["page"], u["name"]]).to("inner", key_serde="str", value_serde="json")
    clicks.left_join(users, lambda c, u: [c["page"], u and u["name"]]).to("left", key_serde="str",
                                                                           value_serde="json")
    steps: list[tuple[str, str, Any]] = [
        ("clicks", "ann", {"page": "/0"}),      # no user yet
        ("users", "ann", {"name": "Ann"}),
        ("clicks", "ann", {"page": "/1"}),
        ("clicks", "bob", {"page": "/2"}),      # no such user
        ("users", "ann", {"name": "Anna"}),     # a table update triggers nothing
        ("clicks", "ann", {"page": "/3"}),
        ("users", "ann", None),                 # deleted
        ("clicks", "ann", {"page": "/4"}),
    ]
    with TestDriver(b.build(), partitions=2) as d:
        for i, (stream, key, value) in enumerate(steps):
            d.pipe(stream, key, value, i)
            d.process()
        inner = [(r.key, r.value, r.timestamp) for r in d.read_output("inner")]
        left = sorted((r.timestamp, r.key, r.value) for r in d.read_output("left"))
    assert inner == [("ann", ["/1", "Ann"], 2), ("ann", ["/3", "Anna"], 5)]
    assert left == [(0, "ann", ["/0", None]), (2, "ann", ["/1", "Ann"]), (3, "bob", ["/2", None]),
                    (5, "ann", ["/3", "Anna"]), (7, "ann", ["/4", None])]


def test_stream_global_table_join_by_key_selector_on_any_partition() -> None:
    b = StreamsBuilder()
    countries = b.global_table("countries", key_serde="str", value_serde="str")
    orders = b.stream("orders", key_serde="str", value_serde="json")
    orders.join(countries, lambda o, c: c, key_selector=lambda k, o: o["cc"]).to("named", key_serde="str",
                                                                                   value_serde="str")
    orders.left_join(countries, lambda o, c: c, key_selector=lambda k, o: o["cc"]).to("left", key_serde="str",
                                                                                        value_serde="str")
    with TestDriver(b.build(), partitions=3) as d:
        for cc, name in [("de", "Germany"), ("fr", "France"), ("it", "Italy")]:
            d.pipe("countries", cc, name, 0)
        d.process()
        for i, (user, cc) in enumerate([("u1", "de"), ("u2", "fr"), ("u3", "xx"), ("u4", "it"), ("u5", "de")]):
            d.pipe("orders", user, {"cc": cc}, i + 1)
        assert sorted((r.key, r.value) for r in d.read_output("named")) == [
            ("u1", "Germany"), ("u2", "France"), ("u4", "Italy"), ("u5", "Germany")]
        assert sorted((r.key, r.value) for r in d.read_output("left")) == [
            ("u1", "Germany"), ("u2", "France"), ("u3", None), ("u4", "Italy"), ("u5", "Germany")]
        d.pipe("countries", "de", None, 9)  # tombstone
        d.pipe("countries", "xx", "Utopia", 9)
        d.process()
        d.pipe("orders", "u6", {"cc": "de"}, 10)
        d.pipe("orders", "u7", {"cc": "xx"}, 11)
        assert sorted((r.key, r.value) for r in d.read_output("named")) == [("u7", "Utopia")]
        assert d.store("countries-global").all() == {"fr": "France", "it": "Italy", "xx": "Utopia"}


def test_global_table_is_bootstrapped_before_processing_and_followed_while_running(tmp_path: Any) -> None:
    b = StreamsBuilder()
    rates = b.global_table("rates", key_serde="str", value_serde="json")
    (b.stream("payments", key_serde="str", value_serde="json")
        .join(rates, lambda p, r: p["amount"] * r, key_selector=lambda k, p: p["cur"])
        .to("eur", key_serde="str", value_serde="json"))
    from tstreams_embedded.streams import send_records
    from tstreams_embedded.testing import eventually

    with ts.open(str(tmp_path), durability="async") as engine:
        engine.create_stream("rates", partitions=2)
        engine.create_stream("payments", partitions=2)
        send_records(engine, "rates", [("usd", 2, 0), ("gbp", 3, 0)], key_serde="str", value_serde="json")
        # the payments are written BEFORE the app starts: the bootstrap must come first anyway
        send_records(engine, "payments", [("p1", {"amount": 5, "cur": "usd"}, 1)], key_serde="str",
                     value_serde="json")
        app = App(engine, application_id="fx", topology=b.build()).start()
        try:
            def outputs() -> list[Any]:
                return sorted(_read(engine, "eur"))
            eventually(lambda: outputs() == [10], timeout=60)
            send_records(engine, "rates", [("chf", 7, 2)], key_serde="str", value_serde="json")
            eventually(lambda: app.store("rates-global").get("chf") == 7, timeout=60)
            send_records(engine, "payments", [("p2", {"amount": 1, "cur": "chf"}, 3)], key_serde="str",
                         value_serde="json")
            eventually(lambda: outputs() == [7, 10], timeout=60)
        finally:
            app.stop()


def _read(engine: Any, stream: str) -> list[Any]:
    out = []
    for _, vb, _, _ in read_envelopes(engine, stream):
        assert vb is not None
        out.append(serde("json").deserialize(vb))
    return out


def test_a_join_after_a_key_change_asks_for_repartition() -> None:
    b = StreamsBuilder()
    users = b.table("users")
    clicks = b.stream("clicks").select_key(lambda k, v: v)
    with pytest.raises(errors.TopologyError, match=r"repartition\(\)"):
        clicks.join(users, lambda c, u: u)
    with pytest.raises(errors.TopologyError, match=r"repartition\(\)"):
        b.stream("other").join(clicks, lambda a, c: a, JoinWindows.of(5))
    clicks.repartition().join(users, lambda c, u: u).to("ok")  # the hint works
    with pytest.raises(errors.TopologyError, match="JoinWindows"):
        b.stream("third").join(b.stream("fourth"), lambda a, c: a)
    with pytest.raises(errors.TopologyError, match="key_selector"):
        b.stream("fifth").join(b.global_table("g"), lambda a, c: a)
    with pytest.raises(errors.InvalidArgument):
        JoinWindows(-1, 0)


def test_stream_table_join_of_differently_partitioned_streams_fails_at_start() -> None:
    b = StreamsBuilder()
    b.stream("clicks").join(b.table("users"), lambda c, u: u).to("out")
    with ts.open(tempfile.mkdtemp(), durability="async") as engine:
        engine.create_stream("clicks", partitions=4)
        engine.create_stream("users", partitions=2)
        with pytest.raises(errors.TopologyError, match="co-partitioned"):
            App(engine, application_id="j", topology=b.build()).run()


# -- the windowed stream–stream join against a brute-force model -------------------------------------

def model_stream_join(events: list[tuple[int, str, int, int]], w: JoinWindows, kind: str
                      ) -> list[tuple[str, tuple[Any, Any], int]]:
    """Every output (key, (left, right), timestamp) of the join of ``events`` (side, key,
    time, value), computed from the accepted records of the whole input."""
    now: int | None = None
    accepted: list[list[tuple[str, int, int]]] = [[], []]
    for side, key, t, value in events:
        now = t if now is None else max(now, t)
        own_after = w.after_ms if side == 0 else w.before_ms
        if t + own_after + w.grace_ms >= now:
            accepted[side].append((key, t, value))
    assert now is not None
    out = []
    matched: list[set[int]] = [set(), set()]
    for i, (lk, lt, lv) in enumerate(accepted[0]):
        for j, (rk, rt, rv) in enumerate(accepted[1]):
            if lk == rk and lt - w.before_ms <= rt <= lt + w.after_ms:
                out.append((lk, (lv, rv), max(lt, rt)))
                matched[0].add(i)
                matched[1].add(j)
    reach = w.before_ms + w.after_ms + w.grace_ms
    for side in (0, 1):
        if side == 0 and kind == "inner" or side == 1 and kind != "outer":
            continue
        for i, (k, t, v) in enumerate(accepted[side]):
            if i not in matched[side] and t + reach < now:
                out.append((k, (v, None) if side == 0 else (None, v), t))
    return sorted(out, key=repr)


join_events = st.lists(
    st.tuples(st.integers(0, 1), st.sampled_from(["a", "b"]), st.integers(0, 6), st.integers(0, 12)),
    min_size=1, max_size=40,
).map(lambda raw: [(side, key, i * 2 + step - jitter, i) for i, (side, key, step, jitter) in enumerate(raw)])


@settings(max_examples=60, deadline=None)
@given(events=join_events, before=st.integers(0, 8), after=st.integers(0, 8), grace=st.sampled_from([0, 3, 20]),
       kind=st.sampled_from(["inner", "left", "outer"]))
def test_windowed_stream_stream_join_equals_the_brute_force_model(
        events: list[tuple[int, str, int, int]], before: int, after: int, grace: int, kind: str) -> None:
    w = JoinWindows(before, after, grace)
    b = StreamsBuilder()
    left = b.stream("left", key_serde="str", value_serde="json")
    right = b.stream("right", key_serde="str", value_serde="json")
    method = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[kind]
    method(right, lambda lv, rv: [lv, rv], w).to("out", key_serde="str", value_serde="json")
    with TestDriver(b.build()) as d:
        for side, key, t, value in events:
            d.pipe("left" if side == 0 else "right", key, value, t)
            d.process()  # one record at a time: the arrival order is the model's
        got = sorted(((r.key, tuple(r.value), r.timestamp) for r in d.read_output("out")), key=repr)
    assert got == model_stream_join(events, w, kind)


def test_windowed_join_on_two_tasks_joins_every_pair_of_a_key() -> None:
    b = StreamsBuilder()
    left = b.stream("left", key_serde="str", value_serde="json")
    right = b.stream("right", key_serde="str", value_serde="json")
    left.join(right, lambda lv, rv: [lv, rv], JoinWindows(3, 3, 1_000)).to("out", key_serde="str",
                                                                            value_serde="json")
    keys = ["a", "b", "c", "d", "e"]
    events = [(i % 2, keys[i * 7 % 5], i * 2 % 13, i) for i in range(60)]
    expected = model_stream_join(events, JoinWindows(3, 3, 1_000), "inner")
    with TestDriver(b.build(), partitions=2) as d:
        for side, key, t, value in events:
            d.pipe("left" if side == 0 else "right", key, value, t)
            d.process()
        got = sorted(((r.key, tuple(r.value), r.timestamp) for r in d.read_output("out")), key=repr)
    assert len(expected) > 50 and got == expected


def test_a_missing_global_table_stream_is_reported_at_start(tmp_path: Any) -> None:
    b = StreamsBuilder()
    b.stream("orders").join(b.global_table("nowhere"), lambda o, c: c, key_selector=lambda k, o: o).to("out")
    with ts.open(str(tmp_path), durability="async") as engine:
        engine.create_stream("orders")
        with pytest.raises(errors.StreamNotFound, match="nowhere"):
            App(engine, application_id="g", topology=b.build()).run()


def test_windowed_left_join_continues_across_an_app_restart(tmp_path: Any) -> None:
    """Buffers, the index (reloaded into memory at start) and stream time survive a restart:
    two Apps one after the other give the model's output of the whole input."""
    from tstreams_embedded.streams import send_records

    w = JoinWindows(4, 6, 2)
    b = StreamsBuilder()
    left = b.stream("left", key_serde="str", value_serde="json")
    left.left_join(b.stream("right", key_serde="str", value_serde="json"), lambda lv, rv: [lv, rv], w).to(
        "out", key_serde="str", value_serde="json")
    topology = b.build()
    events = [(i % 3 % 2, "abc"[i * 5 % 3], i * 3 - (i * 7 % 5), i) for i in range(80)]
    with ts.open(str(tmp_path), durability="async") as engine:
        engine.create_stream("left")
        engine.create_stream("right")
        for half in (events[:40], events[40:]):
            app = App(engine, application_id="restart", topology=topology)
            for side, key, t, value in half:
                send_records(engine, "left" if side == 0 else "right", [(key, value, t)], key_serde="str",
                             value_serde="json")
                app.run()
            app.close()
        got = sorted(((r[0], tuple(r[1]), r[2]) for r in _read_records(engine, "out")), key=repr)
    expected = model_stream_join(events, w, "left")
    assert any(v[1] is None for _, v, _ in expected) and got == expected


def _read_records(engine: Any, stream: str) -> list[tuple[Any, Any, int]]:
    assert engine.has_stream(stream)
    out = []
    for kb, vb, t, _ in read_envelopes(engine, stream):
        assert kb is not None and vb is not None
        out.append((serde("str").deserialize(kb), serde("json").deserialize(vb), t))
    return out


# -- the order of a task's sources: timestamps, tables first, max_task_idle_ms ----------------------

def _envelope(stream: str, key: str, value: Any, timestamp: int, partitions: int = 1) -> O.Instant:
    """One transaction holding one record (as ``send_records`` writes it), as an operation."""
    kb, vb = serde("str").serialize(key), serde("json").serialize(value)
    return O.Instant(stream, partition_of(kb, partitions), O.pack_items([pack_envelope(kb, vb, timestamp, None)]))


def _clicks_join_users(left: bool = False) -> StreamsBuilder:
    b = StreamsBuilder()
    users = b.table("users", key_serde="str", value_serde="json")
    clicks = b.stream("clicks", key_serde="str", value_serde="json")
    joined = clicks.left_join(users, lambda c, u: [c, u]) if left else clicks.join(users, lambda c, u: [c, u])
    joined.to("out", key_serde="str", value_serde="json")
    return b


def _txn_ids(engine: Any, stream: str, partition: int = 0) -> list[int]:
    return [t.id for t in engine.backend.transactions_range(stream, partition, 0, 2**63 - 1)]


def test_a_click_joins_a_row_written_earlier_in_the_same_millisecond() -> None:
    """The audit's repro made deterministic: five rows written in one engine write, then a
    click for the fifth in a later write, all in one millisecond of the engine's clock. The
    partitions number their transactions by clock and counter each, so the click's ID is
    below the fifth row's; the task still takes the rows first (their timestamps are not
    later than the click's), and the click is joined."""
    with ts.open(tempfile.mkdtemp(), durability="async", clock=lambda: 1_700_000_000_000,
                 compaction_interval=None) as engine:
        engine.create_stream("users", partitions=1)
        engine.create_stream("clicks", partitions=1)
        engine.backend.submit([_envelope("users", f"u{i}", {"name": f"N{i}"}, 0) for i in range(5)])
        engine.backend.submit([_envelope("clicks", "u4", {"page": "/a"}, 1)])
        assert _txn_ids(engine, "clicks")[0] < _txn_ids(engine, "users")[-1]  # the IDs interleave
        App(engine, application_id="a", topology=_clicks_join_users().build()).run()
        assert _read(engine, "out") == [[{"page": "/a"}, {"name": "N4"}]]


@pytest.mark.parametrize("click_ts, joined", [(4, None), (5, "new"), (6, "new")])
def test_a_click_sees_the_rows_with_timestamps_up_to_its_own_tables_first_on_ties(click_ts: int,
                                                                                   joined: str | None) -> None:
    """Kafka Streams' rule (KIP-914): a stream record joins the table row of the largest
    timestamp <= its own, whatever the transaction IDs (here the click is written first)."""
    with ts.open(tempfile.mkdtemp(), durability="async", clock=lambda: 1_700_000_000_000,
                 compaction_interval=None) as engine:
        engine.create_stream("users", partitions=1)
        engine.create_stream("clicks", partitions=1)
        engine.backend.submit([_envelope("clicks", "ann", "c", click_ts)])
        engine.backend.submit([_envelope("users", "ann", "old", 0), _envelope("users", "ann", "new", 5)])
        assert _txn_ids(engine, "clicks")[0] <= _txn_ids(engine, "users")[0]
        App(engine, application_id="a", topology=_clicks_join_users(left=True).build()).run()
        assert _read(engine, "out") == [["c", "old" if joined is None else joined]]


@st.composite
def interleavings(draw: st.DrawFn) -> tuple[list[tuple[str, str, int, Any]], list[int]]:
    """Writes ``(stream, key, timestamp, value)`` to "users" (a table; None deletes) and
    "clicks", each stream's in timestamp order, interleaved at random, and the places where
    one engine write ends and the next begins."""
    def writes(stream: str, values: st.SearchStrategy[Any]) -> list[tuple[str, str, int, Any]]:
        items = draw(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 12), values),
                              max_size=14))
        return [(stream, k, t, v) for k, t, v in sorted(items, key=lambda e: e[1])]

    users = writes("users", st.one_of(st.none(), st.integers(0, 99)))
    clicks = writes("clicks", st.integers(100, 199))
    picks = draw(st.permutations([0] * len(users) + [1] * len(clicks)))
    sources = [iter(users), iter(clicks)]
    merged = [next(sources[p]) for p in picks]
    cuts = draw(st.lists(st.integers(0, len(merged)), max_size=4))
    return merged, sorted(set(cuts))


@settings(max_examples=30, deadline=None)
@given(interleavings(), st.booleans())
def test_every_click_joins_the_latest_row_not_later_than_it(
        case: tuple[list[tuple[str, str, int, Any]], list[int]], frozen_clock: bool) -> None:
    """Whatever the interleaving of the writes and their transaction IDs (a frozen engine
    clock numbers each partition's transactions by a counter alone), each click joins exactly
    the row of its key with the largest timestamp <= its own (the last written of equal
    ones), as in Kafka Streams with versioned tables (KIP-914), when all is readable at once."""
    writes, cuts = case
    expected = []
    for stream, key, t, value in writes:
        if stream == "clicks":
            rows = [(rt, j, v) for j, (s, k, rt, v) in enumerate(writes) if s == "users" and k == key and rt <= t]
            row = max(rows)[2] if rows else None
            if row is not None:
                expected.append((key, [value, row]))
    clock: dict[str, Any] = {"clock": lambda: 1_700_000_000_000} if frozen_clock else {}
    with ts.open(tempfile.mkdtemp(), durability="async", compaction_interval=None, **clock) as engine:
        engine.create_stream("users", partitions=2)
        engine.create_stream("clicks", partitions=2)
        ops = [_envelope(stream, key, value, t, 2) for stream, key, t, value in writes]
        for start, end in zip([0, *cuts], [*cuts, len(ops)], strict=True):
            if start < end:
                engine.backend.submit(ops[start:end])
        App(engine, application_id="a", topology=_clicks_join_users().build()).run()
        out = sorted((k, v) for k, v in _read_keyed(engine, "out"))
    assert out == sorted(expected)


def _read_keyed(engine: Any, stream: str) -> list[tuple[Any, Any]]:
    out = []
    for kb, vb, _, _ in read_envelopes(engine, stream):
        assert kb is not None and vb is not None
        out.append((serde("str").deserialize(kb), serde("json").deserialize(vb)))
    return out


def test_max_task_idle_ms_waits_for_a_table_transaction_still_open() -> None:
    """A table row in a transaction opened before a click was written, checkpointed after:
    with ``max_task_idle_ms`` the task waits for it (on the app's clock) and joins it; past
    the wait, or without it, the click goes on without the row. As in Kafka Streams, the
    task waits whenever a source runs dry while another has data."""
    now = [0]
    with ts.open(tempfile.mkdtemp(), durability="async", compaction_interval=None) as engine:
        engine.create_stream("users", partitions=1)
        engine.create_stream("clicks", partitions=1)
        kb = serde("str").serialize("ann")

        def open_row(name: str) -> Any:
            txn = engine.producer("users").new_transaction(0)
            txn.send(pack_envelope(kb, serde("json").serialize(name), 1, None))
            return txn

        def click(page: str) -> None:
            engine.backend.submit([_envelope("clicks", "ann", page, 2)])

        def app(idle: int) -> App:
            return App(engine, application_id=f"idle-{idle}", topology=_clicks_join_users(left=True).build(),
                       clock=lambda: now[0], max_task_idle_ms=idle)

        waiting, impatient = app(1_000), app(0)
        row = open_row("Ann")
        click("/a")
        impatient.run()
        assert _read(engine, "out") == [["/a", None]]  # the default: no wait
        waiting.run()
        assert _read(engine, "out") == [["/a", None]]  # waiting: nothing processed yet
        now[0] += 999
        waiting.run()
        assert len(_read(engine, "out")) == 1
        row.checkpoint()
        waiting.run()  # the row (timestamp 1 <= the click's 2), then "users" is empty again: a new wait
        assert len(_read(engine, "out")) == 1
        now[0] += 1_000
        waiting.run()
        assert _read(engine, "out")[1:] == [["/a", "Ann"]]

        late = open_row("Anna")
        click("/b")
        waiting.run()
        now[0] += 1_000
        waiting.run()  # the wait is over: on without the row
        assert _read(engine, "out")[-1] == ["/b", "Ann"]
        late.checkpoint()
        waiting.run()
        impatient.run()
        waiting.close()
        impatient.close()


@pytest.mark.parametrize("bad", [-1, True, 1.5, "10", None])
def test_max_task_idle_ms_must_be_a_non_negative_integer(bad: Any) -> None:
    b = _clicks_join_users()
    with ts.open(tempfile.mkdtemp(), durability="async") as engine:
        with pytest.raises(errors.InvalidArgument, match="max_task_idle_ms"):
            App(engine, application_id="a", topology=b.build(), max_task_idle_ms=bad)


# -- co-partitioning: the key serdes ---------------------------------------------------------------

def test_joined_sides_must_serialize_keys_alike() -> None:
    """Partitions are chosen by the key's bytes: a "str" key and a "msgpack" key of the same
    string land on different partitions, so the topology is refused with a hint."""
    b = StreamsBuilder()
    users = b.table("users", key_serde="msgpack", value_serde="json")
    clicks = b.stream("clicks", key_serde="str", value_serde="json")
    with pytest.raises(errors.TopologyError, match=r"serialize keys differently \('clicks': str, 'users': msgpack\)"
                                                   r".*same key_serde.*repartition\(key_serde="):
        clicks.join(users, lambda c, u: u)
    with pytest.raises(errors.TopologyError, match="key_serde"):
        clicks.left_join(users, lambda c, u: u)
    with pytest.raises(errors.TopologyError, match="key_serde"):
        clicks.join(b.stream("views", key_serde="json"), lambda c, v: v, JoinWindows.of(5))
    with pytest.raises(errors.TopologyError, match="key_serde"):
        users.join(b.table("plans", key_serde="str"), lambda u, p: p)
    with pytest.raises(errors.TopologyError, match="key_serde"):  # a merge of differently keyed streams
        b.stream("more-clicks", key_serde="msgpack").merge(clicks).join(users, lambda c, u: u)
    users.join(b.table("tiers", key_serde="msgpack"), lambda u, p: p)  # alike: accepted

    # the hint works: repartitioned with the table's key serde, every key is joined on 4 partitions
    clicks.repartition(key_serde="msgpack", value_serde="json").join(users, lambda c, u: u).to(
        "out", value_serde="json")
    keys = [f"u{i}" for i in range(8)]
    with TestDriver(b.build(), partitions=4) as d:
        for k in keys:
            d.pipe("users", k, {"n": k}, 0)
        d.process()
        for k in keys:
            d.pipe("clicks", k, {}, 1)
        assert sorted(r.value["n"] for r in d.read_output("out")) == keys
