"""A node's clocks under test control (a :class:`~tstreams_embedded.cluster.timesource.TimeSource`):
the process's clocks plus offsets a nemesis moves, and a pause that stops time for the node.

* :meth:`NemesisTime.jump` moves the wall clock forward or back and the monotonic clock
  forward only (a monotonic clock never goes back; a forward jump is a suspended VM);
* :meth:`NemesisTime.pause` freezes both clocks where they are (the node, "paused", sees no
  time pass) until :meth:`NemesisTime.resume`, when they jump to the real time again, as a
  process's clocks do after a long GC pause or a SIGSTOP.
"""

from __future__ import annotations

import threading

from ..cluster.timesource import SystemTime, TimeSource


class NemesisTime:
    """See the module docstring. Thread-safe. ``base``: the clocks it offsets (the process's
    by default; the simulation's simulated ones under it)."""

    def __init__(self, base: TimeSource | None = None) -> None:
        self.base: TimeSource = base or SystemTime()
        self._lock = threading.Lock()
        self._mono_offset = 0.0
        self._wall_offset_ms = 0
        self._frozen: tuple[float, int] | None = None

    def monotonic(self) -> float:
        with self._lock:
            if self._frozen is not None:
                return self._frozen[0]
            return self.base.monotonic() + self._mono_offset

    def wall_ms(self) -> int:
        with self._lock:
            if self._frozen is not None:
                return self._frozen[1]
            return self.base.wall_ms() + self._wall_offset_ms

    def jump(self, seconds: float) -> None:
        """Move the wall clock by ``seconds`` (either way) and the monotonic one forward by ``|seconds|``."""
        with self._lock:
            self._wall_offset_ms += round(seconds * 1000)
            self._mono_offset += abs(seconds)

    def pause(self) -> None:
        """Freeze both clocks (see the module docstring)."""
        with self._lock:
            if self._frozen is None:
                wall = self.base.wall_ms() + self._wall_offset_ms
                self._frozen = (self.base.monotonic() + self._mono_offset, wall)

    def resume(self) -> None:
        with self._lock:
            self._frozen = None

    @property
    def paused(self) -> bool:
        return self._frozen is not None
