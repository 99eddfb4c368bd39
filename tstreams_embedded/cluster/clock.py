"""The replicated state machine's clock.

A cluster node applies each committed log entry at the entry's time (``now_ms``, the
leader's clock when it appended the entry, never decreasing along the log). Reads must judge
time the same way: an open transaction is *expired* for a reader only if every entry applied
later will find it expired too. So a node's :class:`~tstreams_embedded.engine.storage.core.Core`
reads time from a :class:`StateClock`, the time of the last applied entry, instead of the
wall clock. Had a reader used the wall clock, a checkpoint logged before the transaction's
deadline but applied after a read past it would succeed although the reader had skipped the
transaction (and the leader, which marks what its readers find expired, would diverge from
its followers). The leader appends an empty entry every :data:`~.node.CLOCK_TICK` seconds when
idle, so this clock advances (and abandoned transactions expire) without client writes.
"""

from __future__ import annotations

import threading


class StateClock:
    """Epoch milliseconds of the last applied log entry (0 before any); callable like the
    engine's clock (``Core(..., clock=StateClock())``)."""

    def __init__(self, now_ms: int = 0) -> None:
        self._now_ms = int(now_ms)
        self._lock = threading.Lock()

    def __call__(self) -> int:
        return self._now_ms

    def advance(self, now_ms: int) -> None:
        """Move to ``now_ms`` (an applied entry's time); never backwards."""
        with self._lock:
            if now_ms > self._now_ms:
                self._now_ms = int(now_ms)
