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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .. import errors
from ..engine.protocol.backend import Backend
from .records import Record
from .serdes import Serde
from .stores import KeyValueStore
from .window_store import WindowStore


class TaskContext(Protocol):
    """What nodes may use of their task."""

    application_id: str
    partition: int
    backend: Backend  # read-only use: global tables

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


class SourceNode(Node):
    """Decodes items of a stream into records (see :mod:`.records` for the envelope)."""

    def __init__(self, name: str, stream: str, key_serde: Serde, value_serde: Serde,
                 timestamp: Callable[[Any, Any], int] | None) -> None:
        super().__init__(name)
        self.stream = stream
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.extract = timestamp


class FilterNode(Node):
    def __init__(self, name: str, predicate: Callable[[Any, Any], Any], keep: bool) -> None:
        super().__init__(name)
        self.predicate = predicate
        self.keep = keep

    def process(self, rec: Record) -> None:
        if bool(self.predicate(rec.key, rec.value)) is self.keep:
            self.forward(rec)

    def process_batch(self, recs: list[Record], origins: list[int]) -> None:
        predicate, keep = self.predicate, self.keep
        kept = [i for i, rec in enumerate(recs) if bool(predicate(rec.key, rec.value)) is keep]
        if len(kept) == len(recs):
            self.forward_batch(recs, origins)
        else:
            self.forward_batch([recs[i] for i in kept], [origins[i] for i in kept])


class MapNode(Node):
    """``map``: ``fn(key, value) -> (key, value)``."""

    def __init__(self, name: str, fn: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        super().__init__(name)
        self.fn = fn

    def process(self, rec: Record) -> None:
        key, value = _pair(self.fn(rec.key, rec.value), self.name)
        self.forward(Record(key, value, rec.timestamp, rec.headers))

    def process_batch(self, recs: list[Record], origins: list[int]) -> None:
        fn, name = self.fn, self.name
        for rec in recs:  # (in place: see the module docstring)
            pair = fn(rec.key, rec.value)
            if type(pair) is not tuple or len(pair) != 2:
                pair = _pair(pair, name)
            rec.key, rec.value = pair
        self.forward_batch(recs, origins)


class MapValuesNode(Node):
    def __init__(self, name: str, fn: Callable[[Any, Any], Any], with_key: bool) -> None:
        super().__init__(name)
        self.fn = fn
        self.with_key = with_key

    def process(self, rec: Record) -> None:
        value = self.fn(rec.key, rec.value) if self.with_key else self.fn(rec.value)  # type: ignore[call-arg]
        self.forward(Record(rec.key, value, rec.timestamp, rec.headers))

    def process_batch(self, recs: list[Record], origins: list[int]) -> None:
        fn = self.fn
        if self.with_key:  # (in place: see the module docstring)
            for rec in recs:
                rec.value = fn(rec.key, rec.value)
        else:
            for rec in recs:
                rec.value = fn(rec.value)  # type: ignore[call-arg]
        self.forward_batch(recs, origins)


class FlatMapNode(Node):
    """``flat_map``: ``fn(key, value) -> iterable of (key, value)``; ``flat_map_values``:
    ``fn(value) -> iterable of values``."""

    def __init__(self, name: str, fn: Callable[..., Iterable[Any]], values_only: bool) -> None:
        super().__init__(name)
        self.fn = fn
        self.values_only = values_only

    def process(self, rec: Record) -> None:
        if self.values_only:
            for value in _iterable(self.fn(rec.value), self.name, "values"):
                self.forward(Record(rec.key, value, rec.timestamp, rec.headers))
        else:
            for pair in _iterable(self.fn(rec.key, rec.value), self.name, "(key, value) pairs"):
                key, value = _pair(pair, self.name)
                self.forward(Record(key, value, rec.timestamp, rec.headers))


class SelectKeyNode(Node):
    def __init__(self, name: str, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(name)
        self.fn = fn

    def process(self, rec: Record) -> None:
        self.forward(Record(self.fn(rec.key, rec.value), rec.value, rec.timestamp, rec.headers))

    def process_batch(self, recs: list[Record], origins: list[int]) -> None:
        fn = self.fn
        for rec in recs:  # (in place: see the module docstring)
            rec.key = fn(rec.key, rec.value)
        self.forward_batch(recs, origins)


class PeekNode(Node):
    """``peek`` (forwards) and ``foreach`` (terminal)."""

    def __init__(self, name: str, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(name)
        self.fn = fn

    def process(self, rec: Record) -> None:
        self.fn(rec.key, rec.value)
        self.forward(rec)

    def process_batch(self, recs: list[Record], origins: list[int]) -> None:
        fn = self.fn
        for rec in recs:
            fn(rec.key, rec.value)
        self.forward_batch(recs, origins)


class BranchNode(Node):
    """``split()``: each record goes to the first branch whose predicate holds (children in
    branch order; a default branch has predicate None)."""

    def __init__(self, name: str, predicates: list[Callable[[Any, Any], Any] | None]) -> None:
        super().__init__(name)
        self.predicates = predicates
        self.branches: list[Node | None] = []

    def process(self, rec: Record) -> None:
        for predicate, child in zip(self.predicates, self.branches, strict=True):
            if predicate is None or predicate(rec.key, rec.value):
                if child is not None:
                    child.process(rec)
                return


class SinkNode(Node):
    """Writes records to a stream (committed with the task: output, state and offsets in one
    write). Keys go to their CRC-32C partition."""

    def __init__(self, name: str, stream: str, key_serde: Serde, value_serde: Serde) -> None:
        super().__init__(name)
        self.stream = stream
        self.key_serde = key_serde
        self.value_serde = value_serde
        #: set by the task: the source node that reads this stream in the same task when the
        #: stream is an internal repartition stream with one partition (no round trip needed)
        self.fused: Node | None = None

    def process(self, rec: Record) -> None:
        if self.fused is not None:
            self.fused.forward(rec)
            return
        kb = None if rec.key is None else self.key_serde.serialize(rec.key)
        vb = None if rec.value is None else self.value_serde.serialize(rec.value)
        self.ctx.send(self.stream, kb, vb, rec.timestamp, rec.headers)

    def process_batch(self, recs: list[Record], origins: list[int]) -> None:
        if self.fused is not None:
            self.fused.forward_batch(recs, origins)
            return
        ks, vs, send, stream = self.key_serde.serialize, self.value_serde.serialize, self.ctx.send, self.stream
        for rec in recs:
            key, value = rec.key, rec.value
            send(stream, None if key is None else ks(key), None if value is None else vs(value), rec.timestamp,
                 rec.headers)


class Aggregation:
    """``initializer() -> agg``, ``aggregator(key, value, agg) -> agg`` and, for sessions,
    ``merger(key, agg1, agg2) -> agg``."""

    def __init__(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                 merger: Callable[[Any, Any, Any], Any] | None) -> None:
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger


class AggregateNode(Node):
    """``count`` / ``reduce`` / ``aggregate`` per key; forwards each updated value."""

    def __init__(self, name: str, store: str, agg: Aggregation) -> None:
        super().__init__(name)
        self.store_name = store
        self.agg = agg

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        self.store = ctx.store(self.store_name)

    def process(self, rec: Record) -> None:
        if rec.key is None:
            self.ctx.count("skipped_null_key")
            return
        kb = self.store.key_serde.serialize(rec.key)
        current = self.store.get_raw(kb)
        if current is None:
            current = self.agg.initializer()
        new = self.agg.aggregator(rec.key, rec.value, current)
        self.store.put_raw(kb, new)
        self.forward(Record(rec.key, new, rec.timestamp, rec.headers))

    def process_batch(self, recs: list[Record], origins: list[int]) -> None:
        """Each record as :meth:`process`, the keys of the batch read ahead from a served
        engine in one round trip (:meth:`~.stores.KeyValueStore.prefetch_raw`)."""
        store = self.store
        if store.remote:
            serialize = store.key_serde.serialize
            store.prefetch_raw([serialize(rec.key) for rec in recs if rec.key is not None])
        super().process_batch(recs, origins)


def _iterable(value: Any, where: str, what: str) -> Iterable[Any]:
    if not isinstance(value, Iterable):
        raise errors.TopologyError(f"{where}: the function must return an iterable of {what}, got {value!r:.80}")
    return value


def _pair(value: Any, where: str) -> tuple[Any, Any]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise errors.TopologyError(f"{where}: the function must return a (key, value) pair, got {value!r:.80}")
    return value[0], value[1]

