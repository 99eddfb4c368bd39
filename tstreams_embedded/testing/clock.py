"""A controllable engine clock: ``ts.open(path, clock=FakeClock())``."""

from __future__ import annotations

import threading


class FakeClock:
    """A manual clock in epoch milliseconds (``int``), the ``clock=`` of :func:`tstreams_embedded.open`.

    Time stands still until :meth:`advance` (or :meth:`set`) moves it forward, so tests of
    transaction TTLs, expiry and keep-alives are exact and need no sleeping. Thread-safe.
    """

    #: 2023-11-14T22:13:20Z, a fixed and recognisable start.
    START_MS = 1_700_000_000_000

    def __init__(self, start_ms: int = START_MS) -> None:
        self._lock = threading.Lock()
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int = 0, *, seconds: float = 0.0) -> int:
        """Move forward by ``ms`` milliseconds plus ``seconds``; return the new time."""
        step = ms + round(seconds * 1000)
        if step < 0:
            raise ValueError("the clock never goes back")
        with self._lock:
            self.ms += step
            return self.ms

    def set(self, ms: int) -> int:
        """Jump to ``ms`` (not earlier than now); return it."""
        with self._lock:
            if ms < self.ms:
                raise ValueError("the clock never goes back")
            self.ms = ms
            return self.ms

    def __repr__(self) -> str:
        return f"FakeClock({self.ms})"
