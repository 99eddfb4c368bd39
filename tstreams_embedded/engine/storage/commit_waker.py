"""Waking this process when *another* process commits to the same data directory.

A commit made through this process's :class:`~tstreams_embedded.engine.storage.core.Core` wakes its
waiters directly (``wait_for_commit``, subscribers, stream-processing apps). A commit made
by another process on the same directory (a second application, ``tstreams produce``, a
``tstreams serve`` sharing the directory) does not: without help, waiters would only notice
it when their wait times out.

So the first wait asks the kernel (inotify, Linux) to report writes to ``data.mdb``: every
LMDB commit writes its pages and meta page there. One thread per engine waits for those
events, together with a stop pipe, and calls ``on_change`` for each batch of them. The
watch is in place before the waiter first reads the commit sequence, so a commit that
lands between that read and the wait is never missed. Where inotify is not available the
waker does not start and waiters fall back to their timeouts.

Commits of this process produce events too; they cost one extra wake-up of the waiters,
who find nothing new and wait again.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class CommitWaker:
    """Calls ``on_change`` (from its own thread) whenever ``directory/data.mdb`` is written."""

    def __init__(self, directory: str, on_change: Callable[[], None]) -> None:
        self.path = os.path.join(directory, "data.mdb")
        self.on_change = on_change
        self._lock = threading.Lock()
        self._inotify: Any = None
        self._thread: threading.Thread | None = None
        self._stop_r = self._stop_w = -1
        self.unavailable = False  # inotify missing or refused: waiters rely on their timeouts
        self.wakeups = 0

    def ensure_started(self) -> bool:
        """Start watching (once); whether the watch is active."""
        if self._thread is not None:
            return True
        with self._lock:
            if self._thread is not None or self.unavailable:
                return self._thread is not None
            try:
                from inotify_simple import INotify, flags
            except ImportError:  # not Linux
                self.unavailable = True
                return False
            try:
                inotify = INotify()
                inotify.add_watch(self.path, flags.MODIFY)
            except OSError as exc:  # e.g. the per-user watch limit
                log.warning("cannot watch %s for other processes' commits (%s): waiters poll instead", self.path, exc)
                self.unavailable = True
                return False
            self._inotify = inotify
            self._stop_r, self._stop_w = os.pipe()
            thread = threading.Thread(target=self._run, name="tstreams-commit-waker", daemon=True)
            thread.start()
            self._thread = thread
            return True

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._inotify.fileno(), select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._stop_r in ready:
                return
            self._inotify.read(timeout=0)  # drain the events (one wake-up for all of them)
            self.wakeups += 1
            self.on_change()

    def close(self) -> None:
        """Stop the thread and release the watch (idempotent)."""
        with self._lock:
            thread, self._thread = self._thread, None
            self.unavailable = True  # never restarted after close
            if thread is None:
                return
            os.write(self._stop_w, b"x")
        thread.join()
        self._inotify.close()
        os.close(self._stop_r)
        os.close(self._stop_w)
