"""Recovery from the last commit, in process and under hypothesis: the app fails at random
records (nothing after its last commit survives), a new App continues on the same engine,
and the output and stores equal the model as if nothing had failed."""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded.streams import App, SessionWindows, StreamsBuilder, TimeWindows, Windowed
from tstreams_embedded.streams.records import unpack_envelope
from tstreams_embedded.streams.serdes import MsgpackSerde, StrSerde, WindowedSerde


class Crash(Exception):
    pass


def topology(windows: Any, fail_at: set[int], seen: list[int]) -> Any:
    def maybe_fail(key: Any, value: Any) -> None:
        seen[0] += 1
        if seen[0] in fail_at:
            fail_at.discard(seen[0])
            raise Crash(seen[0])

    b = StreamsBuilder()
    s = b.stream("in", value_serde="json", timestamp=lambda k, v: v["t"]).peek(maybe_fail)
    grouped = s.group_by(lambda k, v: v["k"], key_serde="str")
    grouped.windowed_by(windows).count(store="w").suppress_until_window_closes().to_stream().to("out", key_serde="str")
    grouped.aggregate(lambda: 0, lambda k, v, total: total + v["t"], store="totals")
    return b.build()


def windowed_model(events: list[tuple[str, int]], size: int, grace: int) -> tuple[dict[Windowed, int], list[Windowed]]:
    counts: dict[Windowed, int] = {}
    observed = None
    for key, t in events:
        observed = t if observed is None else max(observed, t)
        start = t - t % size
        if start + size + grace > observed:
            w = Windowed(key, start, start + size)
            counts[w] = counts.get(w, 0) + 1
    assert observed is not None
    return counts, sorted((w for w in counts if w.end + grace <= observed), key=repr)


events_strategy = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 20), st.integers(0, 15)),
                           min_size=1, max_size=40).map(
    lambda raw: [(k, i * 4 + step - jitter) for i, (k, step, jitter) in enumerate(raw)])


@settings(max_examples=25, deadline=None)
@given(events=events_strategy, failures=st.sets(st.integers(1, 60), max_size=4), commit_records=st.integers(1, 7),
       txn_size=st.integers(1, 4))
def test_failures_at_random_records_change_nothing(events: list[tuple[str, int]], failures: set[int],
                                                   commit_records: int, txn_size: int) -> None:
    counts, closed = windowed_model(events, 10, 5)
    with tempfile.TemporaryDirectory() as d, ts.open(d, durability="async", compaction_interval=None) as engine:
        engine.create_stream("in")
        p = engine.producer("in", partition=0)
        for i in range(0, len(events), txn_size):
            p.instant([json.dumps({"k": k, "t": t}).encode() for k, t in events[i:i + txn_size]])
        fail_at = set(failures)
        seen = [0]
        topo = topology(TimeWindows(10, grace_ms=5, retention_ms=10**6), fail_at, seen)
        crashes = 0
        for _ in range(len(failures) + 1):
            try:
                App(engine, application_id="r", topology=topo, commit_records=commit_records).run()
                break
            except Crash:
                crashes += 1
        assert crashes == sum(1 for f in failures if f <= seen[0])  # every failure point reached did fail
        out = []
        for txn in engine.backend.transactions_range("out", 0, 0, 2**63 - 1):
            for item in txn.items:
                env = unpack_envelope(item)
                assert env is not None
                out.append((WindowedSerde(StrSerde()).deserialize(env[0]), MsgpackSerde().deserialize(env[1])))
        assert sorted(out, key=repr) == [(w, counts[w]) for w in closed]
        app = App(engine, application_id="r", topology=topo)
        assert app.store("w").all() == counts
        totals: dict[str, int] = defaultdict(int)
        for k, t in events:
            totals[k] += t
        assert app.store("totals").all() == dict(totals)


@settings(max_examples=15, deadline=None)
@given(events=events_strategy, failures=st.sets(st.integers(1, 60), max_size=3))
def test_sessions_recover_their_open_sessions(events: list[tuple[str, int]], failures: set[int]) -> None:
    with tempfile.TemporaryDirectory() as d, ts.open(d, durability="async", compaction_interval=None) as engine:
        engine.create_stream("in")
        p = engine.producer("in", partition=0)
        for k, t in events:
            p.instant([json.dumps({"k": k, "t": t}).encode()])
        reference = topology(SessionWindows(gap_ms=6, grace_ms=8, retention_ms=10**6), set(), [0])
        App(engine, application_id="clean", topology=reference).run()
        fail_at = set(failures)
        topo = topology(SessionWindows(gap_ms=6, grace_ms=8, retention_ms=10**6), fail_at, [0])
        for _ in range(len(failures) + 1):
            try:
                App(engine, application_id="crashy", topology=topo, commit_records=2).run()
                break
            except Crash:
                continue
        clean = App(engine, application_id="clean", topology=reference).store("w").all()
        crashy = App(engine, application_id="crashy", topology=topo).store("w").all()
        assert crashy == clean
