"""``AsyncCheckpointGroup``: one atomic write for the transactions of several async
producers and the positions of several async consumers (see :class:`~tstreams_embedded.CheckpointGroup`).

Items still buffered in the producers' :class:`~.producer.AsyncTransaction` objects are
handed over first, in the same call, so the group checkpoints everything sent.
"""

from __future__ import annotations

from .. import errors
from ..engine.api.group import CheckpointGroup
from .consumer import AsyncConsumer
from .offload import Runner
from .producer import AsyncProducer, AsyncTransaction, holding
from .workqueue import AsyncWorkQueue

Member = AsyncProducer | AsyncConsumer | AsyncWorkQueue


class AsyncCheckpointGroup:
    """Async producers and consumers of one handle that checkpoint together."""

    def __init__(self, *agents: Member) -> None:
        self._agents: list[Member] = []
        self._runner: Runner | None = None
        self.sync = CheckpointGroup()
        for a in agents:
            self.add(a)

    def add(self, agent: Member) -> AsyncCheckpointGroup:
        if not isinstance(agent, (AsyncProducer, AsyncConsumer, AsyncWorkQueue)):
            raise errors.InvalidArgument(f"only async producers, consumers and work queues can join an "
                                         f"AsyncCheckpointGroup, "
                                         f"got {agent!r}")
        self.sync.add(agent.sync)
        if agent not in self._agents:
            self._agents.append(agent)
        self._runner = self._runner or agent.runner
        return self

    def remove(self, agent: Member) -> None:
        self.sync.remove(agent.sync)
        if agent in self._agents:
            self._agents.remove(agent)

    def _checkpoint(self) -> None:
        for agent in self._agents:
            if isinstance(agent, AsyncProducer):
                for txn in list(agent.transactions):
                    txn.hand_over_pending()
        self.sync.checkpoint()

    async def checkpoint(self) -> None:
        """Checkpoint every member's open transactions and store every member's positions,
        in ONE atomic, durable write. Cancellation: CancelledError means it was written."""
        if self._runner is None:
            return
        async with holding(self._transactions()):
            await self._runner.write(self._checkpoint)

    async def cancel(self) -> None:
        """Cancel every member producer's open transactions."""
        if self._runner is not None:
            async with holding(self._transactions()):
                await self._runner.write(self.sync.cancel)

    def _transactions(self) -> list[AsyncTransaction]:
        """The member producers' async transactions (their writes wait for the group's)."""
        return [txn for agent in self._agents if isinstance(agent, AsyncProducer) for txn in agent.transactions]
