"""Over the network, without a thread per call: ``instant`` writes, consumer checkpoints
and commit waits.

The sync client (:mod:`tstreams_embedded.net.client`) already pipelines requests on one
ZeroMQ connection whose I/O thread resolves each request's future. For these paths the
async API sends the request itself (``RemoteBackend.submit_async``, ``RemoteBackend.watch``)
and awaits that future, bridged into the event loop (:func:`settle`): no pool thread waits
for the reply, and 64 coroutines put 64 requests in flight on one connection, which the
server's group commit merges. Other calls still run in the bounded pool (:mod:`.offload`),
and this is not a ``zmq.asyncio`` client: the connection's one I/O thread is shared.

Used with ``tcp://`` servers; a cluster node (which needs retries with deduplication
across failover) and ``zk://`` use the pool.

Cancellation, as for every write (see :mod:`.offload`): a request already sent cannot be
unsent, so the caller waits for its reply before the cancellation goes on; then
``CancelledError`` means it was committed, and otherwise the request's error is raised
(:class:`~tstreams_embedded.errors.RemoteError` "outcome unknown" if the connection was lost).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from ..engine.protocol import ops as O
from ..net.client import RemoteBackend, Subscription
from ..net.future import Future
from .offload import finish_before_cancelling


def bridge(future: Future) -> asyncio.Future[Any]:
    """An asyncio future of the event loop resolved with ``future`` (from the I/O thread)."""
    loop = asyncio.get_running_loop()
    mirror: asyncio.Future[Any] = loop.create_future()

    def copy(done: Future) -> None:
        error = done.exception()
        if mirror.done():
            return
        if error is not None:
            mirror.set_exception(error)
        else:
            mirror.set_result(done.result(0))

    future.add_done_callback(lambda done: loop.call_soon_threadsafe(copy, done))
    return mirror


async def settle(future: Future) -> Any:
    """The reply of a sent write, awaited without a thread; completed even if cancelled."""
    mirror = bridge(future)
    try:
        return await asyncio.shield(mirror)
    except asyncio.CancelledError:
        await finish_before_cancelling(mirror)
        error = mirror.exception()
        if error is not None:
            raise error from None
        raise


class NativeRemote:
    """The requests of one ``tcp://`` connection that coroutines await directly."""

    def __init__(self, backend: RemoteBackend) -> None:
        self.backend = backend

    @staticmethod
    def usable(backend: Any) -> bool:
        """Whether ``backend`` is a plain server connection (blocking: asks ``server_info`` once)."""
        return isinstance(backend, RemoteBackend) and not backend.cluster_node

    async def submit(self, ops: Sequence[O.Operation], durable: bool = True) -> list[Any]:
        results: list[Any] = await settle(self.backend.submit_async(ops, durable))
        return results

    def watch(self, seen: int, on_commit: Callable[[int], Any]) -> Subscription:
        """``on_commit(sequence)`` (in the event loop) for every commit after ``seen``."""
        loop = asyncio.get_running_loop()
        return self.backend.watch(seen, lambda seq: loop.call_soon_threadsafe(on_commit, seq))
