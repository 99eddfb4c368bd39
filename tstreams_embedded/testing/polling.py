"""Waiting for a condition without hand-written deadline loops.

:func:`eventually` is for tests: it returns the predicate's value as soon as it is truthy,
or fails with an :class:`AssertionError` that says what was seen last. :func:`wait_until`
is the same loop for code that wants a plain ``bool`` (benchmarks, the demo).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_NOTHING = object()


def eventually(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.02,
    *,
    message: str | Callable[[], str] = "",
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate()`` until it returns a truthy value, and return that value.

    ``predicate`` is called at least once, then every ``interval`` seconds until ``timeout``
    seconds have passed. Exceptions of the types in ``ignore`` count as "not yet" (for
    example ``ConnectionError`` while a server restarts); any other exception propagates
    at once.

    Raises :class:`AssertionError` on timeout. Its message holds ``message`` (a string,
    or a callable evaluated only on failure), the predicate's name, the number of calls and
    the last value returned or the last exception ignored (which is also chained as the
    ``__cause__``).
    """
    if timeout < 0 or interval < 0:
        raise ValueError("timeout and interval must be >= 0")
    start = time.monotonic()
    deadline = start + timeout
    calls = 0
    last: object = _NOTHING
    last_exc: BaseException | None = None
    while True:
        calls += 1
        try:
            value = predicate()
        except ignore as exc:
            last_exc, last = exc, _NOTHING
        else:
            if value:
                return value
            last_exc, last = None, value
        now = time.monotonic()
        if now >= deadline:
            break
        time.sleep(min(interval, max(0.0, deadline - now)))
    what = message() if callable(message) else message
    name = getattr(predicate, "__qualname__", None) or repr(predicate)
    seen = f"last exception: {last_exc!r}" if last_exc is not None else f"last value: {last!r}"
    text = f"{name} not true after {time.monotonic() - start:.2f} s ({calls} calls); {seen}"
    raise AssertionError(f"{what}: {text}" if what else text) from last_exc


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.02) -> bool:
    """Poll ``predicate`` like :func:`eventually`; return ``True`` as soon as it is truthy,
    ``False`` on timeout (never raises for the timeout)."""
    try:
        eventually(predicate, timeout, interval)
    except AssertionError:
        return False
    return True
