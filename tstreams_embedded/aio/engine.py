"""``AsyncEngine``: the async handle returned by ``await aio.open(path)`` and ``await aio.connect(url)``.

It wraps a sync :class:`~tstreams_embedded.Engine` (embedded, remote or cluster: the same
API) and runs its calls where they do not stall the event loop (a :class:`~.offload.Runner`):
embedded and over ``zk://`` in a bounded thread pool (:class:`~.offload.Offload`), over
``tcp://`` on the loop itself, awaiting a ``zmq.asyncio`` connection (:mod:`.remote`).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from ..engine.api.consumer import Start
from ..engine.api.engine import DEFAULT_STREAM_TTL, Engine
from ..engine.protocol.backend import StreamInfo
from ..engine.protocol.schedules import ScheduleInfo
from .consumer import AsyncConsumer
from .greenbridge import LoopCalls
from .group import AsyncCheckpointGroup, Member
from .offload import Runner
from .producer import AsyncProducer
from .remote import LoopKeepAlive
from .signal import CommitSignal
from .subscription import AsyncSubscription
from .workqueue import AsyncWorkQueue


class AsyncEngine:
    """An async handle on a set of streams. Use ``async with`` or ``await engine.close()``."""

    def __init__(self, sync: Engine, runner: Runner, keepalive_interval: float | None = None) -> None:
        """``keepalive_interval``: refresh open transactions by a task of the loop (a ``tcp://``
        handle, whose sync engine has no keep-alive thread)."""
        self.sync = sync
        #: where the sync API's calls run: the thread pool, or the loop (``tcp://``)
        self.runner = runner
        #: the runner when the calls run on the loop with no thread (``tcp://``, see :mod:`.remote`), else None
        self.native = runner if isinstance(runner, LoopCalls) else None
        self.signal = CommitSignal(sync.backend, runner, on_loop=self.native is not None)
        self._keepalive = LoopKeepAlive(sync, self.native, keepalive_interval) if self.native is not None else None

    def __repr__(self) -> str:
        return f"AsyncEngine({self.sync.backend!r})"

    async def __aenter__(self) -> AsyncEngine:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self.sync.closed

    async def close(self) -> None:
        """Stop waiting consumers (their iteration ends), cancel open transactions of this
        handle's producers, release the engine or connection. Idempotent."""
        await self.signal.close()
        if self._keepalive is not None:
            await self._keepalive.stop()
        await self.runner.write(self.sync.close)
        self.runner.close()

    # ------------------------------------------------------------------ streams
    async def create_stream(self, name: str, partitions: int = 1, ttl: int = DEFAULT_STREAM_TTL,
                            description: str = "") -> StreamInfo:
        return await self.runner.write(self.sync.create_stream, name, partitions, ttl, description)

    async def get_stream(self, name: str) -> StreamInfo:
        return await self.runner.read(self.sync.get_stream, name)

    async def has_stream(self, name: str) -> bool:
        return await self.runner.read(self.sync.has_stream, name)

    async def list_streams(self, prefix: str = "", limit: int | None = None) -> list[StreamInfo]:
        return await self.runner.read(self.sync.list_streams, prefix, limit)

    async def delete_stream(self, name: str) -> None:
        await self.runner.write(self.sync.delete_stream, name)

    # ------------------------------------------------------------------ agents
    async def producer(self, stream: str, partition: int | None = None, serializer: Any = None,
                       txn_ttl: float | None = None, batch_size: int = 100,
                       name: str | None = None) -> AsyncProducer:
        """An async producer on ``stream`` (see :meth:`tstreams_embedded.Engine.producer`)."""
        sync = await self.runner.read(self.sync.producer, stream, partition, serializer, txn_ttl, batch_size, name)
        return AsyncProducer(sync, self.runner)

    async def consumer(self, stream: str, name: str, start: Start = "oldest",
                       partitions: Iterable[int] | None = None, use_last_offset: bool = True,
                       serializer: Any = None, prefetch: int = 256) -> AsyncConsumer:
        """An async named consumer (see :meth:`tstreams_embedded.Engine.consumer`)."""
        sync = await self.runner.read(self.sync.consumer, stream, name, start, partitions, use_last_offset,
                                       serializer, prefetch)
        return AsyncConsumer(sync, self.runner, self.signal)

    async def subscribe(self, stream: str, name: str, start: Start = "newest",
                        partitions: Iterable[int] | None = None, serializer: Any = None) -> AsyncSubscription:
        """A subscription: an async iterator over every transaction, storing its positions."""
        consumer = await self.consumer(stream, name, start, partitions, True, serializer)
        return AsyncSubscription(consumer)

    async def work_queue(self, stream: str, group: str, **options: Any) -> AsyncWorkQueue:
        """Work queue ``group`` of ``stream`` (see :meth:`tstreams_embedded.Engine.work_queue`
        for the options): creates the group or changes its settings."""
        sync = await self.runner.write(lambda: self.sync.work_queue(stream, group, **options))
        return AsyncWorkQueue(sync, self.runner, self.signal)

    def checkpoint_group(self, *agents: Member) -> AsyncCheckpointGroup:
        """Shorthand for ``aio.AsyncCheckpointGroup(*agents)``."""
        return AsyncCheckpointGroup(*agents)

    # ------------------------------------------------------------------ scheduled delivery
    async def schedule(self, stream: str, items: Iterable[bytes], *, at: _dt.datetime | None = None,
                       delay: float | None = None, partition: int | None = None) -> int:
        """:meth:`tstreams_embedded.Engine.schedule`: ``items`` become one transaction of
        ``stream`` at ``at`` or after ``delay`` seconds; the schedule's ID."""
        return await self.runner.write(self.sync.schedule, stream, list(items), at=at, delay=delay,
                                        partition=partition)

    async def cancel_schedule(self, schedule_id: int) -> bool:
        """:meth:`tstreams_embedded.Engine.cancel_schedule`: True if it was pending."""
        return await self.runner.write(self.sync.cancel_schedule, schedule_id)

    async def schedules(self, stream: str | None = None, limit: int | None = None) -> list[ScheduleInfo]:
        """:meth:`tstreams_embedded.Engine.schedules`: the pending ones, earliest due first."""
        return await self.runner.read(self.sync.schedules, stream, limit)

    async def stats(self) -> dict[str, Any]:
        return await self.runner.read(self.sync.stats)
