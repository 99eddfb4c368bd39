"""CheckpointGroup: commit several producers' transactions and consumers' offsets at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ... import errors
from ..protocol.ops import Operation
from .context import GroupMember
from .producer import Producer


class CheckpointGroup:
    """A set of producers and consumers that checkpoint together.

    :meth:`checkpoint` turns every open transaction of every producer into a checkpoint and
    every consumer's positions into stored offsets, and applies all of them in **one** atomic
    write (one LMDB write transaction, one commit-log entry). Either all of it happens or none
    of it does: if any transaction expired, :class:`TransactionExpired` is raised and nothing
    is stored. This is what makes read-process-write exactly-once.

    Members are objects with ``engine`` and ``prepare_group_checkpoint()``
    (:class:`~.context.GroupMember`): producers and consumers.
    """

    def __init__(self, *agents: GroupMember) -> None:
        self._agents: list[GroupMember] = []
        for a in agents:
            self.add(a)

    def add(self, agent: GroupMember) -> CheckpointGroup:
        if not isinstance(agent, GroupMember):
            raise errors.InvalidArgument(f"only producers and consumers can join a CheckpointGroup, got {agent!r}")
        if self._agents and agent.engine.backend is not self._agents[0].engine.backend:
            raise errors.InvalidArgument("every member of a CheckpointGroup must use the same engine")
        if agent not in self._agents:
            self._agents.append(agent)
        return self

    def remove(self, agent: GroupMember) -> None:
        if agent in self._agents:
            self._agents.remove(agent)

    def exists(self, agent: GroupMember) -> bool:
        return agent in self._agents

    def clear(self) -> None:
        self._agents.clear()

    def checkpoint(self) -> None:
        """One atomic, durable write of all members' transactions and offsets."""
        if not self._agents:
            return
        engine = self._agents[0].engine
        engine.check_open()
        ops: list[Operation] = []
        finishers: list[tuple[Callable[[list[Any]], None], int, int]] = []
        try:
            for agent in self._agents:
                agent_ops, done = agent.prepare_group_checkpoint()
                finishers.append((done, len(ops), len(ops) + len(agent_ops)))
                ops.extend(agent_ops)
        except BaseException as exc:
            self._failed(exc)
            raise
        try:
            results = engine.backend.submit(ops, durable=True) if ops else []
        except BaseException as exc:
            self._failed(exc)
            raise
        for done, start, end in finishers:
            done(results[start:end])

    def _failed(self, exc: BaseException) -> None:
        """Nothing was written: producers reopen their transactions, and mark failed those
        that storage finished (an expired one), as a plain checkpoint does."""
        for agent in self._agents:
            if isinstance(agent, Producer):
                agent.group_checkpoint_failed(exc)

    def cancel(self) -> None:
        """Cancel the open transactions of every producer in the group."""
        for agent in self._agents:
            if isinstance(agent, Producer):
                agent.cancel()
