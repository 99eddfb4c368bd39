"""Waiting for the next commit, for ``tstreams consume --follow``.

A follower reads until nothing is left, then waits for a commit and reads again. It never
polls on a timer for new data:

* **remote** (``--connect``): the server's ``wait_for_commit`` long poll, answered as soon as
  the server commits (the server is woken by its own commit, see ``net/commits.py``);
* **embedded** (``--data``): commits by *other processes* do not wake this process's engine,
  so the follower asks the kernel (inotify) to wake it when ``data.mdb`` is written: every
  LMDB commit writes its pages and meta page there. The watch is set before the first read,
  so a commit that lands between a read and the wait is never missed. Where inotify is not
  available, it falls back to checking the commit-log sequence every 100 ms.

A wait also ends after ``idle`` seconds without a commit (a safety net; the follower then
just reads again).
"""

from __future__ import annotations

import os
from typing import Any

from ..engine.backend import Backend

FALLBACK_POLL = 0.1


class CommitWaiter:
    """``generation()`` before reading; ``wait(generation)`` when a read found nothing."""

    def __init__(self, backend: Backend, directory: str | None = None, idle: float = 5.0) -> None:
        self.backend = backend
        self.idle = idle
        self._inotify: Any = None
        if directory is not None:
            try:
                from inotify_simple import INotify, flags
            except ImportError:  # not Linux: the fallback below
                pass
            else:
                self._inotify = INotify()
                self._inotify.add_watch(os.path.join(directory, "data.mdb"), flags.MODIFY)
        self._local = directory is not None

    def generation(self) -> int:
        """The newest commit sequence; wake-ups seen so far are consumed."""
        if self._inotify is not None:
            self._inotify.read(timeout=0)
        return self.backend.wait_for_commit(-1, 0)

    def wait(self, seen: int) -> None:
        """Return once a commit after ``seen`` happened (or after ``idle`` seconds)."""
        if not self._local:
            self.backend.wait_for_commit(seen, self.idle)
            return
        if self.backend.wait_for_commit(seen, 0) > seen:
            return
        if self._inotify is not None:
            self._inotify.read(timeout=int(self.idle * 1000))
            return
        self.backend.wait_for_commit(seen, FALLBACK_POLL)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
