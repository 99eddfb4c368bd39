"""Window specifications: which windows a record at event time ``t`` belongs to.

Windows are half-open ``[start, end)`` in epoch milliseconds. A window *closes* when the
stream time of its aggregation reaches ``end + grace_ms``: later records for it are late
(dropped and counted, or sent to ``late_to``), and ``suppress_until_window_closes()`` emits
its final result then. Windows are deleted from their store once stream time passes
``end + retention_ms`` (default: just after they close).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .. import errors
from .records import MAX_TIMESTAMP, MIN_TIMESTAMP

DAY_MS = 86_400_000
#: the longest window size, gap, grace or retention: the span of the valid record timestamps
#: (the years 1 to 9999; a longer one would change nothing), so window bounds fit in 64 bits
MAX_DURATION_MS = MAX_TIMESTAMP - MIN_TIMESTAMP
#: the most windows one record may fall in: hopping ``TimeWindows`` with ``size_ms /
#: advance_ms`` above it are refused (``TopologyError``), as every window of a record is a
#: store update of its own
MAX_WINDOWS_PER_RECORD = 10_000


class Windowed(NamedTuple):
    """The key of a windowed result: the record key and its window ``[start, end)``."""

    key: Any
    start: int
    end: int


def _ms(value: Any, what: str, lo: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= MAX_DURATION_MS:
        raise errors.InvalidArgument(f"{what} must be an integer number of milliseconds in [{lo}, "
                                     f"{MAX_DURATION_MS}] (the span of the valid timestamps), got {value!r:.40}")
    return value


class Windows:
    """Base of the window specifications."""

    grace_ms: int = 0
    retention_ms: int = 0

    def windows_for(self, t: int) -> list[tuple[int, int]]:
        """The windows ``(start, end)`` that contain event time ``t``."""
        raise NotImplementedError

    def _retention(self, retention_ms: Any, longest: int) -> int:
        if retention_ms is None:
            return longest + self.grace_ms
        retention = _ms(retention_ms, "retention_ms")
        if retention < longest + self.grace_ms:
            raise errors.InvalidArgument(f"retention_ms must be at least size + grace ({longest + self.grace_ms}), "
                                         f"got {retention}")
        return retention


@dataclass(init=False, frozen=True)
class TimeWindows(Windows):
    """Tumbling windows of ``size_ms`` (aligned to the epoch); hopping when ``advance_ms`` is
    smaller than the size (a record then belongs to ``size / advance`` windows, at most
    :data:`MAX_WINDOWS_PER_RECORD`: :class:`~tstreams_embedded.errors.TopologyError` beyond)."""

    size_ms: int
    advance_ms: int
    grace_ms: int
    retention_ms: int

    def __init__(self, size_ms: int, grace_ms: int = 0, advance_ms: int | None = None,
                 retention_ms: int | None = None) -> None:
        object.__setattr__(self, "size_ms", _ms(size_ms, "size_ms", 1))
        advance = size_ms if advance_ms is None else _ms(advance_ms, "advance_ms", 1)
        if advance > size_ms:
            raise errors.InvalidArgument(f"advance_ms ({advance}) must not exceed size_ms ({size_ms})")
        per_record = -(-size_ms // advance)
        if per_record > MAX_WINDOWS_PER_RECORD:
            raise errors.TopologyError(
                f"TimeWindows(size_ms={size_ms}, advance_ms={advance}) would put each record in {per_record} "
                f"windows; at most {MAX_WINDOWS_PER_RECORD} windows per record (MAX_WINDOWS_PER_RECORD) are "
                f"allowed: use a larger advance_ms (at least {-(-size_ms // MAX_WINDOWS_PER_RECORD)}) or a "
                f"smaller size_ms")
        object.__setattr__(self, "advance_ms", advance)
        object.__setattr__(self, "grace_ms", _ms(grace_ms, "grace_ms"))
        object.__setattr__(self, "retention_ms", self._retention(retention_ms, size_ms))

    def windows_for(self, t: int) -> list[tuple[int, int]]:
        size, adv = self.size_ms, self.advance_ms
        if adv == size:  # tumbling
            start = t - t % size
            return [(start, start + size)]
        last = t - t % adv  # the latest window start <= t (floor, also for negative t)
        out = []
        start = last
        while start > t - size:
            out.append((start, start + size))
            start -= adv
        out.reverse()
        return out


@dataclass(init=False, frozen=True)
class SessionWindows(Windows):
    """Sessions per key: records less than ``gap_ms`` apart (inclusive) share a session
    ``[first, last + 1)``; a record that bridges two sessions merges them."""

    gap_ms: int
    grace_ms: int
    retention_ms: int

    def __init__(self, gap_ms: int, grace_ms: int = 0, retention_ms: int | None = None) -> None:
        object.__setattr__(self, "gap_ms", _ms(gap_ms, "gap_ms", 1))
        object.__setattr__(self, "grace_ms", _ms(grace_ms, "grace_ms"))
        object.__setattr__(self, "retention_ms", self._retention(retention_ms, gap_ms))

    def windows_for(self, t: int) -> list[tuple[int, int]]:
        return [(t, t + 1)]


@dataclass(init=False, frozen=True)
class SlidingWindows(Windows):
    """Kafka-style sliding windows: each record at ``t`` defines the window
    ``[t - size_ms, t]`` (both ends included; stored as ``[t - size_ms, t + 1)``) holding
    every record of its key in it, and is added to the existing windows that contain it."""

    size_ms: int
    grace_ms: int
    retention_ms: int

    def __init__(self, size_ms: int, grace_ms: int = 0, retention_ms: int | None = None) -> None:
        object.__setattr__(self, "size_ms", _ms(size_ms, "size_ms", 1))
        object.__setattr__(self, "grace_ms", _ms(grace_ms, "grace_ms"))
        object.__setattr__(self, "retention_ms", self._retention(retention_ms, size_ms + 1))

    def windows_for(self, t: int) -> list[tuple[int, int]]:
        return [(t - self.size_ms, t + 1)]


CALENDAR_UNITS = ("day", "week", "month")


@dataclass(init=False, frozen=True)
class CalendarWindows(Windows):
    """Calendar windows in a time zone: a local day (23 or 25 hours across a daylight-saving
    change), an ISO week (Monday to Monday) or a month, computed with :mod:`zoneinfo`. Every
    valid record timestamp is placed, the first and last days of the years 1 to 9999
    included (their windows may start in the year 0 or end in the year 10000)."""

    unit: str
    tz: str
    grace_ms: int
    retention_ms: int

    def __init__(self, unit: str = "day", tz: str = "UTC", grace_ms: int = 0,
                 retention_ms: int | None = None) -> None:
        if unit not in CALENDAR_UNITS:
            raise errors.InvalidArgument(f"unit must be one of {CALENDAR_UNITS}, got {unit!r}")
        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
            raise errors.InvalidArgument(f"unknown time zone {tz!r}: {exc}") from None
        object.__setattr__(self, "unit", unit)
        object.__setattr__(self, "tz", tz)
        object.__setattr__(self, "grace_ms", _ms(grace_ms, "grace_ms"))
        longest = {"day": 25 * 3_600_000, "week": 7 * DAY_MS + 3_600_000, "month": 31 * DAY_MS + 3_600_000}[unit]
        object.__setattr__(self, "retention_ms", self._retention(retention_ms, longest))

    def windows_for(self, t: int) -> list[tuple[int, int]]:
        zone = ZoneInfo(self.tz)
        day = _local_day(t, zone)
        if self.unit == "day":
            first, nxt = day, day + 1
        elif self.unit == "week":
            first = day - (day + 6) % 7  # back to Monday (ordinal 1, 0001-01-01, is a Monday)
            nxt = first + 7
        else:
            year, month = _year_month(day)
            first = _ordinal(year, month)
            nxt = _ordinal(year + month // 12, month % 12 + 1)
        return [(_midnight(first, zone), _midnight(nxt, zone))]


# Calendar arithmetic on proleptic Gregorian day ordinals (``date.toordinal()``: 1 is
# 0001-01-01), so that every valid timestamp is placed: a window may start before the year 1
# (0001-01-01 00:00 UTC is still 0000-12-31 west of Greenwich) or end in the year 10000,
# which ``datetime`` cannot represent. Days outside its range are mapped by whole 400-year
# cycles (146,097 days, a whole number of weeks), and take the UTC offset of the nearest
# day it can represent (a zone's offset does not change there: local mean time in the year
# 1, the zone's standing rule in December 9999).
_EPOCH_DAY = dt.date(1970, 1, 1).toordinal()
_CYCLE_DAYS = 146_097
_CYCLE_YEARS = 400
_LAST_DAY = dt.date.max.toordinal()
_UTC_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: instants whose local time is a ``datetime`` in every zone (offsets are under a day)
_SAFE_FIRST_MS = (1 + 2 - _EPOCH_DAY) * DAY_MS
_SAFE_LAST_MS = (_LAST_DAY - 2 - _EPOCH_DAY) * DAY_MS


def _offset_ms(t: int, zone: ZoneInfo) -> int:
    """The UTC offset of ``zone`` at the instant ``t`` (epoch ms)."""
    clamped = min(max(t, _SAFE_FIRST_MS), _SAFE_LAST_MS)
    offset = (_UTC_EPOCH + dt.timedelta(milliseconds=clamped)).astimezone(zone).utcoffset()
    assert offset is not None
    return offset // dt.timedelta(milliseconds=1)


def _local_day(t: int, zone: ZoneInfo) -> int:
    """The day ordinal of the local date of instant ``t`` in ``zone``."""
    return (t + _offset_ms(t, zone)) // DAY_MS + _EPOCH_DAY


def _year_month(day: int) -> tuple[int, int]:
    """The (year, month) of day ordinal ``day`` (the year may be 0 or 10000)."""
    shift = 0 if 1 <= day <= _LAST_DAY else (1 if day < 1 else -1)
    date = dt.date.fromordinal(day + shift * _CYCLE_DAYS)
    return date.year - shift * _CYCLE_YEARS, date.month


def _ordinal(year: int, month: int) -> int:
    """The day ordinal of the first of ``month`` of ``year`` (the year may be 0 or 10000)."""
    shift = 0 if 1 <= year <= dt.MAXYEAR else (1 if year < 1 else -1)
    return dt.date(year + shift * _CYCLE_YEARS, month, 1).toordinal() - shift * _CYCLE_DAYS


def _midnight(day: int, zone: ZoneInfo) -> int:
    """Epoch ms of the local start of day ordinal ``day`` (where midnight does not exist, the
    moment the clocks jump)."""
    if 1 <= day <= _LAST_DAY:
        date = dt.date.fromordinal(day)
        return int(dt.datetime(date.year, date.month, date.day, tzinfo=zone).timestamp()) * 1000
    edge = dt.datetime.min if day < 1 else dt.datetime.combine(dt.date.max, dt.time())
    offset = zone.utcoffset(edge)
    assert offset is not None
    return (day - _EPOCH_DAY) * DAY_MS - offset // dt.timedelta(milliseconds=1)


@dataclass(frozen=True)
class JoinWindows:
    """``l.ts - before_ms <= r.ts <= l.ts + after_ms``; records up to ``grace_ms`` out of
    order are still joined. ``JoinWindows.of(ms)`` is symmetric."""

    before_ms: int
    after_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        for what in ("before_ms", "after_ms", "grace_ms"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_DURATION_MS:
                raise errors.InvalidArgument(f"JoinWindows {what} must be an integer in [0, {MAX_DURATION_MS}] "
                                             f"(the span of the valid timestamps), got {v!r:.40}")

    @classmethod
    def of(cls, ms: int, grace_ms: int = 0) -> JoinWindows:
        return cls(ms, ms, grace_ms)
