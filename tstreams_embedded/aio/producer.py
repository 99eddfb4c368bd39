"""Async producers and their transactions (wrapping :class:`~tstreams_embedded.Producer`).

``await producer.instant(items)`` is one atomic, durable write. ``async with
producer.transaction() as txn`` opens a transaction, ``await txn.send(item)`` adds items
(buffered here and handed to the engine ``batch_size`` at a time, so most sends do not leave
the event loop), and leaving the block checkpoints it, or cancels it if the block raised or
was cancelled. Writes follow the cancellation rule of :mod:`.offload` (and :mod:`.greenbridge`):
a cancelled write call that raises ``CancelledError`` was committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Iterable
from types import TracebackType
from typing import Any

from .. import errors
from ..engine.api.producer import FLUSH_BYTES, Producer, ProducerTransaction
from ..policies import Policy
from .offload import Runner


class AsyncTransaction:
    """An open transaction of an :class:`AsyncProducer`. Its writes (flushes, checkpoint,
    cancel) take turns with each other and with those of its producer and of a checkpoint
    group (:attr:`busy`): over the network they run on one thread, where the sync
    transaction's re-entrant lock cannot keep two of them apart."""

    def __init__(self, producer: AsyncProducer, partition: int | None, policy: Policy) -> None:
        #: held while a write of this transaction runs (see :func:`holding`)
        self.busy = asyncio.Lock()
        self.producer = producer
        self._partition = partition
        self._policy = policy
        self.sync: ProducerTransaction | None = None
        producer.transactions.add(self)
        self._pending: list[Any] = []
        self._pending_bytes = 0

    def __repr__(self) -> str:
        return f"AsyncTransaction({self.sync!r})"

    async def open(self) -> AsyncTransaction:
        """Open it in the engine (``async with`` does this)."""
        if self.sync is None:
            # a policy other than EnqueueIfOpened may end the producer's other open transactions
            others = self.producer.transactions if self._policy is not Policy.EnqueueIfOpened else ()
            async with holding(others):
                if self.sync is None:
                    self.sync = await self.producer.runner.write(self.producer.sync.new_transaction,
                                                                  self._partition, self._policy)
        return self

    def _opened(self) -> ProducerTransaction:
        if self.sync is None:
            raise errors.InvalidArgument("the transaction is not open: use 'async with producer.transaction()' "
                                         "or 'await txn.open()'")
        return self.sync

    @property
    def partition(self) -> int:
        return self._opened().partition

    @property
    def state(self) -> str:
        """``open``, ``checkpointed``, ``cancelled`` or ``failed``."""
        return self._opened().state

    async def id(self) -> int:
        """The transaction ID (registers the transaction in the engine if it is not yet)."""
        txn = self._opened()
        async with self.busy:
            return await self.producer.runner.write(lambda: txn.id)

    async def send(self, item: Any) -> None:
        """Add one item. It is validated (serialized, size-checked) at once; items go to the
        engine ``batch_size`` at a time, so memory here stays bounded by one batch."""
        txn = self._opened()
        size = len(self.producer.sync.serialize([item])[0])  # ItemTooLarge / InvalidArgument here
        if txn.state != "open":
            txn.send(item)  # raises TransactionFinished with the sync API's message
        self._pending.append(item)
        self._pending_bytes += size
        if len(self._pending) >= self.producer.sync.batch_size or self._pending_bytes > FLUSH_BYTES:
            await self.flush()

    async def send_many(self, items: Iterable[Any]) -> None:
        for item in items:
            await self.send(item)

    def hand_over_pending(self) -> None:
        """Give the buffered items to the sync transaction (blocking: call it in the pool).
        A CheckpointGroup does this before it checkpoints."""
        pending = self._take_pending()
        if pending and self.sync is not None and self.sync.state == "open":  # (a finished one drops them)
            self.sync.send_many(pending)

    def _take_pending(self) -> list[Any]:
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        return pending

    async def flush(self) -> None:
        """Hand the buffered items to the engine (still invisible until the checkpoint)."""
        txn = self._opened()
        pending = self._take_pending()
        if pending:
            async with self.busy:
                await self.producer.runner.write(_send_and_flush, txn, pending)

    async def checkpoint(self) -> None:
        """Make every item visible at once, durably."""
        txn = self._opened()
        pending = self._take_pending()
        async with self.busy:
            await self.producer.runner.write(_send_and_checkpoint, txn, pending)

    async def cancel(self) -> None:
        """Drop the transaction: none of its items ever becomes visible."""
        txn = self._opened()
        self._take_pending()
        async with self.busy:
            await self.producer.runner.write(txn.cancel)

    async def __aenter__(self) -> AsyncTransaction:
        return await self.open()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self.sync is None or self.sync.state != "open":
            return
        if exc_type is None:
            await self.checkpoint()
        else:  # an error or a cancellation in the block: nothing of it becomes visible
            await self.cancel()


@contextlib.asynccontextmanager
async def holding(transactions: Iterable[AsyncTransaction]) -> AsyncIterator[None]:
    """Hold the :attr:`~AsyncTransaction.busy` locks of ``transactions``, taken in one
    order (two holders of several never wait for each other)."""
    async with contextlib.AsyncExitStack() as stack:
        for txn in sorted(set(transactions), key=id):
            await stack.enter_async_context(txn.busy)
        yield


def _send_and_flush(txn: ProducerTransaction, items: list[Any]) -> None:
    txn.send_many(items)
    txn.flush()


def _send_and_checkpoint(txn: ProducerTransaction, items: list[Any]) -> None:
    if items:
        txn.send_many(items)
    txn.checkpoint()


class AsyncProducer:
    """Writes transactions to one stream from coroutines; any number of tasks may share it."""

    def __init__(self, sync: Producer, runner: Runner) -> None:
        self.sync = sync
        self.runner = runner
        #: this producer's async transactions (their buffered items join a group checkpoint)
        self.transactions: weakref.WeakSet[AsyncTransaction] = weakref.WeakSet()

    def __repr__(self) -> str:
        return f"AsyncProducer({self.sync.stream!r})"

    @property
    def stream(self) -> str:
        return self.sync.stream

    @property
    def engine(self) -> Any:
        """The sync handle's agent context (what a CheckpointGroup checks)."""
        return self.sync.engine

    async def instant(self, items: Iterable[Any], partition: int | None = None) -> int:
        """Open, fill and checkpoint a transaction in one atomic, durable write; its ID."""
        return await self.runner.write(self.sync.instant, list(items), partition)

    def transaction(self, partition: int | None = None, policy: Policy = Policy.EnqueueIfOpened
                    ) -> AsyncTransaction:
        """``async with producer.transaction() as txn:`` checkpoints on exit, cancels on error."""
        return AsyncTransaction(self, partition, policy)

    async def new_transaction(self, partition: int | None = None, policy: Policy = Policy.EnqueueIfOpened
                              ) -> AsyncTransaction:
        """An opened transaction; end it with ``await txn.checkpoint()`` or ``await txn.cancel()``."""
        return await AsyncTransaction(self, partition, policy).open()

    async def checkpoint(self) -> None:
        """Checkpoint every open transaction of this producer, one by one (use an
        :class:`~.group.AsyncCheckpointGroup` for one atomic write)."""
        async with holding(self.transactions):
            await self.runner.write(self._checkpoint_all)

    def _checkpoint_all(self) -> None:
        for txn in list(self.transactions):
            txn.hand_over_pending()
        self.sync.checkpoint()

    async def cancel(self) -> None:
        """Cancel every open transaction of this producer."""
        async with holding(self.transactions):
            await self.runner.write(self.sync.cancel)

    async def close(self) -> None:
        await self.runner.write(self.sync.close)
