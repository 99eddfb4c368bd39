"""The narrow, public contract between an engine handle and the agents it creates.

Producers, consumers, subscribers, batches and checkpoint groups need four things of the
:class:`~.engine.Engine` that made them, and only these: its :class:`~..protocol.backend.Backend`, a
closed check, the transaction TTL in milliseconds, and keep-alive registration.
:class:`AgentContext` names exactly that, so the agents never touch the handle's internals.
:class:`GroupMember` is what a :class:`~.group.CheckpointGroup` needs of its members.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ..protocol.backend import Backend
from ..protocol.ops import Operation
from .keepalive import KeptAlive

#: A member's share of a group checkpoint: its records, and a callback taking their results.
GroupPart = tuple[list[Operation], Callable[[list[Any]], None]]


class AgentContext(Protocol):
    """What an engine handle offers the agents it creates."""

    @property
    def backend(self) -> Backend: ...

    @property
    def closed(self) -> bool: ...

    def check_open(self) -> None:
        """Raise :class:`~tstreams_embedded.errors.EngineClosed` if the handle is closed."""
        ...

    def txn_ttl_ms(self, seconds: float | None) -> int:
        """A transaction TTL in milliseconds (the handle's default when ``None``)."""
        ...

    def track_producer(self, producer: KeptAlive) -> None:
        """Keep ``producer``'s open transactions alive while the handle is open."""
        ...


@runtime_checkable
class GroupMember(Protocol):
    """A producer or consumer, as a :class:`~.group.CheckpointGroup` sees it."""

    @property
    def engine(self) -> AgentContext: ...

    def prepare_group_checkpoint(self) -> GroupPart:
        """The member's records for one atomic group write, and the callback that records
        their outcome on the member."""
        ...
