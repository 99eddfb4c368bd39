"""The outcomes of a write batch, known later: :class:`Deferred` (see :mod:`.executors`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Deferred"]


class Deferred:
    """The outcomes of a batch that a ``batch`` function will know later: it returns this
    at once, and the executor takes the next batch while the calls complete (a cluster
    leader returns one once its log entry is written: the next entry is written while this
    one replicates). :meth:`complete` is called once, from any thread, with one
    ``(ok, value-or-exception)`` per call."""

    __slots__ = ("_callbacks", "_done", "_lock", "_outcomes")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._outcomes: list[tuple[bool, Any]] = []
        self._callbacks: list[Callable[[list[tuple[bool, Any]]], None]] = []

    def complete(self, outcomes: list[tuple[bool, Any]]) -> None:
        with self._lock:
            self._outcomes = outcomes
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(outcomes)

    def on_done(self, fn: Callable[[list[tuple[bool, Any]]], None]) -> None:
        """Call ``fn(outcomes)`` once complete (at once if it already is)."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(fn)
                return
        fn(self._outcomes)

    def wait(self) -> list[tuple[bool, Any]]:
        """The outcomes, once complete."""
        self._done.wait()
        return self._outcomes
