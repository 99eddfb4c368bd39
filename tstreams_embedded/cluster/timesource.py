"""The clocks a cluster node reads, behind a small interface: a monotonic clock for
timeouts and leases, and the wall clock a leader stamps entries with. Production uses
:class:`SystemTime`; tests pass their own (e.g. one that jumps)."""

from __future__ import annotations

import time
from typing import Protocol


class TimeSource(Protocol):
    def monotonic(self) -> float:
        """Seconds, never decreasing (leases, timeouts)."""

    def wall_ms(self) -> int:
        """Epoch milliseconds (may jump either way; the log's time never goes back)."""


class SystemTime:
    """The process's clocks."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000
