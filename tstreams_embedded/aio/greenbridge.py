"""Running the sync API's code on the event loop, suspended at each network wait.

Over a ``tcp://`` or ``zk://`` connection the async API does not re-implement producers,
transactions, consumers, groups, work queues and schedules: it runs the very code of the
sync API (and of :class:`~tstreams_embedded.net.client.RemoteBackend`: paging, size checks,
``ServerBusy`` and failover retries; and of the cluster client, :mod:`.cluster`) in a
*greenlet* on the event loop's thread. Where that code would
block for a reply, its transport (:class:`~.connection.AsyncConnection`, a ``zmq.asyncio``
socket) calls :func:`await_only`, which suspends the greenlet and hands the awaitable to
the coroutine that drives it (:meth:`LoopCalls.read`/:meth:`LoopCalls.write`); the loop
goes on with other work meanwhile, and the greenlet resumes with the reply. The same
technique as SQLAlchemy's asyncio extension: no thread per call, no thread at all.

Cancellation, as for the thread pool (:mod:`.offload`):

* a **write** (:meth:`LoopCalls.write`) is completed even if its coroutine is cancelled
  (a request already sent cannot be unsent); then ``CancelledError`` means it was
  applied, and otherwise its error is raised: nothing of it was applied;
* a **read** (:meth:`LoopCalls.read`) is abandoned: ``CancelledError`` is raised inside the
  sync code where it waits, which unwinds it as any error would (it changed nothing).

The sync code of one greenlet never runs concurrently with another's (one thread), and it
holds no non-reentrant lock across a network wait (the client-side locks of the sync API
are short, or re-entrant per transaction, which one task uses at a time).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from greenlet import getcurrent, greenlet

from .. import errors
from ..net.future import Future as Reply
from .offload import finish_before_cancelling

T = TypeVar("T")


class _LoopCall(greenlet):  # type: ignore[misc]  # (greenlet ships no type hints for subclassing)
    """A greenlet running one sync API call for a coroutine; it may suspend in :func:`await_only`."""


def in_loop_call() -> bool:
    """Whether the caller runs inside a :class:`LoopCalls` call (so it may :func:`await_only`)."""
    return isinstance(getcurrent(), _LoopCall)


def check_loop_call() -> None:
    """:class:`~tstreams_embedded.errors.InvalidArgument` unless the caller runs inside a
    loop call: a blocking call made directly on the event loop would stall it."""
    if not isinstance(getcurrent(), _LoopCall):
        raise errors.InvalidArgument(
            "a blocking call of the sync API was made on the event loop of an aio connection; "
            "await the aio API's method instead (engine.sync is for other threads)")


def await_only(awaitable: Awaitable[T]) -> T:
    """Suspend the sync code of the current loop call until ``awaitable`` is done; its result
    (or raise its error). Only inside :meth:`LoopCalls.read`/:meth:`LoopCalls.write`
    (:func:`check_loop_call` first)."""
    check_loop_call()
    result: T = getcurrent().parent.switch(awaitable)
    return result


def await_reply(reply: Reply) -> Any:
    """:func:`await_only` for the future of a request's reply (resolved by the loop)."""
    check_loop_call()
    return getcurrent().parent.switch(reply)


def as_asyncio(reply: Reply) -> asyncio.Future[Any]:
    """An asyncio future of the running loop resolved with ``reply`` (which this loop's
    tasks resolve: no thread hand-off)."""
    mirror: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def copy(done: Reply) -> None:
        if mirror.done():
            return
        error = done.exception()
        if error is not None:
            mirror.set_exception(error)
        else:
            mirror.set_result(done.result(0))

    reply.add_done_callback(copy)
    return mirror


async def _drive(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], complete: bool) -> T:
    """Run ``fn(*args, **kwargs)`` in a greenlet, awaiting what it waits for; see the module
    docstring for ``complete`` (a write) and cancellation."""
    call = _LoopCall(fn, getcurrent())
    awaited: Any = call.switch(*args, **kwargs)
    cancelled = False
    while not call.dead:
        # a reply is awaited through a mirror, which a cancellation may cancel with no harm
        # (the request goes on): no shield, one turn of the loop less per call
        reply = awaited if isinstance(awaited, Reply) else None
        future = as_asyncio(reply) if reply is not None else asyncio.ensure_future(awaited)
        try:
            if cancelled:
                await finish_before_cancelling(future)
            elif complete and reply is None:
                await asyncio.shield(future)
            else:
                await future
        except asyncio.CancelledError:
            if not complete:  # a read: unwind the sync code at its wait
                future.cancel()
                awaited = call.throw(asyncio.CancelledError())
                continue
            cancelled = True
            if reply is not None and future.cancelled():
                future = as_asyncio(reply)
            await finish_before_cancelling(future)
        except BaseException:  # noqa: BLE001, S110 - the future holds it, thrown into the call below
            pass
        if future.cancelled():
            awaited = call.throw(asyncio.CancelledError())
        elif future.exception() is not None:
            awaited = call.throw(future.exception())
        else:
            awaited = call.switch(future.result())
    if cancelled:
        raise asyncio.CancelledError
    result: T = awaited
    return result


class LoopCalls:
    """Runs the sync API's calls of a ``tcp://`` or ``zk://`` handle on the event loop (module docstring);
    the same interface as :class:`~.offload.Offload`, with no thread."""

    #: no pool: every call runs on the event loop's thread
    max_threads = 0

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the loop; a cancellation unwinds it (reads change nothing)."""
        return await _drive(fn, args, kwargs, complete=False)

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the loop, completed even if the caller is cancelled."""
        return await _drive(fn, args, kwargs, complete=True)

    def close(self) -> None:
        """Nothing to release (no threads)."""
