"""Windows at their bounds: hopping windows that would put a record in too many windows are
refused when the topology is built, and calendar windows place every valid timestamp (the
years 1 to 9999, in every zone), in a running app too."""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tstreams_embedded import errors
from tstreams_embedded.streams import (
    CalendarWindows,
    JoinWindows,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TestDriver,
    TimeWindows,
    Windows,
)
from tstreams_embedded.streams.records import MAX_TIMESTAMP, MIN_TIMESTAMP
from tstreams_embedded.streams.windows import MAX_DURATION_MS, MAX_WINDOWS_PER_RECORD

#: UTC, zones far east and west (+14, -11), historical local mean time, half hours, DST both ways
ZONES = ["UTC", "Asia/Tokyo", "America/New_York", "Pacific/Kiritimati", "Pacific/Pago_Pago",
         "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago"]
UNITS = ["day", "week", "month"]
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
LONGEST = {"day": 25 * HOUR_MS, "week": 7 * DAY_MS + HOUR_MS, "month": 31 * DAY_MS + HOUR_MS}
timestamps = st.integers(MIN_TIMESTAMP, MAX_TIMESTAMP)
edges = st.sampled_from([MIN_TIMESTAMP, MIN_TIMESTAMP + 1, MIN_TIMESTAMP + DAY_MS, MAX_TIMESTAMP - DAY_MS,
                         MAX_TIMESTAMP - 1, MAX_TIMESTAMP])


def test_too_many_windows_per_record_are_refused_at_build_time() -> None:
    with pytest.raises(errors.TopologyError, match=f"10000000 windows.*at most {MAX_WINDOWS_PER_RECORD}"):
        TimeWindows(size_ms=10**7, advance_ms=1)
    with pytest.raises(errors.TopologyError, match="MAX_WINDOWS_PER_RECORD"):
        TimeWindows(size_ms=MAX_WINDOWS_PER_RECORD + 1, advance_ms=1)
    at_limit = TimeWindows(size_ms=MAX_WINDOWS_PER_RECORD, advance_ms=1)
    assert len(at_limit.windows_for(12_345)) == MAX_WINDOWS_PER_RECORD


@settings(max_examples=300, deadline=None)
@given(t=st.one_of(timestamps, edges), tz=st.sampled_from(ZONES), unit=st.sampled_from(UNITS))
def test_calendar_windows_place_every_valid_timestamp(t: int, tz: str, unit: str) -> None:
    """One window holds ``t``; it is no longer than the unit's longest, and the windows tile
    time: the window of its end starts there, the window before it ends at its start."""
    windows = CalendarWindows(unit=unit, tz=tz)
    ((start, end),) = windows.windows_for(t)
    assert start <= t < end
    assert 0 < end - start <= LONGEST[unit]
    if end <= MAX_TIMESTAMP:
        assert windows.windows_for(end)[0][0] == end
    if start - 1 >= MIN_TIMESTAMP:
        assert windows.windows_for(start - 1)[0][1] == start


def reference_window(t: int, tz: str, unit: str) -> tuple[int, int]:
    """The window by ``datetime`` arithmetic, where it can represent every date involved."""
    zone = ZoneInfo(tz)
    local = dt.datetime.fromtimestamp(t // 1000, zone).date()
    if unit == "day":
        first, nxt = local, local + dt.timedelta(days=1)
    elif unit == "week":
        first = local - dt.timedelta(days=local.weekday())
        nxt = first + dt.timedelta(days=7)
    else:
        first = local.replace(day=1)
        nxt = (first + dt.timedelta(days=32)).replace(day=1)
    return tuple(int(dt.datetime(d.year, d.month, d.day, tzinfo=zone).timestamp()) * 1000  # type: ignore[return-value]
                 for d in (first, nxt))


@settings(max_examples=300, deadline=None)
@given(t=st.integers(MIN_TIMESTAMP + 40 * DAY_MS, MAX_TIMESTAMP - 40 * DAY_MS), tz=st.sampled_from(ZONES),
       unit=st.sampled_from(UNITS))
def test_calendar_windows_agree_with_datetime_inside_its_range(t: int, tz: str, unit: str) -> None:
    assert CalendarWindows(unit=unit, tz=tz).windows_for(t) == [reference_window(t, tz, unit)]


@pytest.mark.parametrize("tz", ["UTC", "Asia/Tokyo", "America/New_York"])
def test_an_app_counts_records_on_the_first_and_last_valid_days(tz: str) -> None:
    """9999-12-31 (any zone) and 0001-01-01 (zones away from UTC) raised a raw OverflowError
    that stopped the app at that record on every restart."""
    b = StreamsBuilder()
    grouped = b.stream("sales", key_serde="str", value_serde="json").group_by_key(key_serde="str")
    for unit in UNITS:
        grouped.windowed_by(CalendarWindows(unit=unit, tz=tz, retention_ms=400 * DAY_MS)).count(store=unit)
    with TestDriver(b.build()) as driver:
        for pair in ((MIN_TIMESTAMP, MIN_TIMESTAMP + 1), (MAX_TIMESTAMP - 1, MAX_TIMESTAMP)):
            for t in pair:
                driver.pipe("sales", "shop", {}, timestamp=t)
            for unit in UNITS:
                ((window, count),) = driver.store(unit).all().items()  # the first days' windows expired
                assert count == 2 and window.start <= pair[0] and pair[1] < window.end


@pytest.mark.parametrize("make", [
    lambda ms: TimeWindows(size_ms=ms), lambda ms: TimeWindows(size_ms=10, grace_ms=ms),
    lambda ms: TimeWindows(size_ms=10, retention_ms=ms), lambda ms: SessionWindows(gap_ms=ms),
    lambda ms: SlidingWindows(size_ms=ms), lambda ms: CalendarWindows(grace_ms=ms), lambda ms: JoinWindows.of(ms),
    lambda ms: JoinWindows(0, 0, grace_ms=ms),
])
def test_durations_beyond_the_span_of_valid_timestamps_are_refused(make: Any) -> None:
    """A window of 2**70 ms was accepted, and the app then failed with a raw struct.error."""
    with pytest.raises(errors.InvalidArgument, match="span of the valid timestamps"):
        make(MAX_DURATION_MS + 1)
    with pytest.raises(errors.InvalidArgument, match="span of the valid timestamps"):
        make(2**70)
    make(MAX_DURATION_MS)


@pytest.mark.parametrize("windows", [TimeWindows(size_ms=MAX_DURATION_MS), SessionWindows(gap_ms=MAX_DURATION_MS),
                                     SlidingWindows(size_ms=MAX_DURATION_MS),
                                     TimeWindows(size_ms=10, grace_ms=MAX_DURATION_MS)],
                         ids=repr)
def test_the_longest_windows_place_records_at_both_ends(windows: Windows) -> None:
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str").windowed_by(windows)
        .count(store="n"))
    with TestDriver(b.build()) as driver:
        for t in (MIN_TIMESTAMP, MAX_TIMESTAMP):
            driver.pipe("in", "k", {}, timestamp=t)
        assert sum(driver.store("n").all().values()) >= 2


@settings(max_examples=25, deadline=None)
@given(tz=st.sampled_from(ZONES), times=st.lists(st.one_of(timestamps, edges), min_size=1, max_size=20))
def test_an_app_places_every_valid_timestamp_in_calendar_windows(tz: str, times: list[int]) -> None:
    """Through a running app: every record is counted in its day, week and month (a grace
    as long as time: none is late)."""
    b = StreamsBuilder()
    grouped = b.stream("sales", key_serde="str", value_serde="json").group_by_key(key_serde="str")
    for unit in UNITS:
        grouped.windowed_by(CalendarWindows(unit=unit, tz=tz, grace_ms=MAX_DURATION_MS)).count(store=unit)
    with TestDriver(b.build()) as driver:
        for n, t in enumerate(times):
            driver.pipe("sales", f"k{n}", {}, timestamp=t)
        for unit in UNITS:
            counts = driver.store(unit).all()
            assert sum(counts.values()) == len(times)
            assert all(w.start <= times[int(w.key[1:])] < w.end for w in counts)
