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

DAY_MS = 86_400_000


class Windowed(NamedTuple):
    """The key of a windowed result: the record key and its window ``[start, end)``."""

    key: Any
    start: int
    end: int


def _ms(value: Any, what: str, lo: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise errors.InvalidArgument(f"{what} must be an integer number of milliseconds >= {lo}, got {value!r}")
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
    smaller than the size (a record then belongs to ``size / advance`` windows)."""

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
    change), an ISO week (Monday to Monday) or a month, computed with :mod:`zoneinfo`."""

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
        local = dt.datetime.fromtimestamp(t // 1000, zone).date()
        if self.unit == "day":
            first, nxt = local, local + dt.timedelta(days=1)
        elif self.unit == "week":
            first = local - dt.timedelta(days=local.weekday())
            nxt = first + dt.timedelta(days=7)
        else:
            first = local.replace(day=1)
            nxt = (first + dt.timedelta(days=32)).replace(day=1)
        return [(_midnight(first, zone), _midnight(nxt, zone))]


def _midnight(day: dt.date, zone: ZoneInfo) -> int:
    """Epoch ms of the local start of ``day`` (where midnight does not exist, the moment the
    clocks jump)."""
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=zone).timestamp()) * 1000
