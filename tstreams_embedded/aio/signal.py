"""Waking coroutines when a commit lands: one watcher per async engine handle.

The watcher waits in ``Backend.wait_for_commit`` (embedded: woken by this process's commits
at once and by other processes' through :mod:`~tstreams_embedded.engine.storage.commit_waker`;
remote: a long poll that the server answers when a commit lands), on one thread of its own,
and wakes every coroutine waiting in :meth:`CommitSignal.wait_past`. However many consumers
wait, they cost one thread and no polling. Over a ``tcp://`` connection not even that: the
server's ``watch`` subscription reports every commit, received by the loop itself (the
connection is a ``zmq.asyncio`` socket, :mod:`.connection`); over ``zk://`` the long poll
runs on the loop too (a greenlet, which the cluster client moves to a new leader).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib

from .. import errors
from ..engine.protocol.backend import Backend
from ..net.client import RemoteBackend
from .greenbridge import as_asyncio
from .offload import Runner

#: how long one wait_for_commit call lasts before the watcher checks whether it should stop
WATCH_SLICE = 1.0


class CommitSignal:
    """The newest commit sequence this handle knows of, and a way to wait for the next."""

    def __init__(self, backend: Backend, runner: Runner, on_loop: bool = False) -> None:
        """``on_loop``: ``runner`` runs ``backend``'s calls on the loop: a ``RemoteBackend``'s
        commit notifications are followed, another's (a cluster's) long poll runs there;
        otherwise a long poll on a thread of its own."""
        self._backend = backend
        self._runner = runner
        self._on_loop = on_loop
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.sequence = -1
        self._changed: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def current(self) -> int:
        """The newest commit sequence now (read from the engine, not waited for)."""
        if self.sequence < 0:
            self.sequence = await self._runner.read(self._backend.wait_for_commit, -1, 0)
        return self.sequence

    async def wait_past(self, seen: int, timeout: float | None = None) -> int:
        """Wait until a commit newer than ``seen`` is known (or ``timeout`` seconds); the
        newest sequence. ``EngineClosed`` once the handle is closed; the error that stopped
        the watcher (e.g. ``RemoteError``) if it failed (the next wait starts it again)."""
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while self.sequence <= seen:
            if self._closed:
                raise errors.EngineClosed("this engine handle is closed")
            self._start()
            assert self._changed is not None
            event = self._changed
            if deadline is None:
                await event.wait()
            else:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(event.wait(), left)
            self._raise_failure()
        return self.sequence

    def _raise_failure(self) -> None:
        """Raise the error that ended the watcher, if one did (once; it is restarted next)."""
        task = self._task
        if task is not None and task.done() and not task.cancelled():
            error = task.exception()
            if error is not None:
                self._task = None
                raise error

    def _start(self) -> None:
        if self._task is None or self._task.done():
            if self._changed is None:
                self._changed = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="tstreams-aio-commit-watch")

    def _on_commit(self, sequence: int) -> None:
        if sequence > self.sequence:
            self.sequence = sequence
            self._pulse()

    async def _watch(self) -> None:
        try:
            if self._on_loop and isinstance(self._backend, RemoteBackend):
                await self._subscribe()
            else:
                await self._long_poll()
        except errors.EngineClosed:
            self._closed = True
        finally:
            self._pulse()

    async def _long_poll(self) -> None:
        if self._on_loop:
            while not self._closed:
                self._on_commit(await self._runner.read(self._backend.wait_for_commit, self.sequence, WATCH_SLICE))
            return
        loop = asyncio.get_running_loop()
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tstreams-aio-watch")
        while not self._closed:
            seq = await loop.run_in_executor(self._pool, self._backend.wait_for_commit, self.sequence, WATCH_SLICE)
            self._on_commit(seq)

    async def _subscribe(self) -> None:
        """Follow the server's commit notifications until the subscription ends (the
        connection closed or failed: its error ends the watcher) or :meth:`close` cancels it."""
        backend = self._backend
        assert isinstance(backend, RemoteBackend)
        subscription = await self._runner.read(backend.watch, await self.current(), self._on_commit)
        try:
            await as_asyncio(subscription.future)
        finally:
            subscription.cancel()

    def _pulse(self) -> None:
        """Wake every waiter (each re-checks its own condition) and arm a fresh event."""
        if self._changed is not None:
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    async def close(self) -> None:
        """Stop the watcher and wake its waiters with ``EngineClosed`` (idempotent)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, errors.TStreamsError):
                await task
        self._pulse()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
