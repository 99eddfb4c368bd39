"""Waiting for the next commit, for ``tstreams consume --follow``.

A follower reads until nothing is left, then waits for a commit and reads again. It never
polls on a timer for new data; it calls the backend's ``wait_for_commit``:

* **remote** (``--connect``): the server's long poll, answered as soon as the server
  commits (the server is woken by its own commit, see ``net/commits.py``);
* **embedded** (``--data``): the engine is woken by its own commits and, through inotify,
  by commits that other processes make to the same directory
  (:mod:`tstreams_embedded.engine.storage.commit_waker`).

Each wait compares commit sequences, so a commit that lands between a read and the wait is
never missed. A wait also ends after ``idle`` seconds without a commit (a safety net; the
follower then just reads again).
"""

from __future__ import annotations

from ..engine.protocol.backend import Backend


class CommitWaiter:
    """``generation()`` before reading; ``wait(generation)`` when a read found nothing."""

    def __init__(self, backend: Backend, idle: float = 5.0) -> None:
        self.backend = backend
        self.idle = idle

    def generation(self) -> int:
        """The newest commit sequence."""
        return self.backend.wait_for_commit(-1, 0)

    def wait(self, seen: int) -> None:
        """Return once a commit after ``seen`` happened (or after ``idle`` seconds)."""
        self.backend.wait_for_commit(seen, self.idle)
