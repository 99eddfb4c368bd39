"""Work queues: competing consumers with acknowledgements, redelivery and dead letters.

``engine.work_queue(stream, group, ...)`` returns a :class:`WorkQueue`. Every consumer of
the same ``group`` on the same stream (threads, processes, hosts: anything with an engine
on the same data, embedded, remote or on a cluster) shares its items: each item of a
checkpointed transaction goes to one consumer at a time, as a :class:`Delivery`.

* ``delivery.ack()``: done. ``nak(delay=..)``: deliver it again later. ``in_progress()``:
  extend the lock. ``term()``: never again (to the dead-letter stream, if there is one).
* An item not acknowledged within ``ack_timeout`` seconds is delivered again (to any
  consumer). After ``max_deliveries`` deliveries it is written to the ``dead_letter``
  stream, in the same atomic write that settles it.
* Fewer writes: ``delivery.ack(commit=False)`` then ``q.receive(commit_staged=True)``
  writes the acks of the previous batch and hands out the next in one durable write (as
  Kafka share consumers send acknowledgements with their next ShareFetch).
* Exactly once: ``delivery.ack(commit=False)`` stages the acknowledgement in the queue;
  put the queue in a :class:`~.group.CheckpointGroup` with the producer of the output, and
  ``group.checkpoint()`` writes output and acknowledgements in one write. If any of the
  deliveries was redelivered meanwhile (its lock ran out and another consumer got it), the
  whole write is refused with :class:`~tstreams_embedded.errors.DeliveryExpired`, so the
  output is never written twice.

The state is kept as a range per partition plus the unsettled items (see
:mod:`..protocol.queuestate`); ``max_in_flight`` bounds those, so memory and disk stay bounded
whatever the backlog. See ``docs/QUEUES.md``.
"""

from __future__ import annotations

import math
import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from ... import errors
from ..protocol.backend import QueueStatus
from ..protocol.ops import Operation, QueueDeclare, QueueReceive, QueueSettle
from ..protocol.queuestate import Settle
from ..protocol.validate import check_name
from .context import AgentContext, GroupPart

#: the most a receive returns in bytes (it always returns at least one item)
DEFAULT_MAX_BYTES = 16 << 20
#: the most deliveries one settle record names (a receive's most items: the engine's limit)
MAX_SETTLE_TARGETS = 10_000
#: the longest a receive waits between looks when nothing wakes it (a redelivery comes due
#: by time, not by a commit)
_IDLE_LOOK = 0.5


def _seconds_to_ms(value: Any, what: str, low: float = 0.0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= 7 * 86400:
        raise errors.InvalidArgument(f"{what} must be a number of seconds in [{low:g}, 604800], got {value!r}")
    return int(round(value * 1000))


class Delivery:
    """One item handed to this consumer: ``item`` (bytes), ``delivery_count`` (1 the first
    time), where it comes from (``partition``, ``txn_id``, ``index``), and the time its lock
    ends (``lock_deadline_ms``, engine clock). Settle it once with :meth:`ack`, :meth:`nak`
    or :meth:`term`; :meth:`in_progress` may come before."""

    __slots__ = ("queue", "partition", "txn_id", "index", "delivery_count", "lock_deadline_ms", "item", "_settled")

    def __init__(self, queue: WorkQueue, row: Sequence[Any]) -> None:
        self.queue = queue
        self.partition: int = row[0]
        self.txn_id: int = row[1]
        self.index: int = row[2]
        self.delivery_count: int = row[3]
        self.lock_deadline_ms: int = row[4]
        self.item: bytes = row[5]
        self._settled = False

    def __repr__(self) -> str:
        return (f"Delivery({self.queue.stream!r}/{self.queue.group!r} partition {self.partition} txn {self.txn_id} "
                f"item {self.index}, delivery {self.delivery_count})")

    @property
    def settled(self) -> bool:
        return self._settled

    def settle_op(self, action: Settle, delay_ms: int | None = None, error: str | None = None) -> QueueSettle:
        """The record that settles this delivery (for a :class:`~.batch.Batch` of your own)."""
        q = self.queue
        return QueueSettle(q.stream, q.group, q.consumer, int(action), [self.target], delay_ms, error, q.stream_id)

    @property
    def target(self) -> list[int]:
        """``[partition, txn id, index, delivery number]``: what a settle record names."""
        return [self.partition, self.txn_id, self.index, self.delivery_count]

    def ack(self, commit: bool = True) -> None:
        """Done with the item. ``commit=False`` stages the ack in the queue, written by
        :meth:`WorkQueue.commit`, by the CheckpointGroup the queue belongs to, or with the
        next ``receive(commit_staged=True)``."""
        self._settle(Settle.ACK, None, None, commit)

    def nak(self, delay: float | None = None, error: str | None = None) -> None:
        """Failed: deliver it again after ``delay`` seconds (None: the queue's backoff). On
        the last delivery allowed, it goes to the dead-letter stream instead."""
        delay_ms = None if delay is None else _seconds_to_ms(delay, "delay")
        self._settle(Settle.NAK, delay_ms, error, True)

    def in_progress(self) -> None:
        """Still working on it: its lock is extended by the queue's ack timeout."""
        if self._settled:
            raise errors.InvalidArgument(f"{self!r} is already settled")
        self.queue.submit([self.settle_op(Settle.PROGRESS)])

    def term(self, error: str | None = None) -> None:
        """Never deliver it again: it goes to the dead-letter stream (if the queue has one)."""
        self._settle(Settle.TERM, None, error, True)

    def _settle(self, action: Settle, delay_ms: int | None, error: str | None, commit: bool) -> None:
        if self._settled:
            raise errors.InvalidArgument(f"{self!r} is already settled")
        if error is not None and not isinstance(error, str):
            raise errors.InvalidArgument(f"error must be a string, got {type(error).__name__}")
        if commit:
            self.queue.submit([self.settle_op(action, delay_ms, error)])
        else:
            self.queue.stage_ack(self.target)
        self._settled = True


class WorkQueue:
    """Work queue ``group`` of ``stream`` (see the module docstring). Made by
    :meth:`Engine.work_queue <tstreams_embedded.engine.api.engine.Engine.work_queue>`, which
    creates the group or changes its settings."""

    def __init__(self, engine: AgentContext, stream: str, group: str, *, ack_timeout: float = 30.0,
                 max_deliveries: int = 5, dead_letter: str | None = None, backoff: Sequence[float] = (),
                 max_in_flight: int = 10_000, consumer: str | None = None) -> None:
        engine.check_open()
        self.engine = engine
        self.stream = check_name(stream)
        self.group = check_name(group, "group name")
        self.consumer = check_name(consumer, "consumer name") if consumer is not None else \
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        if not isinstance(backoff, (list, tuple)):
            raise errors.InvalidArgument(f"backoff must be a list of delays in seconds, got {backoff!r}")
        if isinstance(max_deliveries, bool) or not isinstance(max_deliveries, int):
            raise errors.InvalidArgument(f"max_deliveries must be an integer, got {max_deliveries!r}")
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
            raise errors.InvalidArgument(f"max_in_flight must be an integer, got {max_in_flight!r}")
        info = engine.backend.get_stream(self.stream)
        self.stream_id: int = info.id
        self._staged: list[QueueSettle] = []  # staged settle records (their deliveries: lists of ours)
        declare = QueueDeclare(self.stream, self.group, _seconds_to_ms(ack_timeout, "ack_timeout", 0.001),
                               max_deliveries, dead_letter, [_seconds_to_ms(d, "backoff delay") for d in backoff],
                               max_in_flight, self.stream_id)
        engine.backend.submit([declare], durable=True)

    def __repr__(self) -> str:
        return f"WorkQueue({self.stream!r}, {self.group!r}, consumer={self.consumer!r})"

    # -- receiving -----------------------------------------------------------------------
    def receive(self, max_items: int = 100, timeout: float = 1.0, max_bytes: int = DEFAULT_MAX_BYTES,
                commit_staged: bool = False) -> list[Delivery]:
        """Up to ``max_items`` deliveries (and about ``max_bytes``), waiting up to ``timeout``
        seconds for the first; an empty list if none came. Each receive that hands something
        out is one durable write (delivery counts survive a crash).

        ``commit_staged=True``: the staged settles (``delivery.ack(commit=False)``,
        :meth:`stage`) ride on this receive: they and the receive's first look are ONE
        atomic, durable write (one fsync for "ack the previous batch and take the next"),
        settles first (so the items they free count for ``max_in_flight``). Both or
        neither: if one of them was redelivered meanwhile, DeliveryExpired is raised and
        nothing is written (no settle, and no item handed out, so none is lost); the staged
        settles are dropped as by :meth:`commit`, and the next receive works. An ack staged
        so is durable when the receive (or :meth:`commit`) that carries it returns. Not with
        a CheckpointGroup: its acks must go with its output."""
        _seconds_to_ms(timeout, "timeout")
        if not isinstance(commit_staged, bool):
            raise errors.InvalidArgument(f"commit_staged must be True or False, got {commit_staged!r}")
        deadline = time.monotonic() + timeout
        backend = self.engine.backend
        self.engine.check_open()
        staged = self._take_staged() if commit_staged else []
        while True:
            self.engine.check_open()
            seen = backend.wait_for_commit(-1, 0)
            status = None if staged else backend.queue_status(self.stream, self.group)
            if status is None or status.ready:
                receive = QueueReceive(self.stream, self.group, self.consumer, max_items, max_bytes, self.stream_id)
                ops, staged = [*staged, receive], []
                rows = backend.submit(ops, durable=True)[-1]
                if rows:
                    return [Delivery(self, row) for row in rows]
                if status is None:
                    status = backend.queue_status(self.stream, self.group)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            wait = min(remaining, _IDLE_LOOK)
            if status.next_due_ms is not None:
                wait = min(wait, max(0.0, (status.next_due_ms - backend.now_ms()) / 1000))
            backend.wait_for_commit(seen, wait)

    def __iter__(self) -> Iterator[Delivery]:
        """Deliveries one by one, for ever (until the engine closes)."""
        while True:
            yield from self.receive()

    # -- settling ------------------------------------------------------------------------
    def submit(self, ops: list[Operation]) -> None:
        self.engine.check_open()
        self.engine.backend.submit(ops, durable=True)

    def stage(self, op: QueueSettle) -> None:
        """Keep a settle record of this queue (:meth:`Delivery.settle_op`) for :meth:`commit`
        or the queue's CheckpointGroup, after those staged before it (its acks join staged
        acks right before them). A record of another stream, group or consumer is refused."""
        if (op.stream, op.group, op.consumer) != (self.stream, self.group, self.consumer):
            raise errors.InvalidArgument(
                f"a settle record of {op.stream!r}/{op.group!r} by {op.consumer!r} cannot be staged in {self!r}: "
                "stage the records of this queue's own deliveries (its group and consumer)")
        if op.action == int(Settle.ACK):
            for target in op.deliveries:
                self.stage_ack(list(target))
        else:
            self._staged.append(op._replace(deliveries=list(op.deliveries)))

    def stage_ack(self, target: list[int]) -> None:
        """Keep the ack of one delivery (its :attr:`Delivery.target`) for :meth:`commit` or
        the queue's CheckpointGroup. Consecutive acks make one settle record (of at most
        :data:`MAX_SETTLE_TARGETS`: the engine's limit)."""
        last = self._staged[-1] if self._staged else None
        if last is not None and last.action == int(Settle.ACK) and len(last.deliveries) < MAX_SETTLE_TARGETS:
            last.deliveries.append(target)
        else:
            self._staged.append(QueueSettle(self.stream, self.group, self.consumer, int(Settle.ACK), [target],
                                            None, None, self.stream_id))

    @property
    def staged(self) -> int:
        """How many settles (acknowledgements) wait for :meth:`commit` or a group checkpoint."""
        return sum(len(op.deliveries) for op in self._staged)

    def commit(self) -> None:
        """Write the staged acknowledgements in one write (all or nothing: DeliveryExpired if
        any was redelivered meanwhile; then none is kept staged)."""
        ops = self._take_staged()
        if ops:
            self.submit(ops)

    def prepare_group_checkpoint(self) -> GroupPart:
        """A CheckpointGroup member's share: the staged acknowledgements."""
        return self._take_staged(), lambda results: None

    def _take_staged(self) -> list[Operation]:
        """The staged settle records, in the order they were staged: written together, in
        one write, by :meth:`commit` or the group."""
        staged, self._staged = self._staged, []
        return list(staged)

    # -- reads ---------------------------------------------------------------------------
    def status(self, full: bool = False) -> QueueStatus:
        """The group's state (:class:`~..protocol.backend.QueueStatus`)."""
        self.engine.check_open()
        return self.engine.backend.queue_status(self.stream, self.group, full)
