"""One retry policy for every "try again after a pause" loop, in the manner of kazoo's
``KazooRetry``.

A :class:`RetryPolicy` says *what* is retried (the exception types), *how often* (a
number of tries and/or a deadline) and *how long to pause* between tries (an initial
delay, multiplied by ``backoff`` after each failed try up to ``max_delay``, and shortened
by up to ``jitter`` of itself so that many clients retrying at once spread out).
:meth:`RetryPolicy.call` runs a function under the policy.

Differences from ``KazooRetry``, on purpose:

* the policy is a frozen value; per-call state (the tries made, the current delay, the
  deadline's start) lives in :meth:`~RetryPolicy.call`, so one policy is shared freely
  between threads, and a variant is ``dataclasses.replace(policy, deadline=...)``;
* it never reads a clock or sleeps on its own: the caller passes ``clock`` and ``sleep``
  (a cluster node passes its injected runtime's, see ``cluster/runtime.py``, so that the
  deterministic simulation schedules the pauses; a node passes ``stopping.wait`` so that
  a stop cuts a pause short) and, for jitter, ``rand``;
* when the tries or the deadline run out, or ``stop()`` says to stop, the *last error* is
  raised again (kazoo raises ``RetryFailedError``): callers keep the specific exception
  of :mod:`tstreams_embedded.errors` they already document;
* jitter only shortens a pause (kazoo's may lengthen it), so no pause exceeds
  ``max_delay``; at the deadline a last try is made (the final pause is cut to end there).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


def _never() -> bool:
    return False


@dataclass(frozen=True)
class RetryPolicy:
    """Retry a call that raised one of ``retry_on`` (see the module docstring).

    ``max_tries``: tries in all, the first included (``None``: no limit). ``deadline``:
    seconds from the first try after which no new try starts (``None``: no limit). The
    pause after the ``k``-th failed try (``k`` from 0) is ``min(delay * backoff**k,
    max_delay)``, shortened by a random fraction of at most ``jitter`` (0 to 1).
    """

    retry_on: tuple[type[BaseException], ...]
    max_tries: int | None = None
    deadline: float | None = None
    delay: float = 0.1
    backoff: float = 2.0
    max_delay: float = 1.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not self.retry_on or not all(isinstance(t, type) and issubclass(t, BaseException)
                                        for t in self.retry_on):
            raise ValueError(f"retry_on must name exception types, got {self.retry_on!r}")
        if self.max_tries is not None and self.max_tries < 1:
            raise ValueError(f"max_tries must be at least 1 (or None), got {self.max_tries}")
        if self.deadline is not None and not self.deadline >= 0:
            raise ValueError(f"deadline must be >= 0 seconds (or None), got {self.deadline}")
        if not 0 <= self.delay <= self.max_delay:
            raise ValueError(f"need 0 <= delay <= max_delay, got delay={self.delay}, max_delay={self.max_delay}")
        if not self.backoff >= 1:
            raise ValueError(f"backoff must be >= 1, got {self.backoff}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter}")

    def delays(self) -> Iterator[float]:
        """The pauses before jitter, one per failed try: never decreasing, at most
        :attr:`max_delay` (endless; the tries and the deadline bound how many are used)."""
        delay = self.delay
        while True:
            yield delay
            delay = min(delay * self.backoff, self.max_delay)

    def pause(self, delay: float, rand: Callable[[], float]) -> float:
        """``delay`` shortened by the jitter: within ``[delay * (1 - jitter), delay]``."""
        return delay * (1.0 - self.jitter * rand()) if self.jitter else delay

    def call(self, fn: Callable[[], T], *, clock: Callable[[], float], sleep: Callable[[float], object],
             stop: Callable[[], bool] = _never, rand: Callable[[], float] = random.random) -> T:
        """``fn()``'s result, trying again after each error of :attr:`retry_on` while the
        policy allows; any other error propagates at once. ``clock`` (seconds, never
        decreasing) measures the deadline; ``sleep(seconds)`` pauses; ``stop()`` true ends
        the retries (checked after each failed try); ``rand()`` in ``[0, 1)`` draws the jitter.
        When the retries end, the last error is raised again."""
        end = None if self.deadline is None else clock() + self.deadline
        tries = 0
        for delay in self.delays():
            tries += 1
            try:
                return fn()
            except self.retry_on:
                if (self.max_tries is not None and tries >= self.max_tries) or stop():
                    raise
                pause = self.pause(delay, rand)
                if end is not None:
                    left = end - clock()
                    if left <= 0:
                        raise
                    pause = min(pause, left)
            sleep(pause)
        raise AssertionError("unreachable: delays() is endless")
