"""Time-based transaction IDs.

An ID is ``milliseconds since the epoch * 100000 + counter``, as in T-streams. The engine
allocates them inside the LMDB write transaction as ``max(now_ms * 100000, last + 1)``,
so they are strictly increasing per partition, across every process sharing a directory.
"""

from __future__ import annotations

import datetime as _dt

ID_MULTIPLIER = 100_000


def txn_id_at(when: _dt.datetime | float | int) -> int:
    """The smallest transaction ID that can be allocated at ``when``.

    ``when`` is a datetime (naive means UTC) or seconds since the epoch.
    """
    return int(round(_seconds(when) * 1000)) * ID_MULTIPLIER


def txn_time(txn_id: int) -> _dt.datetime:
    """The (UTC, millisecond) time at which a transaction was opened."""
    return _dt.datetime.fromtimestamp((txn_id // ID_MULTIPLIER) / 1000.0, tz=_dt.timezone.utc)


def txn_millis(txn_id: int) -> int:
    """Milliseconds since the epoch encoded in a transaction ID."""
    return txn_id // ID_MULTIPLIER


def _seconds(when: _dt.datetime | float | int) -> float:
    if isinstance(when, _dt.datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=_dt.timezone.utc)
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, (int, float)):
        from .errors import InvalidArgument

        raise InvalidArgument(f"expected a datetime or epoch seconds, got {type(when).__name__}")
    return float(when)
