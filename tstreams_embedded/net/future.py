"""A small, fast future for replies of the network client.

``concurrent.futures.Future`` allocates a ``Condition`` per future; a pipelined client
makes tens of thousands per second, so this one uses one bare lock as a one-shot event.
"""

from __future__ import annotations

import _thread
from collections.abc import Callable
from typing import Any

_PENDING = object()
_cb_lock = _thread.allocate_lock()


class Future:
    """The eventual result of one request. Resolved exactly once, by the client's I/O thread."""

    __slots__ = ("_lock", "_value", "_error", "_callbacks", "request_id")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self._value: Any = _PENDING
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Future], Any]] | None = None
        self.request_id = 0

    def done(self) -> bool:
        return self._value is not _PENDING or self._error is not None

    def set_result(self, value: Any) -> None:
        if self.done():
            return
        self._value = value
        self._finish()

    def set_exception(self, exc: BaseException) -> None:
        if self.done():
            return
        self._error = exc
        self._finish()

    def _finish(self) -> None:
        self._lock.release()
        if self._callbacks is None:  # read after the value is set: a late adder sees done()
            return
        with _cb_lock:
            cbs, self._callbacks = self._callbacks, None
        for cb in cbs or ():
            try:
                cb(self)
            except Exception:  # a user callback must not kill the I/O thread
                pass

    def add_done_callback(self, fn: Callable[[Future], Any]) -> None:
        """Call ``fn(self)`` when resolved (at once if already resolved; else on the I/O thread)."""
        with _cb_lock:
            if not self.done():
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until resolved; return whether it is."""
        if self.done():
            return True
        if self._lock.acquire(True, -1 if timeout is None else max(0.0, timeout)):
            self._lock.release()
            return True
        return self.done()

    def exception(self) -> BaseException | None:
        return self._error

    def result(self, timeout: float | None = None) -> Any:
        """The value, or raise the error. ``TimeoutError`` if not resolved within ``timeout``."""
        if not self.wait(timeout):
            raise TimeoutError("reply not received in time")
        if self._error is not None:
            raise self._error
        return self._value
