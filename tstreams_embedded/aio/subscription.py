"""Subscriptions as async iterators: ``async for txn in engine.subscribe(stream, name)``.

A subscription is a named consumer that stores its own positions: each time it has
caught up (before it waits for the next commit), and when the ``async with`` block ends
without an error (after an error, the transaction being processed is not marked done).
Delivery is at-least-once: after a crash, the transactions after the last stored position
are delivered again. For exactly-once, use a consumer in an
:class:`~.group.AsyncCheckpointGroup` instead.
"""

from __future__ import annotations

from types import TracebackType

from .. import errors
from ..engine.api.consumer import Transaction
from .consumer import AsyncConsumer


class AsyncSubscription:
    """Every checkpointed transaction of a stream, as an async iterator."""

    def __init__(self, consumer: AsyncConsumer) -> None:
        self.consumer = consumer
        self.delivered = 0
        self._unstored = 0

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> Transaction:
        try:
            txn = await self.consumer.get_transaction()
            while txn is None:
                if self._unstored:
                    await self.store()
                txn = await self.consumer.next()
        except errors.EngineClosed:
            raise StopAsyncIteration from None
        assert txn is not None
        self.delivered += 1
        self._unstored += 1
        return txn

    async def store(self) -> None:
        """Store the positions of what was delivered (durably)."""
        await self.consumer.checkpoint()
        self._unstored = 0

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if exc_type is None and self._unstored and not self.consumer.engine.closed:
            await self.store()
