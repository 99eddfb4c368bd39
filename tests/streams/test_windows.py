"""Windowed aggregations against brute-force models, calendar windows across daylight
saving, lateness, suppression and retention."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tstreams_embedded import errors
from tstreams_embedded.streams import (
    CalendarWindows,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TestDriver,
    TimeWindows,
    Windowed,
)

KEYS = ["a", "b", "c"]


def windowed_count(windows: Any, suppress: bool, late_to: str | None = None) -> StreamsBuilder:
    b = StreamsBuilder()
    table = (b.stream("in", key_serde="str", value_serde="json")
             .group_by_key(key_serde="str")
             .windowed_by(windows, late_to=late_to)
             .count(store="counts"))
    if suppress:
        table = table.suppress_until_window_closes()
    table.to_stream().to("out", key_serde="str")
    return b


def model_time_windows(events: list[tuple[str, int]], size: int, advance: int, grace: int
                       ) -> tuple[dict[Windowed, int], list[Windowed], int, int]:
    """(counts of accepted records per window, windows closed at the end in close order,
    late records, final stream time): computed record by record, windows by brute force."""
    counts: dict[Windowed, int] = {}
    observed = None
    late = 0
    for key, t in events:
        observed = t if observed is None else max(observed, t)
        accepted = False  # a record is late only when every window of it is closed
        k = (t - size) // advance
        while k * advance <= t:
            s = k * advance
            if s <= t < s + size and s + size + grace > observed:
                w = Windowed(key, s, s + size)
                counts[w] = counts.get(w, 0) + 1
                accepted = True
            k += 1
        late += not accepted
    assert observed is not None
    closed = sorted((w for w in counts if w.end + grace <= observed), key=lambda w: (w.end, w.start, w.key))
    return counts, closed, late, observed


events_strategy = st.lists(
    st.tuples(st.sampled_from(KEYS), st.integers(0, 60), st.integers(0, 25)), min_size=1, max_size=40
).map(lambda raw: [(k, i * 3 + step - jitter) for i, (k, step, jitter) in enumerate(raw)])


@settings(max_examples=40, deadline=None)
@given(events=events_strategy, size=st.sampled_from([10, 25]), hop=st.sampled_from([1, 2, 5]),
       grace=st.sampled_from([0, 7, 30]))
def test_time_windows_with_disorder_and_lateness_equal_the_model(events: list[tuple[str, int]], size: int, hop: int,
                                                                  grace: int) -> None:
    advance = size // hop if size % hop == 0 else size
    windows = TimeWindows(size_ms=size, grace_ms=grace, advance_ms=advance, retention_ms=10**9)
    counts, closed, late, _ = model_time_windows(events, size, advance, grace)
    with TestDriver(windowed_count(windows, suppress=True).build()) as d:
        for key, t in events:
            d.pipe("in", key, {"t": t}, t)
        out = d.read_output("out")
        assert [(r.key, r.value) for r in out] == [(w, counts[w]) for w in closed]  # each closed window once
        assert d.store("counts").all() == counts
        assert d.metrics.get("late_dropped", 0) == late


@settings(max_examples=25, deadline=None)
@given(events=events_strategy, grace=st.sampled_from([0, 10]))
def test_updates_without_suppression_end_at_the_model(events: list[tuple[str, int]], grace: int) -> None:
    counts, _, _, _ = model_time_windows(events, 10, 10, grace)
    with TestDriver(windowed_count(TimeWindows(10, grace_ms=grace, retention_ms=10**9), suppress=False).build()) as d:
        for key, t in events:
            d.pipe("in", key, {"t": t}, t)
        out = d.read_output("out")
        last: dict[Windowed, int] = {}
        for r in out:
            assert r.value == last.get(r.key, 0) + 1  # every update, in order
            last[r.key] = r.value
        assert last == counts


def model_sessions(events: list[tuple[str, int]], gap: int, grace: int) -> tuple[dict[Windowed, int], list[Windowed]]:
    """Sessions by brute force: open sessions per key merge with a record within ``gap`` of
    them; a session closes (and no longer merges) once end + grace <= stream time."""
    open_: dict[str, list[list[int]]] = defaultdict(list)  # key -> [start, end, count]
    final: list[Windowed] = []
    results: dict[Windowed, int] = {}
    observed = None
    for key, t in events:
        observed = t if observed is None else max(observed, t)
        hits = [s for s in open_[key] if s[0] - gap <= t <= s[1] - 1 + gap]
        start = min([t] + [s[0] for s in hits])
        end = max([t + 1] + [s[1] for s in hits])
        if end + grace > observed:
            for s in hits:
                open_[key].remove(s)
                results.pop(Windowed(key, s[0], s[1]), None)
            n = 1 + sum(s[2] for s in hits)
            open_[key].append([start, end, n])
            results[Windowed(key, start, end)] = n
        for k in KEYS:
            for s in list(open_[k]):
                if s[1] + grace <= observed:
                    open_[k].remove(s)
                    final.append(Windowed(k, s[0], s[1]))
    return results, final


@settings(max_examples=30, deadline=None)
@given(events=events_strategy, gap=st.sampled_from([3, 10]), grace=st.sampled_from([0, 12]))
def test_session_windows_equal_the_model(events: list[tuple[str, int]], gap: int, grace: int) -> None:
    results, final = model_sessions(events, gap, grace)
    with TestDriver(windowed_count(SessionWindows(gap_ms=gap, grace_ms=grace, retention_ms=10**9),
                                   suppress=True).build()) as d:
        for key, t in events:
            d.pipe("in", key, {"t": t}, t)
        out = d.read_output("out")
        assert sorted((r.key for r in out), key=repr) == sorted(final, key=repr)
        assert all(r.value == results[r.key] for r in out)
        assert d.store("counts").all() == results


@settings(max_examples=25, deadline=None)
@given(events=events_strategy, size=st.sampled_from([5, 20]))
def test_sliding_windows_equal_the_model(events: list[tuple[str, int]], size: int) -> None:
    expected = {}
    for key, t in events:
        expected[Windowed(key, t - size, t + 1)] = sum(1 for k, u in events if k == key and t - size <= u <= t)
    with TestDriver(windowed_count(SlidingWindows(size_ms=size, grace_ms=10**6), suppress=False).build()) as d:
        for key, t in events:
            d.pipe("in", key, {"t": t}, t)
        assert d.store("counts").all() == expected


def test_late_records_go_to_the_side_output() -> None:
    with TestDriver(windowed_count(TimeWindows(10, grace_ms=5), suppress=True, late_to="late").build()) as d:
        for key, t in [("a", 1), ("a", 20), ("b", 3), ("a", 14), ("b", 9)]:
            d.pipe("in", key, {"t": t}, t)
        late = d.read_output("late")
        assert [(r.key, r.value, r.timestamp) for r in late] == [("b", {"t": 3}, 3), ("b", {"t": 9}, 9)]
        assert d.metrics["late_redirected"] == 2 and "late_dropped" not in d.metrics
        assert [(r.key, r.value) for r in d.read_output("out")] == [(Windowed("a", 0, 10), 1)]


def test_retention_deletes_expired_windows() -> None:
    with TestDriver(windowed_count(TimeWindows(10, retention_ms=40), suppress=False).build()) as d:
        for t in range(0, 200, 5):
            d.pipe("in", "k", {"t": t}, t)
        kept = sorted(w.start for w in d.store("counts").all())
        # stream time 195: windows with end + 40 <= 195 may be gone; the last ones are kept
        assert kept[-1] == 190 and kept[0] >= 190 - 40 - 40
        assert all(w.end + 40 > 195 - 40 for w in d.store("counts").all())


BERLIN = ZoneInfo("Europe/Berlin")


def utc_ms(*args: int) -> int:
    return int(dt.datetime(*args, tzinfo=dt.timezone.utc).timestamp() * 1000)


@pytest.mark.parametrize("tz, local_day, start_utc, hours", [
    ("Europe/Berlin", (2026, 3, 29), (2026, 3, 28, 23), 23),   # spring forward: a 23-hour day
    ("Europe/Berlin", (2026, 10, 25), (2026, 10, 24, 22), 25),  # fall back: a 25-hour day
    ("Europe/Berlin", (2026, 7, 1), (2026, 6, 30, 22), 24),
    ("Asia/Kolkata", (2026, 3, 29), (2026, 3, 28, 18, 30), 24),  # UTC+5:30, no DST
    ("Australia/Adelaide", (2026, 4, 5), (2026, 4, 4, 13, 30), 25),  # UTC+10:30 -> +9:30
    ("Australia/Adelaide", (2026, 10, 4), (2026, 10, 3, 14, 30), 23),  # UTC+9:30 -> +10:30
])
def test_calendar_days_across_daylight_saving(tz: str, local_day: tuple[int, int, int], start_utc: tuple[int, ...],
                                              hours: int) -> None:
    start = utc_ms(*start_utc)
    end = start + hours * 3_600_000
    zone = ZoneInfo(tz)
    # events: the first and last millisecond of the local day, noon, and the neighbours
    noon = int(dt.datetime(*local_day, 12, tzinfo=zone).timestamp() * 1000)
    events = [("k", start - 1), ("k", start), ("k", noon), ("k", end - 1), ("k", end)]
    with TestDriver(windowed_count(CalendarWindows("day", tz=tz), suppress=False).build()) as d:
        for key, t in events:
            d.pipe("in", key, {"t": t}, t)
        got = d.store("counts").all()
    assert got[Windowed("k", start, end)] == 3
    assert sum(got.values()) == 5 and len(got) == 3


def test_calendar_weeks_and_months() -> None:
    assert CalendarWindows("week", tz="Europe/Berlin").windows_for(utc_ms(2026, 3, 29, 12)) == [
        (utc_ms(2026, 3, 22, 23), utc_ms(2026, 3, 29, 22))]  # Monday 23 March to Monday 30 March, 7 days - 1 hour
    assert CalendarWindows("month", tz="Europe/Berlin").windows_for(utc_ms(2026, 10, 31, 23, 30)) == [
        (utc_ms(2026, 10, 31, 23), utc_ms(2026, 11, 30, 23))]  # already November in Berlin
    assert CalendarWindows("month", tz="Asia/Kolkata").windows_for(utc_ms(2026, 2, 10)) == [
        (utc_ms(2026, 1, 31, 18, 30), utc_ms(2026, 2, 28, 18, 30))]


def test_window_arguments() -> None:
    with pytest.raises(errors.InvalidArgument):
        TimeWindows(0)
    with pytest.raises(errors.InvalidArgument):
        TimeWindows(10, advance_ms=20)
    with pytest.raises(errors.InvalidArgument):
        TimeWindows(10, grace_ms=-1)
    with pytest.raises(errors.InvalidArgument):
        TimeWindows(10, grace_ms=5, retention_ms=14)
    with pytest.raises(errors.InvalidArgument):
        CalendarWindows("year")
    with pytest.raises(errors.InvalidArgument):
        CalendarWindows("day", tz="Mars/Olympus")
    with pytest.raises(errors.InvalidArgument):
        SessionWindows(gap_ms=True)  # type: ignore[arg-type]


def test_hopping_windows_count_each_record_in_every_window() -> None:
    with TestDriver(windowed_count(TimeWindows(10, advance_ms=5, retention_ms=1000), suppress=False).build()) as d:
        for t in (0, 4, 7, 12):
            d.pipe("in", "k", {"t": t}, t)
        got = d.store("counts").all()
    starts = Counter({Windowed("k", -5, 5): 2, Windowed("k", 0, 10): 3, Windowed("k", 5, 15): 2,
                      Windowed("k", 10, 20): 1})
    assert got == dict(starts)


@settings(max_examples=20, deadline=None)
@given(events=events_strategy)
def test_windowed_reduce_and_aggregate_equal_the_model(events: list[tuple[str, int]]) -> None:
    windows = TimeWindows(20, grace_ms=10, advance_ms=10, retention_ms=10**9)
    b = StreamsBuilder()
    grouped = b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str").windowed_by(windows)
    grouped.reduce(lambda a, v: {"t": max(a["t"], v["t"])}, store="latest")
    grouped.aggregate(list, lambda k, v, agg: agg + [v["t"]], store="all")
    accepted: dict[Windowed, list[int]] = defaultdict(list)
    observed = None
    for key, t in events:
        observed = t if observed is None else max(observed, t)
        for start in range(t - t % 10 - 10, t + 1, 10):
            if start <= t < start + 20 and start + 20 + 10 > observed:
                accepted[Windowed(key, start, start + 20)].append(t)
    with TestDriver(b.build()) as d:
        for key, t in events:
            d.pipe("in", key, {"t": t}, t)
        assert d.store("all").all() == dict(accepted)
        assert d.store("latest").all() == {w: {"t": max(ts)} for w, ts in accepted.items()}


def test_suppressed_results_and_updates_can_be_read_side_by_side() -> None:
    """``suppress_until_window_closes()`` is a new table: the windowed table itself keeps
    forwarding every update to its other readers (regression: suppress used to switch the
    table itself to final results only)."""
    b = StreamsBuilder()
    counts = (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
              .windowed_by(TimeWindows(size_ms=10)).count(store="n"))
    counts.to_stream().to("updates", key_serde="str")
    counts.suppress_until_window_closes().to_stream().to("final", key_serde="str")
    with TestDriver(b.build()) as driver:
        for t in (1, 2, 3, 15):
            driver.pipe("in", "k", {}, t)
        assert [(r.key, r.value) for r in driver.read_output("updates")] == [
            (Windowed("k", 0, 10), 1), (Windowed("k", 0, 10), 2), (Windowed("k", 0, 10), 3),
            (Windowed("k", 10, 20), 1)]
        assert [(r.key, r.value, r.timestamp) for r in driver.read_output("final")] == [(Windowed("k", 0, 10), 3, 10)]


def test_a_late_record_is_dropped_from_later_sliding_windows_too() -> None:
    """A record late for every window it belongs to is dropped (or sent to ``late_to``) and
    counted by no window made afterwards (regression: sliding windows kept it and counted it
    in the next record's window)."""
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
     .windowed_by(SlidingWindows(size_ms=10), late_to="late").count(store="n"))
    with TestDriver(b.build()) as driver:
        for key, t in [("b", 100), ("a", 95), ("a", 100)]:
            driver.pipe("in", key, {}, t)
        assert [(r.key, r.timestamp) for r in driver.read_output("late")] == [("a", 95)]
        assert driver.store("n").all() == {Windowed("a", 90, 101): 1, Windowed("b", 90, 101): 1}


def test_a_hopping_record_open_in_one_of_its_windows_is_not_late() -> None:
    """Kafka's rule: a record goes to every window of it still open and is late only when
    none is (regression: a record accepted by one window was also reported late)."""
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
     .windowed_by(TimeWindows(size_ms=10, advance_ms=5), late_to="late").count(store="n"))
    with TestDriver(b.build()) as driver:
        for t in (12, 7):  # 7 is in [0, 10), closed at 12, and in [5, 15), open
            driver.pipe("in", "a", {}, t)
        assert driver.read_output("late") == []
        assert driver.store("n").all() == {Windowed("a", 5, 15): 2, Windowed("a", 10, 20): 1}


@pytest.mark.parametrize("hop", ["through", "repartition"])
def test_windowed_keys_stay_windowed_through_a_stream(hop: str) -> None:
    """A windowed table's ``to_stream()`` can go ``through()`` a stream or ``repartition()``:
    the keys are written and read back as Windowed (regression: SerdeError both ways)."""
    b = StreamsBuilder()
    updates = (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
               .windowed_by(TimeWindows(size_ms=10)).count(store="n").to_stream())
    moved = updates.through("mid", key_serde="str") if hop == "through" else updates.repartition(key_serde="str")
    moved.filter(lambda k, v: v > 1).to("out", key_serde="str")
    with TestDriver(b.build()) as driver:
        for t in (1, 2, 12):
            driver.pipe("in", "k", {}, t)
        assert [(r.key, r.value) for r in driver.read_output("out")] == [(Windowed("k", 0, 10), 2)]
