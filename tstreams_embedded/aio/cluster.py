"""Over ``zk://``: the cluster client's code on the event loop, with no thread per call.

:func:`connect_cluster_on_loop` makes the same
:class:`~tstreams_embedded.cluster.client.ClusterBackend` as ``ts.connect("zk://…")``, with
two differences that keep every call on the loop (run in a greenlet by
:class:`~.greenbridge.LoopCalls`, as over ``tcp://``, :mod:`.remote`):

* its connections to the leader (and to a follower, for follower reads) are
  :class:`~.connection.AsyncConnection` s: each request suspends the greenlet;
* its waits are :class:`LoopWaits`: a new leader, learnt by kazoo's watch on kazoo's
  thread, is handed to the loop with ``call_soon_threadsafe`` and applied there; waiting for
  a leader or a connection, the retries' pauses (:data:`~tstreams_embedded.cluster.client.LEADER_RETRY`)
  and follower lookups in ZooKeeper suspend the greenlet instead of blocking the loop.

kazoo keeps its own threads (one client per handle: its connection and its callbacks),
which follow ZooKeeper; no thread is started per call. The ZooKeeper session is opened on
a short-lived thread of its own (:func:`connect_cluster_on_loop` is awaited), since kazoo's
start blocks; closing the handle stops kazoo on the loop's thread (once per handle).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import errors
from ..cluster.client import ClusterBackend
from ..engine.api.engine import DEFAULT_TXN_TTL, Engine, check_handle_options
from .connection import AsyncConnection
from .greenbridge import LoopCalls, await_only

#: how often a call of the sync handle on another thread looks again for a leader (seconds)
OFF_LOOP_POLL = 0.02
#: how long a call on another thread waits for the loop to make a connection (seconds)
OFF_LOOP_TIMEOUT = 30.0


class LoopWaits:
    """:class:`~tstreams_embedded.cluster.leader_waits.LeaderWaits` for calls that run in
    greenlets on ``loop`` (module docstring). A call of the sync handle made on another
    thread (``engine.sync``) waits there by polling instead (its requests are handed to
    the loop by the connection)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._changed = asyncio.Event()

    def deliver(self, change: Callable[[], None], after: Callable[[], None]) -> None:
        """From kazoo's thread: ``change`` and ``after`` run on the loop (nothing if it is closed)."""
        def apply() -> None:
            change()
            self._pulse()
            after()

        with contextlib.suppress(RuntimeError):  # the loop is closed: no call is left to tell
            self._loop.call_soon_threadsafe(apply)

    def _pulse(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def wake(self) -> None:
        if _running_loop() is self._loop:
            self._pulse()
        else:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._pulse)

    def _elsewhere(self) -> bool:
        """Whether the caller runs on another thread than the loop's."""
        return _running_loop() is not self._loop

    def wait_change(self, changed: Callable[[], bool], seconds: float) -> None:
        if changed():
            return
        if self._elsewhere():
            time.sleep(min(seconds, OFF_LOOP_POLL))
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await_only(asyncio.wait_for(self._changed.wait(), seconds))

    def sleep(self, seconds: float) -> None:
        if self._elsewhere():
            time.sleep(seconds)
        else:
            await_only(asyncio.sleep(seconds))

    def zk_result(self, result: Any, timeout: float) -> Any:
        """kazoo's callback (its thread) hands the outcome to the loop; the greenlet waits."""
        if self._elsewhere():
            return result.get(timeout=timeout)
        done: asyncio.Future[Any] = self._loop.create_future()

        def settle(outcome: Any) -> None:
            if done.done():
                return
            if outcome.successful():
                done.set_result(outcome.value)
            else:
                done.set_exception(outcome.exception)

        def linked(outcome: Any) -> None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(settle, outcome)

        result.rawlink(linked)
        try:
            return await_only(asyncio.wait_for(done, timeout))
        except asyncio.TimeoutError:
            raise errors.ClusterUnavailable(f"ZooKeeper did not answer within {timeout:g} s") from None


def connection_on(loop: asyncio.AbstractEventLoop) -> Callable[..., AsyncConnection]:
    """The cluster client's transport factory: an :class:`~.connection.AsyncConnection` on
    ``loop``, made there even when a call of the sync handle on another thread needs it."""
    def make(*args: Any, **kwargs: Any) -> AsyncConnection:
        if _running_loop() is loop:
            return AsyncConnection(*args, **kwargs)

        async def made_on_loop() -> AsyncConnection:
            return AsyncConnection(*args, **kwargs)

        try:
            return asyncio.run_coroutine_threadsafe(made_on_loop(), loop).result(OFF_LOOP_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise errors.EngineClosed("the event loop of this aio connection is not running") from None

    return make


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def connect_cluster_on_loop(url: str, calls: LoopCalls, *, timeout: float = 30.0,
                                  txn_ttl: float | None = None, keepalive_interval: float | None = -1,
                                  **options: Any) -> tuple[Engine, float | None]:
    """The engine of a ``zk://`` cluster whose calls ``calls`` runs on the running loop, and
    the keep-alive interval its task should use (None: none). Options as ``ts.connect``."""
    ttl = DEFAULT_TXN_TTL if txn_ttl is None else txn_ttl
    check_handle_options(ttl, keepalive_interval)
    if keepalive_interval == -1:
        keepalive_interval = max(min(ttl / 10.0, 6.0), 0.05)
    loop = asyncio.get_running_loop()
    waits = LoopWaits(loop)
    opened: asyncio.Future[ClusterBackend] = loop.create_future()

    def settle(backend: ClusterBackend | None, error: BaseException | None) -> None:
        if opened.cancelled():
            if backend is not None:
                threading.Thread(target=backend.close, name="tstreams-aio-zk-close", daemon=True).start()
        elif error is not None:
            opened.set_exception(error)
        else:
            opened.set_result(backend)  # type: ignore[arg-type]

    def open_session() -> None:  # kazoo's start blocks: on a thread of its own, once per handle
        try:
            backend = ClusterBackend(url, timeout=timeout, transport=connection_on(loop), waits=waits,
                                     **options)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, backend, None)

    threading.Thread(target=open_session, name="tstreams-aio-zk-open", daemon=True).start()
    backend = await opened
    try:
        engine = await calls.write(Engine, backend, txn_ttl=ttl, keepalive_interval=None)
    except BaseException:
        await calls.write(backend.close)
        raise
    return engine, keepalive_interval
