"""Running the blocking engine calls off the event loop, in a bounded thread pool.

Embedded, every call of the sync API that may block (an LMDB write and
its fsync, a read) runs in an :class:`Offload`'s pool of at
most ``max_threads`` threads, so the event loop never waits for storage. The embedded
engine's group commit (``engine/storage/committer.py``) merges the writes that these threads make
concurrently into one LMDB transaction and one fsync: many small awaits share a disk sync.
(Over ``tcp://`` and ``zk://`` the calls run on the loop instead, with no thread per call:
:mod:`.greenbridge`, under the same cancellation rule.)

Cancellation of a write (:meth:`Offload.write`) never leaves it half done and always says
what happened: a write already handed to its thread cannot be stopped, so the coroutine
waits for it to finish before the cancellation goes on. Then

* if the write was applied, :class:`asyncio.CancelledError` is raised: **a cancelled write
  call that raises CancelledError was committed** (durably, when the call is durable);
* if the write failed, its error (e.g. ``TransactionExpired``) is raised instead, and
  nothing of it was applied (every write is atomic).

Reads (:meth:`Offload.read`) are simply abandoned when cancelled: they change nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .. import errors

T = TypeVar("T")

#: the default bound on the threads that run blocking engine calls
DEFAULT_MAX_THREADS = 32


def check_max_threads(max_threads: Any) -> int:
    """``max_threads`` if it is an integer in 1..1024, else :class:`InvalidArgument`."""
    if isinstance(max_threads, bool) or not isinstance(max_threads, int) or not 1 <= max_threads <= 1024:
        raise errors.InvalidArgument(f"max_threads must be an integer in 1..1024, got {max_threads!r}")
    return max_threads


class Runner(Protocol):
    """Where the sync API's calls of an async handle run: :class:`Offload` (a thread pool,
    embedded) or :class:`~.greenbridge.LoopCalls` (the event loop, ``tcp://`` and ``zk://``)."""

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    def close(self) -> None: ...


class Offload:
    """A bounded pool for the blocking calls of one async engine handle."""

    def __init__(self, max_threads: int = DEFAULT_MAX_THREADS, name: str = "tstreams-aio") -> None:
        self.max_threads = check_max_threads(max_threads)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_threads, thread_name_prefix=name)

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in the pool; a cancellation abandons it (reads change nothing)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in the pool, completed even if the caller is cancelled
        (see the module docstring for what the caller then sees)."""
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await finish_before_cancelling(future)
            error = future.exception()
            if error is not None:
                raise error from None
            raise

    def close(self) -> None:
        """Let running calls finish and release the threads (idempotent)."""
        self._pool.shutdown(wait=False)


async def finish_before_cancelling(future: asyncio.Future[Any]) -> None:
    """Wait for ``future`` even through further cancellations (the caller re-raises after)."""
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError:
            continue
