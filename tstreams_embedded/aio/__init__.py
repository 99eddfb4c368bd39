"""``tstreams_embedded.aio``: the asyncio API (docs/ASYNCIO.md).

>>> import asyncio
>>> from tstreams_embedded import aio
>>> async def main(path):
...     async with await aio.open(path) as engine:
...         await engine.create_stream("clicks")
...         producer = await engine.producer("clicks")
...         await producer.instant([b"hello"])
...         async with producer.transaction() as txn:
...             await txn.send(b"world")

Embedded (and over ``zk://``), the blocking calls of the sync API run in a bounded thread
pool (``max_threads``, default 32), never on the event loop; concurrent writes from many
coroutines share group commits. Over ``tcp://`` every call (producers, transactions,
consumers and ``async for``, checkpoints, groups, subscriptions, work queues, schedules,
reads) is awaited on the event loop through a ``zmq.asyncio`` connection, with no thread at
all: the sync API's code runs in a greenlet on the loop and suspends at each network wait
(:mod:`.remote`, :mod:`.greenbridge`, :mod:`.connection`). Consumers wait for commits
through one watcher per handle, never by polling. A cancelled write either was applied
(``CancelledError``) or raises its error (not applied): see :mod:`.offload`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .. import errors
from ..connecting import connect as sync_connect
from ..engine.api.consumer import Transaction
from .consumer import AsyncConsumer
from .engine import AsyncEngine
from .greenbridge import LoopCalls
from .group import AsyncCheckpointGroup
from .offload import DEFAULT_MAX_THREADS, Offload, check_max_threads
from .producer import AsyncProducer, AsyncTransaction
from .remote import connect_on_loop, served_on_loop
from .subscription import AsyncSubscription
from .workqueue import AsyncDelivery, AsyncWorkQueue


async def open(path: str | os.PathLike[str], durability: str = "sync", *,  # noqa: A001 - aio.open, as ts.open
               max_threads: int = DEFAULT_MAX_THREADS, **options: Any) -> AsyncEngine:
    """Open (creating if needed) the embedded engine in ``path``; ``options`` as ``ts.open``."""
    from ..engine.embedded import open_engine

    offload = Offload(max_threads)
    try:
        sync = await offload.write(open_engine, path, durability, **options)
    except BaseException:
        offload.close()
        raise
    return AsyncEngine(sync, offload)


async def connect(endpoint: str | Sequence[str], *, max_threads: int = DEFAULT_MAX_THREADS,
                  **options: Any) -> AsyncEngine:
    """Connect to ``tstreams serve`` (``tcp://…``) or a cluster (``zk://…``); ``options`` as
    ``ts.connect``. ``tcp://`` calls run on the loop with no thread (``max_threads`` is
    unused); ``zk://`` calls in a pool of ``max_threads``."""
    if not isinstance(endpoint, (str, list, tuple)):
        raise errors.InvalidArgument(f"endpoint must be a URL string, got {type(endpoint).__name__}")
    check_max_threads(max_threads)
    if served_on_loop(endpoint):
        calls = LoopCalls()
        sync, keepalive_interval = await calls.write(connect_on_loop, endpoint, **options)
        return AsyncEngine(sync, calls, keepalive_interval)
    offload = Offload(max_threads)
    try:
        sync = await offload.write(sync_connect, endpoint, **options)
    except BaseException:
        offload.close()
        raise
    return AsyncEngine(sync, offload)


__all__ = [
    "AsyncCheckpointGroup",
    "AsyncConsumer",
    "AsyncDelivery",
    "AsyncEngine",
    "AsyncProducer",
    "AsyncSubscription",
    "AsyncTransaction",
    "AsyncWorkQueue",
    "Transaction",
    "connect",
    "open",
]
