"""How the cluster client (:mod:`.client`) learns of leader changes and waits, per caller kind.

kazoo reports a new leader on its own thread. :class:`ThreadWaits` (``ts.connect``) applies
it there under a condition that the calling threads wait on. The asyncio API passes
:class:`tstreams_embedded.aio.cluster.LoopWaits` instead: the change is handed to the event
loop (``call_soon_threadsafe``) and applied there, and every wait (for a leader, for a
connection, a retry's pause, a ZooKeeper read) suspends the calling greenlet instead of
blocking a thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol


class LeaderWaits(Protocol):
    """Where leader changes are applied and how the cluster client's calls wait."""

    def deliver(self, change: Callable[[], None], after: Callable[[], None]) -> None:
        """Apply ``change`` (a new leader, from kazoo's thread) where the calls see it, wake
        the calls waiting in :meth:`wait_change`, then run ``after`` (closing the old leader's
        connection)."""

    def wake(self) -> None:
        """Wake the calls waiting in :meth:`wait_change` (e.g. on close)."""

    def wait_change(self, changed: Callable[[], bool], seconds: float) -> None:
        """Return once ``changed()`` is true or a change was delivered, or after ``seconds``."""

    def sleep(self, seconds: float) -> None:
        """A pause between two attempts."""

    def zk_result(self, result: Any, timeout: float) -> Any:
        """The value of a kazoo ``IAsyncResult`` (or its error), waited for at most
        ``timeout`` seconds (then kazoo's timeout exception)."""


class ThreadWaits:
    """Calls on any thread: changes applied on kazoo's thread under a condition."""

    def __init__(self) -> None:
        self._changed = threading.Condition()

    def deliver(self, change: Callable[[], None], after: Callable[[], None]) -> None:
        with self._changed:
            change()
            self._changed.notify_all()
        after()

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def wait_change(self, changed: Callable[[], bool], seconds: float) -> None:
        with self._changed:
            if not changed():
                self._changed.wait(seconds)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def zk_result(self, result: Any, timeout: float) -> Any:
        return result.get(timeout=timeout)
