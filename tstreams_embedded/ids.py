"""Time-based transaction IDs.

An ID is ``milliseconds since the epoch * 100000 + counter``, as in T-streams. The engine
allocates them inside the LMDB write transaction as ``max(now_ms * 100000, last + 1)``,
so they are strictly increasing per partition, across every process sharing a directory.
"""

from __future__ import annotations

import datetime as _dt
import math

ID_MULTIPLIER = 100_000
MAX_ID = 2**63 - 1
#: the latest time an ID can encode, in epoch seconds (in the year 4892)
MAX_SECONDS = MAX_ID // ID_MULTIPLIER // 1000


def txn_id_at(when: _dt.datetime | float | int) -> int:
    """The smallest transaction ID that can be allocated at ``when``.

    ``when`` is a datetime (naive means UTC) or seconds since the epoch, in
    ``[0, MAX_SECONDS]``; anything else raises InvalidArgument.
    """
    seconds = _seconds(when)
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_SECONDS:
        from .errors import InvalidArgument

        raise InvalidArgument(f"time must be between the epoch and {MAX_SECONDS} epoch seconds, got {when!r}")
    return int(round(seconds * 1000)) * ID_MULTIPLIER


def txn_time(txn_id: int) -> _dt.datetime:
    """The (UTC, millisecond) time at which a transaction was opened (``txn_id`` an integer
    in ``[0, 2**63 - 1]``)."""
    if isinstance(txn_id, bool) or not isinstance(txn_id, int) or not 0 <= txn_id <= MAX_ID:
        from .errors import InvalidArgument

        raise InvalidArgument(f"a transaction ID is an integer in [0, {MAX_ID}], got {txn_id!r:.40}")
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
