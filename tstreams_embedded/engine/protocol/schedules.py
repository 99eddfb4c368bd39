"""Scheduled delivery: transactions that appear in a stream at a given time.

``engine.schedule(stream, items, at=… | delay=…)`` stores the items in the engine (a
:class:`~.ops.Schedule` record) and returns the schedule's ID; once the engine's clock
reaches the due time, a :class:`~.ops.FireSchedule` record turns it into ONE ordinary
checkpointed transaction of the stream (the same write as an ``Instant``) and deletes the
schedule, in one atomic write: it fires exactly once, whoever fires it, however often it is
tried, across crashes and restarts. ``engine.cancel_schedule(id)`` (a
:class:`~.ops.CancelSchedule`) deletes it if it has not fired.

Until it fires, a schedule is not a transaction of the stream: readers never wait for it
(nothing is open), and its transaction ID is allocated when it fires (so consumers see it in
the order of firing, like any new transaction).

**Storage.** The schedules live in a reserved namespace (:data:`NAMESPACE`) of the engine's
``state`` database, written only by the three records above: ``d · due_ms · id`` holds the
schedule (``[stream, partition, stream_id, chunk, created_ms]``, msgpack), ``i · id`` its
due time. So the earliest due schedule is the namespace's first ``d`` key, and the commit
log (and a cluster's replicated log) carries schedules like any other state.

**Who fires.** An embedded engine's firer thread
(:class:`~tstreams_embedded.engine.storage.schedule_firer.Firer`), or a cluster's leader
(see ``docs/SCHEDULES.md``). This module is the layout and the argument checks only.
"""

from __future__ import annotations

import datetime as _dt
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgpack

from ... import errors

#: the ``state`` namespace of the schedules (only the schedule records write it)
NAMESPACE = "__schedules"
DUE = b"d"
BY_ID = b"i"
_U64 = struct.Struct(">Q")
#: the latest due time (epoch ms): the end of the year 9999
MAX_DUE_MS = 253_402_300_799_999
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
#: the most schedules one fire write turns into transactions
FIRE_BATCH = 256


def due_key(due_ms: int, schedule_id: int) -> bytes:
    return DUE + _U64.pack(due_ms) + _U64.pack(schedule_id)


def id_key(schedule_id: int) -> bytes:
    return BY_ID + _U64.pack(schedule_id)


def split_due_key(key: bytes) -> tuple[int, int]:
    """``(due_ms, schedule_id)`` of a :func:`due_key`."""
    return _U64.unpack_from(key, 1)[0], _U64.unpack_from(key, 9)[0]


def pack_due(due_ms: int) -> bytes:
    return _U64.pack(due_ms)


def unpack_due(value: bytes) -> int:
    due: int = _U64.unpack(value)[0]
    return due


def pack_schedule(stream: str, partition: int, stream_id: int, chunk: bytes, created_ms: int) -> bytes:
    packed: bytes = msgpack.packb([stream, partition, stream_id, chunk, created_ms], use_bin_type=True)
    return packed


def unpack_schedule(value: bytes) -> tuple[str, int, int, bytes, int]:
    stream, partition, stream_id, chunk, created = msgpack.unpackb(value, raw=False)
    return stream, partition, stream_id, chunk, created


@dataclass(frozen=True)
class ScheduleInfo:
    """A pending schedule: its ID, target, due time (epoch ms) and item count."""

    id: int
    stream: str
    partition: int
    due_ms: int
    items: int
    created_ms: int

    @property
    def due(self) -> _dt.datetime:
        """The due time as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.due_ms / 1000, tz=_dt.timezone.utc)


def info_of(key: bytes, value: bytes) -> ScheduleInfo:
    due, sid = split_due_key(key)
    stream, partition, _, chunk, created = unpack_schedule(value)
    return ScheduleInfo(sid, stream, partition, due, len(msgpack.unpackb(chunk, raw=False)), created)


def check_schedule_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**63:
        raise errors.InvalidArgument(f"a schedule ID is a positive integer (as engine.schedule returns), "
                                     f"got {value!r:.40}")
    return value


def due_ms_of(at: Any, delay: Any) -> tuple[int | None, int | None]:
    """``(at_ms, delay_ms)`` of ``engine.schedule``'s ``at`` (a datetime; naive means UTC)
    or ``delay`` (seconds): exactly one of them."""
    if (at is None) == (delay is None):
        raise errors.InvalidArgument("give exactly one of at= (a datetime) and delay= (seconds)")
    if at is not None:
        if not isinstance(at, _dt.datetime):
            raise errors.InvalidArgument(f"at must be a datetime (naive means UTC), got {type(at).__name__}")
        aware = at if at.tzinfo is not None else at.replace(tzinfo=_dt.timezone.utc)
        delta = aware - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        ms = -(-micros // 1000)  # rounded up: never before the time asked for
        if not 0 <= ms <= MAX_DUE_MS:
            raise errors.InvalidArgument(f"at must be between the epoch and the end of the year 9999, got {at!r}")
        return ms, None
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay) or delay < 0:
        raise errors.InvalidArgument(f"delay must be a non-negative number of seconds, got {delay!r:.40}")
    ms = math.ceil(round(delay * 1000, 3))  # 4.041 s is 4041 ms (not 4041.0000000000005 -> 4042)
    if ms > MAX_DUE_MS:
        raise errors.InvalidArgument(f"delay must be at most {MAX_DUE_MS // 1000} seconds, got {delay!r}")
    return None, ms


def iter_due(entries: Iterator[tuple[bytes, bytes]], now: int, limit: int) -> list[int]:
    """The IDs of the first ``limit`` entries (``d`` keys in order) due at ``now``."""
    out: list[int] = []
    for key, _ in entries:
        due, sid = split_due_key(key)
        if due > now or len(out) >= limit:
            break
        out.append(sid)
    return out

