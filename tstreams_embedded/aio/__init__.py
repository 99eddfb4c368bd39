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

Embedded and remote alike, the blocking calls of the sync API run in a bounded thread pool
(``max_threads``, default 32), never on the event loop; concurrent writes from many
coroutines share group commits. Over a ``tcp://`` connection, ``instant`` writes and commit
waits are awaited directly on the connection's futures, with no thread per call
(:mod:`.remote`); the other remote calls use the pool. It is **not** a ``zmq.asyncio``
client. Consumers wait for commits through one watcher per handle, never by polling.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .. import errors
from ..engine.api.consumer import Transaction
from .consumer import AsyncConsumer
from .engine import AsyncEngine
from .group import AsyncCheckpointGroup
from .offload import DEFAULT_MAX_THREADS, Offload
from .producer import AsyncProducer, AsyncTransaction
from .remote import NativeRemote
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
    """Connect to ``tstreams serve`` (``tcp://…``) or a cluster (``zk://…``); ``options`` as ``ts.connect``."""
    from .. import connect as sync_connect

    if not isinstance(endpoint, (str, list, tuple)):
        raise errors.InvalidArgument(f"endpoint must be a URL string, got {type(endpoint).__name__}")
    offload = Offload(max_threads)
    try:
        sync = await offload.write(sync_connect, endpoint, **options)
    except BaseException:
        offload.close()
        raise
    try:
        native = await offload.read(NativeRemote.usable, sync.backend)
    except BaseException:
        await offload.write(sync.close)
        offload.close()
        raise
    return AsyncEngine(sync, offload, NativeRemote(sync.backend) if native else None)


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
