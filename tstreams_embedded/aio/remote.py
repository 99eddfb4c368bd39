"""Over ``tcp://``: the sync client's code on the event loop, with no thread per call.

:func:`connect_on_loop` makes the same :class:`~tstreams_embedded.engine.api.engine.Engine` over a
:class:`~tstreams_embedded.net.client.RemoteBackend` as ``ts.connect``, but the backend's
transport is an :class:`~.connection.AsyncConnection` (a ``zmq.asyncio`` DEALER on the
running loop), and every call of the async API runs that engine's code in a greenlet on the
loop (:class:`~.greenbridge.LoopCalls`): producers, transactions, consumers and ``async
for``, checkpoints, groups, subscriptions, work queues, schedules, stream administration
and reads. 64 coroutines put 64 requests in flight on one connection, which the server's
group commit merges, and no thread waits for any of them. ``RemoteBackend``'s request
logic is reused as it is: size checks against the server's limits (``server_stats``),
``ServerBusy`` retries, paged replies, pipelined transaction data, and the retries with
deduplication of a cluster node reached by ``tcp://`` (e.g. through HAProxy).

Keep-alives of open transactions run as a task of the loop instead of the sync engine's
thread (:class:`LoopKeepAlive`). ``zk://`` cluster URLs are served the same way by
:mod:`.cluster` (the cluster client on the loop, kazoo's thread handing it leader changes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from .. import errors
from ..engine.api.engine import DEFAULT_TXN_TTL, Engine, check_handle_options
from ..net.client import RemoteBackend
from .connection import AsyncConnection
from .greenbridge import LoopCalls

log = logging.getLogger(__name__)


def connect_on_loop(endpoint: str | Sequence[str], *, timeout: float = 30.0, heartbeat: float = 2.0,
                    txn_ttl: float | None = None, keepalive_interval: float | None = -1,
                    **options: Any) -> tuple[Engine, float | None]:
    """The engine of a ``tcp://`` connection made on the running loop (call it inside a
    :class:`~.greenbridge.LoopCalls` call), and the keep-alive interval its task should use
    (None: none). Options as ``ts.connect``."""
    ttl = DEFAULT_TXN_TTL if txn_ttl is None else txn_ttl
    check_handle_options(ttl, keepalive_interval)
    if keepalive_interval == -1:
        keepalive_interval = max(min(ttl / 10.0, 6.0), 0.05)
    backend = RemoteBackend(endpoint, timeout=timeout, heartbeat=heartbeat, transport=AsyncConnection, **options)
    return Engine(backend, txn_ttl=ttl, keepalive_interval=None), keepalive_interval


class LoopKeepAlive:
    """Refreshes the open transactions of an engine every ``interval`` seconds, as a task."""

    def __init__(self, engine: Engine, calls: LoopCalls, interval: float | None) -> None:
        self._engine = engine
        self._calls = calls
        self._task = None if not interval else asyncio.get_running_loop().create_task(
            self._run(interval), name="tstreams-aio-keepalive")

    async def _run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self._calls.write(self._engine.keep_alive)
            except errors.EngineClosed:
                return
            except Exception:  # noqa: BLE001 - keep trying; a missed beat only shortens the deadline
                log.exception("keep-alive failed")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
