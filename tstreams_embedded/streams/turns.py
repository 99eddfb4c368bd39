"""How far apart in event time a worker lets its tasks run (see :class:`~.app.App`, *order
across tasks*).

A worker runs its tasks in turns: the task whose next record is the oldest goes next and
keeps its turn while its next record is at most ``slack`` later than the next record of any
other task of the worker. A task that wrote to a stream the application reads back commits
at the end of its turn, so a repartition stream receives records out of timestamp order by
at most about ``slack``. The default slack is half the smallest tolerance of disorder in the
topology: the grace of its windowed aggregations and stream–stream joins, the TTL of its
dedups; a topology without any has no time bound (turns end only at ``turn_records``).

The same bound holds for an idle advance (``App(idle_advance_ms=...)``): a task without input
moves its stream time on by the wall clock only up to the next record of the worker's busy
tasks plus ``slack``, so a worker catching up on a backlog does not push its idle tasks
(which may still get records of that backlog through a repartition) ahead of it.
"""

from __future__ import annotations

from collections.abc import Iterable

from .nodes import Node
from .nodes.dedup import DedupNode
from .nodes.joins import StreamJoinNode
from .nodes.windowed import WindowAggregateNode


def default_slack_ms(nodes: Iterable[Node]) -> int | None:
    """Half the smallest grace / TTL of ``nodes`` (one task's), or None when there is none."""
    tolerances: list[int] = []
    for node in nodes:
        if isinstance(node, WindowAggregateNode):
            tolerances.append(node.grace)
        elif isinstance(node, DedupNode):
            tolerances.append(node.ttl)
        elif isinstance(node, StreamJoinNode):
            tolerances.append(node.windows.grace_ms)
    return min(tolerances) // 2 if tolerances else None
