"""Runtime processor nodes: one instance per task, wired parent -> children.

Each node receives a :class:`~.records.Record` in :meth:`Node.process` and passes results
on with :meth:`Node.forward`. Nodes reach their task only through :class:`TaskContext`
(stores, output, metrics, time).

**Batches.** A task may also hand a node the records of a whole input transaction at once:
:meth:`Node.process_batch` takes the records in order with their *origins* (each record's
index in its transaction, for the record-error policy) and passes its results on with
:meth:`Node.forward_batch`. A node that has no batch implementation processes the batch one
record at a time, each through its whole subtree, as :meth:`process` does; a node with more
than one child forwards one record at a time too, so every stream and store sees the
records in the same order as record by record. What changes is only the order in which the
user functions of *different* nodes of one chain are called (each node's own calls stay in
record order).

**In place.** A batch handed to :meth:`Node.process_batch` has one reader (a node forwards a
batch only to a sole child), so stateless nodes (``map``, ``map_values``, ``select_key``)
change its records in place instead of making a new record per event; a node with several
children hands each child its records one at a time, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ... import errors
from ...engine.protocol.backend import Backend
from ..records import Record
from ..stores import KeyValueStore
from ..window_store import WindowStore


class TaskContext(Protocol):
    """What nodes may use of their task."""

    application_id: str
    partition: int
    backend: Backend  # read-only use: global tables
    #: records go through the nodes as batches: no Processor API node is in the topology, so
    #: no user code reads a store between two records of a node (state may stay in memory)
    batched: bool

    def store(self, name: str) -> KeyValueStore: ...

    def meta(self) -> KeyValueStore: ...

    def window_store(self, name: str) -> WindowStore | None:
        """The windowed view of store ``name`` (None: a key-value store)."""

    def send(self, stream: str, key: bytes | None, value: bytes | None, timestamp: int,
             headers: dict[str, bytes] | None) -> None: ...

    def count(self, metric: str, n: int = 1) -> None: ...

    def stream_time(self) -> int | None: ...

    def source_partitions(self, stream: str) -> int:
        """The partition count of source ``stream`` (its topology name)."""

    def wall_clock_ms(self) -> int: ...

    def record_failed(self, origin: int, error: errors.StoreKeyTooLong) -> None:
        """In a batch: the record of index ``origin`` in its transaction failed with
        ``error`` (the record-error policy: re-raise it, skip or dead-letter the record)."""

    def schedule(self, interval_ms: int, punctuation: str, callback: Callable[[int], Any]) -> None: ...


#: how a node reads a table: ``getter(task context)`` -> ``lookup(key) -> value or None``
Getter = Callable[[TaskContext], Callable[[Any], Any]]


class Node:
    """A processor node: ``process`` a record, ``forward`` results to the children."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.children: list[Node] = []

    def init(self, ctx: TaskContext) -> None:
        self.ctx = ctx

    def process(self, rec: Record) -> None:
        self.forward(rec)

    def forward(self, rec: Record) -> None:
        for child in self.children:
            child.process(rec)

    def process_batch(self, recs: list[Record], origins: list[int]) -> None:
        """Process ``recs`` (in order; ``origins[i]`` is the index of ``recs[i]``'s input
        record in its transaction). By default one record at a time through the whole
        subtree, with the record-error policy applied per record."""
        process = self.process
        for rec, origin in zip(recs, origins, strict=True):
            try:
                process(rec)
            except errors.StoreKeyTooLong as exc:
                self.ctx.record_failed(origin, exc)

    def forward_batch(self, recs: list[Record], origins: list[int]) -> None:
        """Pass ``recs`` on: as a batch to a sole child, else record by record."""
        if not recs:
            return
        children = self.children
        if len(children) == 1:
            children[0].process_batch(recs, origins)
            return
        forward = self.forward
        for rec, origin in zip(recs, origins, strict=True):
            try:
                forward(rec)
            except errors.StoreKeyTooLong as exc:
                self.ctx.record_failed(origin, exc)

    def flush(self) -> None:
        """Called before each commit: put state kept in memory into the task's stores."""

    def own_stream_time(self) -> int | None:
        """The stream time the node keeps itself (a windowed aggregation's), or None."""
        return None

    def advance_stream_time(self, to: int) -> None:
        """Idle advance (``App(idle_advance_ms=...)``): no record came for a while; move the
        node's own stream time to ``to`` if that is later (closing what it closes)."""

    def close(self) -> None:
        pass


