"""Async work queues: ``q = await engine.work_queue(stream, group, ...)``, then ``async for
delivery in q`` or ``await q.receive(max_items, timeout)``, and ``await delivery.ack()``
(wrapping :class:`~tstreams_embedded.WorkQueue`; see ``docs/QUEUES.md``).

A receive waits for commits (:class:`~.signal.CommitSignal`), and, while deliveries of the
group are locked or waiting, for the earliest time one may come due (a redelivery is due by
time, not by a commit). Cancellation: a receive that was cancelled after it handed items
out raises CancelledError and the items are delivered again after the ack timeout; an
acknowledgement that raises CancelledError was written (see :mod:`.offload`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from .. import errors
from ..engine.api.workqueue import Delivery, WorkQueue
from ..engine.protocol.backend import QueueStatus
from .offload import Runner
from .signal import CommitSignal

#: the longest a receive sleeps between looks while deliveries are locked or waiting
_IDLE_LOOK = 0.5


class AsyncDelivery:
    """One delivery (see :class:`~tstreams_embedded.Delivery`); its settling calls are awaited."""

    __slots__ = ("sync", "runner")

    def __init__(self, sync: Delivery, runner: Runner) -> None:
        self.sync = sync
        self.runner = runner

    def __repr__(self) -> str:
        return f"Async{self.sync!r}"

    @property
    def item(self) -> bytes:
        return self.sync.item

    @property
    def delivery_count(self) -> int:
        return self.sync.delivery_count

    @property
    def partition(self) -> int:
        return self.sync.partition

    @property
    def txn_id(self) -> int:
        return self.sync.txn_id

    @property
    def index(self) -> int:
        return self.sync.index

    async def ack(self, commit: bool = True) -> None:
        if commit:
            await self.runner.write(self.sync.ack)
        else:
            self.sync.ack(commit=False)  # staged in the queue: nothing blocks

    async def nak(self, delay: float | None = None, error: str | None = None) -> None:
        await self.runner.write(self.sync.nak, delay, error)

    async def in_progress(self) -> None:
        await self.runner.write(self.sync.in_progress)

    async def term(self, error: str | None = None) -> None:
        await self.runner.write(self.sync.term, error)


class AsyncWorkQueue:
    """A work queue consumer for coroutines. Calls on one queue are serialised."""

    def __init__(self, sync: WorkQueue, runner: Runner, signal: CommitSignal) -> None:
        self.sync = sync
        self.runner = runner
        self.signal = signal
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"Async{self.sync!r}"

    @property
    def engine(self) -> Any:
        """The sync handle's agent context (what a CheckpointGroup checks)."""
        return self.sync.engine

    async def receive(self, max_items: int = 100, timeout: float = 1.0, commit_staged: bool = False
                      ) -> list[AsyncDelivery]:
        """Up to ``max_items`` deliveries, waiting up to ``timeout`` seconds for the first.
        ``commit_staged=True``: the staged acknowledgements (``await delivery.ack(commit=False)``)
        are written in the same atomic, durable write as the receive's first look (see
        :meth:`tstreams_embedded.WorkQueue.receive`)."""
        loop = asyncio.get_running_loop()
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout <= 7 * 86400:
            raise errors.InvalidArgument(f"timeout must be a number of seconds in [0, 604800], got {timeout!r}")
        if not isinstance(commit_staged, bool):
            raise errors.InvalidArgument(f"commit_staged must be True or False, got {commit_staged!r}")
        deadline = loop.time() + timeout
        while True:
            seen = await self.signal.current()
            async with self._lock:
                got = await self.runner.write(self.sync.receive, max_items, 0, commit_staged=commit_staged)
            if got:
                return [AsyncDelivery(d, self.runner) for d in got]
            left = deadline - loop.time()
            if left <= 0:
                return []
            status = await self.status()
            wait = min(left, _IDLE_LOOK) if status.in_flight or status.waiting else left
            await self.signal.wait_past(seen, wait)

    def __aiter__(self) -> AsyncWorkQueue:
        return self

    async def __anext__(self) -> AsyncDelivery:
        while True:
            try:
                got = await self.receive(max_items=1, timeout=60.0)
            except errors.EngineClosed:
                raise StopAsyncIteration from None
            if got:
                return got[0]

    async def commit(self) -> None:
        """Write the staged acknowledgements in one write."""
        async with self._lock:
            await self.runner.write(self.sync.commit)

    async def status(self, full: bool = False) -> QueueStatus:
        return await self.runner.read(self.sync.status, full)
