"""Async consumers: ``async for txn in consumer`` (wrapping :class:`~tstreams_embedded.Consumer`).

Iteration yields every checkpointed transaction in order, fairly over the partitions, and
when it has caught up it waits for the next commit (:class:`~.signal.CommitSignal`): it is
woken by commits, never by polling. It runs until the loop is broken or the handle closes
(``EngineClosed`` ends the iteration). ``await consumer.next(timeout)`` reads one
transaction with a deadline. ``await consumer.checkpoint()`` stores the positions of what
was processed, durably and atomically.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .. import errors
from ..engine.api.consumer import Consumer, Transaction
from .offload import Runner
from .signal import CommitSignal


class AsyncConsumer:
    """Reads one stream under a name from coroutines. Calls on one consumer are serialised."""

    def __init__(self, sync: Consumer, runner: Runner, signal: CommitSignal) -> None:
        self.sync = sync
        self.runner = runner
        self.signal = signal
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"AsyncConsumer(stream={self.sync.stream!r}, name={self.sync.name!r})"

    @property
    def stream(self) -> str:
        return self.sync.stream

    @property
    def name(self) -> str:
        return self.sync.name

    @property
    def engine(self) -> Any:
        """The sync handle's agent context (what a CheckpointGroup checks)."""
        return self.sync.engine

    @property
    def offsets(self) -> dict[int, int]:
        """Current positions: partition -> ID of the last transaction processed."""
        return self.sync.offsets

    async def get_transaction(self, partition: int | None = None) -> Transaction | None:
        """The next checkpointed transaction now, or None (no waiting). Cancelled, it hands
        nothing out and moves no position: the next read returns the same transaction."""
        async with self._lock:
            before = self.sync.offsets
            try:
                return await self.runner.write(self.sync.get_transaction, partition)
            except asyncio.CancelledError:  # the read completed, but its result is dropped: read it again
                for p, position in before.items():
                    if self.sync.offsets[p] != position:
                        self.sync.set_offset(p, position)
                raise

    async def next(self, timeout: float | None = None) -> Transaction | None:
        """The next checkpointed transaction, waiting for commits up to ``timeout`` seconds
        (None: for ever); None if none came in time."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            seen = await self.signal.current()
            txn = await self.get_transaction()
            if txn is not None:
                return txn
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return None
            await self.signal.wait_past(seen, left)

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> Transaction:
        try:
            txn = await self.next()
        except errors.EngineClosed:
            raise StopAsyncIteration from None
        assert txn is not None
        return txn

    async def set_offset(self, partition: int, txn_id: int) -> None:
        async with self._lock:
            self.sync.set_offset(partition, txn_id)

    async def checkpoint(self) -> None:
        """Store every partition's position, atomically and durably (cancellation: see
        :mod:`.offload`; CancelledError means it was stored)."""
        async with self._lock:
            await self.runner.write(self.sync.checkpoint)
