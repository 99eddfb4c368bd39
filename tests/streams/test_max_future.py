"""``App(max_future_ms=…)``: a record stamped too far ahead of the wall clock goes to
``on_record_error`` instead of moving stream time there (issue 21 §4, "Clock jumps"):
through TestDriver's wall clock and through a real App on the real clock."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.streams import App, StreamsBuilder, TestDriver, TimeWindows, Windowed, send_records
from tstreams_embedded.streams.records import MAX_TIMESTAMP

YEAR_9999 = MAX_TIMESTAMP - 1_000
MINUTE = 60_000
NOW = 1_800_000_000_000  # the driver's wall clock


def counts(retention_ms: int | None = None) -> StreamsBuilder:
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
     .windowed_by(TimeWindows(size_ms=MINUTE, retention_ms=retention_ms)).count(store="n"))
    return b


def pipe_around_a_jump(driver: TestDriver) -> None:
    driver.pipe("in", "a", {}, NOW - 2 * MINUTE)
    driver.pipe("in", "a", {}, YEAR_9999)
    driver.pipe("in", "a", {}, NOW - MINUTE)
    driver.pipe("in", "a", {}, NOW)


def test_without_the_option_one_record_of_the_year_9999_makes_every_later_record_late() -> None:
    """The trap the option is for (documented next to it)."""
    with TestDriver(counts().build(), wall_clock_ms=NOW) as driver:
        pipe_around_a_jump(driver)
        assert driver.metrics["late_dropped"] == 2
        assert set(driver.store("n").all()) <= {Windowed("a", YEAR_9999 - YEAR_9999 % MINUTE,
                                                         YEAR_9999 - YEAR_9999 % MINUTE + MINUTE)}


def test_a_record_too_far_ahead_is_skipped_and_stream_time_stays() -> None:
    with TestDriver(counts(retention_ms=10 * MINUTE).build(), wall_clock_ms=NOW, max_future_ms=MINUTE,
                    on_record_error="skip") as driver:
        pipe_around_a_jump(driver)
        driver.pipe("in", "a", {}, NOW + MINUTE)  # exactly max_future_ms ahead: accepted
        assert driver.metrics["records_skipped_on_error"] == 1
        assert "late_dropped" not in driver.metrics
        start = NOW - NOW % MINUTE
        assert driver.store("n").all() == {
            Windowed("a", start - 2 * MINUTE, start - MINUTE): 1, Windowed("a", start - MINUTE, start): 1,
            Windowed("a", start, start + MINUTE): 1, Windowed("a", start + MINUTE, start + 2 * MINUTE): 1}


def test_the_bound_follows_the_wall_clock() -> None:
    with TestDriver(counts().build(), wall_clock_ms=NOW, max_future_ms=MINUTE, on_record_error="skip") as driver:
        driver.pipe("in", "a", {}, NOW + 2 * MINUTE)
        assert driver.metrics["records_skipped_on_error"] == 1
        driver.advance_wall_clock(MINUTE)
        driver.pipe("in", "a", {}, NOW + 2 * MINUTE)
        assert driver.metrics["records_skipped_on_error"] == 1
        assert sum(driver.store("n").all().values()) == 1


def test_with_fail_the_record_stops_the_driver_with_a_clear_error() -> None:
    with TestDriver(counts().build(), wall_clock_ms=NOW, max_future_ms=MINUTE) as driver:
        with pytest.raises(errors.TimestampTooFarAhead, match=rf"stamped {YEAR_9999}, more than max_future_ms=60000"):
            driver.pipe("in", "a", {}, YEAR_9999)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "60000"])
def test_max_future_ms_must_be_a_non_negative_int(bad: object, tmp_path: Path) -> None:
    with ts.open(str(tmp_path)) as engine, pytest.raises(errors.InvalidArgument, match="max_future_ms"):
        App(engine, application_id="a", topology=counts().build(), max_future_ms=bad)  # type: ignore[arg-type]


def test_a_real_app_on_the_real_clock(tmp_path: Path) -> None:
    """The record of the year 9999 fails the app at every run with ``"fail"`` (nothing
    committed), and is skipped once with ``"skip"``: the records around it are counted."""
    now = int(time.time() * 1000)
    with ts.open(str(tmp_path / "db")) as engine:
        engine.create_stream("in")
        send_records(engine, "in", [("a", {}, now - MINUTE), ("a", {}, YEAR_9999), ("a", {}, now)],
                     key_serde="str", value_serde="json", records_per_transaction=1)
        for _ in range(2):
            with pytest.raises(errors.TimestampTooFarAhead):
                App(engine, application_id="app", topology=counts().build(), max_future_ms=MINUTE).run()
        app = App(engine, application_id="app", topology=counts().build(), max_future_ms=MINUTE,
                  on_record_error="skip")
        metrics = app.run()
        assert metrics["records_skipped_on_error"] == 1 and "late_dropped" not in metrics
        assert sum(app.store("n").all().values()) == 2
