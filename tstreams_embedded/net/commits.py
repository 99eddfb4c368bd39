"""Waking generators that wait for the engine's next commit.

A ``STREAM`` handler yields :class:`~tstreams_embedded.net.registry.WaitCommit` to wait
until the engine's commit generation exceeds what it has seen (``wait_for_commit``,
``watch``). The :class:`CommitWatcher` keeps those waiters; a thread blocks in the
engine's ``wait_for_commit`` **only while some generator waits** (so an ordinary write
load pays nothing for it) and posts each new generation to the loop, which resumes the
waiters that have not seen it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tornado.ioloop import IOLoop

from .session import Running

log = logging.getLogger(__name__)

#: ``commit_watch(seen, timeout) -> generation``: the engine's ``wait_for_commit``.
CommitWatch = Callable[[int, float], int]


class CommitWatcher:
    """The waiters for a commit and the thread that watches for one.

    ``resume(running, generation)`` is called on the loop for each waiter whose generation
    has been passed. Without ``commit_watch`` nothing is ever passed: waits end only on
    their timeouts (handled by the caller).
    """

    def __init__(self, loop: IOLoop, commit_watch: CommitWatch | None,
                 resume: Callable[[Running, int], None]) -> None:
        self.generation = -1  # the newest commit generation known on the loop
        self._loop = loop
        self._commit_watch = commit_watch
        self._resume = resume
        self._waiters: dict[int, tuple[Running, int]] = {}  # id(running) -> (running, seen)
        self._wanted = threading.Event()  # set while generators wait for a commit
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._commit_watch is not None:
            self._thread = threading.Thread(target=self._watch, args=(self._commit_watch,),
                                            name="tstreams-commit-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Let the thread end (within half a second)."""
        self._stopping = True

    def current(self) -> int:
        """The newest generation known, read from the engine now if the thread sleeps."""
        if self._commit_watch is not None and not self._wanted.is_set():
            try:
                self.generation = max(self.generation, self._commit_watch(-1, 0))
            except Exception:
                pass
        return self.generation

    def add(self, r: Running, seen: int) -> None:
        """Resume ``r`` once the generation exceeds ``seen``."""
        self._waiters[id(r)] = (r, seen)
        self._wanted.set()

    def discard(self, r: Running) -> bool:
        """Stop waiting for ``r``; return whether it was waiting."""
        return self._waiters.pop(id(r), None) is not None

    def _watch(self, commit_watch: CommitWatch) -> None:
        """The thread: post each new generation to the loop while someone waits."""
        seen = -1
        while not self._stopping:
            if not self._wanted.wait(0.5):
                continue
            try:
                g = commit_watch(seen, 0.5)
            except Exception:  # engine closed or failing: stop watching
                log.debug("commit watch ended", exc_info=True)
                return
            if g != seen:
                seen = g
                self._loop.add_callback(self._on_commit, g)

    def _on_commit(self, g: int) -> None:
        self.generation = max(self.generation, g)
        if not self._waiters:
            self._wanted.clear()
            return
        woken = [k for k, (_, seen) in self._waiters.items() if seen < g]
        for k in woken:
            r, _ = self._waiters.pop(k)
            self._resume(r, g)
        if not self._waiters:
            self._wanted.clear()
