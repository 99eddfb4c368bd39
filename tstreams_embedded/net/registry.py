"""Handlers registered by method name.

Three kinds, fixed at registration:

* ``CALL`` — a plain function; its return value is the one response.
* ``STREAM`` — a generator function giving N responses. Each yielded value is sent at
  once (flag ``MORE``); the generator's ``return`` value is the final response. Yielding a
  :class:`Directive` (:class:`Sleep`, :class:`WaitCommit`) parks the generator instead of
  sending anything. The server resumes generators one step at a time from its loop, so a
  generator never blocks the loop or other generators.
* ``NOTIFY`` — fire-and-forget: no response, not even for errors (they are counted).

A ``CALL`` may name an ``executor``: ``"inline"`` (run in the loop; for fast reads),
``"pool"`` (a thread pool; for slow calls) or ``"write"`` (the server's ordered write
executor, which passes a whole batch of queued calls to the handler's ``batch`` function).

Every handler receives a :class:`~tstreams_embedded.net.session.Session` first, then the
request's arguments.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import InvalidArgument
from .deferred import Deferred

CALL = "call"
STREAM = "stream"
NOTIFY = "notify"
EXECUTORS = ("inline", "pool", "write")
VARIADIC = 1 << 30  # max_args of a handler taking *args

#: A ``write`` handler's batch function: the argument lists of several calls, in arrival
#: order, to one ``(ok, value or exception)`` each, or a :class:`~.deferred.Deferred` of them.
BatchFn = Callable[[Sequence[Sequence[Any]]], "list[tuple[bool, Any]] | Deferred"]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Handler:
    name: str
    kind: str
    fn: Callable[..., Any]
    executor: str = "inline"
    batch: BatchFn | None = None
    min_args: int = 0
    max_args: int = 0
    #: How the server runs it: the ``executor`` of a ``CALL``, else its ``kind`` (set from
    #: them; a field rather than a property, as the server reads it for every request).
    route: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "route", self.executor if self.kind == CALL else self.kind)

    def arity_text(self) -> str:
        """The number of arguments it takes, in words (for error messages)."""
        if self.max_args >= VARIADIC:
            return f"at least {self.min_args}"
        if self.min_args == self.max_args:
            return str(self.min_args)
        return f"{self.min_args} to {self.max_args}"


class Directive:
    """A value a ``STREAM`` handler yields to wait rather than to respond."""


@dataclass(frozen=True)
class Sleep(Directive):
    """Resume the generator after ``seconds``."""

    seconds: float


@dataclass(frozen=True)
class WaitCommit(Directive):
    """Resume when the engine's commit generation exceeds ``seen`` or after ``timeout`` seconds."""

    seen: int
    timeout: float


class Registry:
    """A mapping of method name -> :class:`Handler`."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        #: ``get(name)``: the handler of ``name`` or None (the mapping's own ``get``: the
        #: server looks up every request's method, so no Python-level call is added).
        self.get: Callable[[str], Handler | None] = self._handlers.get

    def __contains__(self, name: str) -> bool:
        return name in self._handlers

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def add(
        self,
        name: str,
        fn: Callable[..., Any],
        kind: str = CALL,
        executor: str = "inline",
        batch: BatchFn | None = None,
    ) -> Handler:
        """Register ``fn`` under ``name``. See the module docstring for kinds and executors."""
        if kind not in (CALL, STREAM, NOTIFY):
            raise InvalidArgument(f"unknown handler kind {kind!r}")
        if executor not in EXECUTORS:
            raise InvalidArgument(f"unknown executor {executor!r}")
        if kind == STREAM and not inspect.isgeneratorfunction(fn):
            raise InvalidArgument(f"stream handler {name!r} must be a generator function")
        if executor == "write" and (kind != CALL or batch is None):
            raise InvalidArgument("the write executor needs a CALL handler with a batch function")
        lo, hi = _arity(fn)
        h = Handler(name, kind, fn, executor, batch, lo, hi)
        self._handlers[name] = h
        return h

    def call(self, name: str, executor: str = "inline") -> Callable[[F], F]:
        """Decorator: register a plain (one response) handler."""

        def deco(fn: F) -> F:
            self.add(name, fn, CALL, executor)
            return fn

        return deco

    def stream(self, name: str) -> Callable[[F], F]:
        """Decorator: register a generator (N responses) handler."""

        def deco(fn: F) -> F:
            self.add(name, fn, STREAM)
            return fn

        return deco

    def notify(self, name: str) -> Callable[[F], F]:
        """Decorator: register a fire-and-forget (no response) handler."""

        def deco(fn: F) -> F:
            self.add(name, fn, NOTIFY)
            return fn

        return deco


def _arity(fn: Callable[..., Any]) -> tuple[int, int]:
    """(min, max) positional arguments after the session; max is large for ``*args``."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    lo = hi = 0
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            return lo, VARIADIC
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            hi += 1
            if p.default is p.empty:
                lo += 1
    return lo, hi
