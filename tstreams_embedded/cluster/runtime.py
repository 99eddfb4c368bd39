"""Every blocking and timing primitive the cluster code uses, behind one injected interface.

A :class:`~.node.Node` (and its log, applier, election, follower and replication parts)
never calls :mod:`threading` or :mod:`time` for a wait, a lock, a thread or a timeout: it
asks its :class:`Runtime`. Production passes :data:`REAL` (:class:`ThreadingRuntime`:
plain threads and the process's monotonic clock). The deterministic simulation
(:mod:`tstreams_embedded.testing.simulation`) passes one whose tasks run one at a time in
an order drawn from a seed, on a simulated clock, so that a seed replays a run step for step.

Rules for code under ``cluster/`` (so that it keeps running under the simulation):

* start threads with :meth:`Runtime.spawn`; make events, locks and conditions with
  :meth:`Runtime.event`, :meth:`~Runtime.lock`, :meth:`~Runtime.rlock` and
  :meth:`~Runtime.condition`; sleep with :meth:`Runtime.sleep`; mark a point where a
  preempted thread opens a race with :meth:`Runtime.preempt`; read timeouts from
  :meth:`Runtime.monotonic` (leases and entry times come from the node's
  :class:`~.timesource.TimeSource`, which a test may jump);
* never hold an LMDB write transaction across one of these waits (the simulation parks the
  task, and another task of the node would block on LMDB's own mutex);
* a plain :class:`threading.Lock` is allowed only around code that never waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol


class Event(Protocol):
    """:class:`threading.Event`'s interface."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Lock(Protocol):
    """:class:`threading.Lock`'s (or ``RLock``'s) interface."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...

    def release(self) -> None: ...

    def __enter__(self) -> bool: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None, /) -> None: ...


class Condition(Protocol):
    """:class:`threading.Condition`'s interface."""

    def __enter__(self) -> bool: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None, /) -> None: ...

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...

    def release(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...

    def notify(self, n: int = 1) -> None: ...

    def notify_all(self) -> None: ...


class Task(Protocol):
    """A started task (:class:`threading.Thread`'s interface, as far as the node uses it)."""

    @property
    def name(self) -> str: ...

    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool: ...


class Runtime(Protocol):
    """Tasks, waits and the clock timeouts are measured on (see the module docstring)."""

    def monotonic(self) -> float:
        """Seconds, never decreasing: what timeouts and waits are measured on."""

    def sleep(self, seconds: float) -> None: ...

    def spawn(self, name: str, target: Callable[..., Any], *args: Any) -> Task:
        """Start ``target(*args)`` as a daemon task named ``name``."""

    def event(self) -> Event: ...

    def lock(self) -> Lock: ...

    def rlock(self) -> Lock: ...

    def condition(self, lock: Lock | None = None) -> Condition: ...

    def preempt(self, point: str) -> None:
        """A point where a real thread may lose the CPU for a while and a race with another
        thread matters (named ``point``): nothing in production; the simulation may run other
        tasks here, for a simulated while."""


class ThreadingRuntime:
    """The production :class:`Runtime`: :mod:`threading` and :func:`time.monotonic`."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def spawn(self, name: str, target: Callable[..., Any], *args: Any) -> Task:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        return thread

    def event(self) -> Event:
        return threading.Event()

    def lock(self) -> Lock:
        return threading.Lock()

    def rlock(self) -> Lock:
        return threading.RLock()

    def condition(self, lock: Lock | None = None) -> Condition:
        return threading.Condition(lock)  # type: ignore[arg-type]  # (a runtime Lock is a threading one here)

    def preempt(self, point: str) -> None:
        pass


#: The runtime of production nodes.
REAL: Runtime = ThreadingRuntime()
