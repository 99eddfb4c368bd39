"""The DSL: :class:`StreamsBuilder` builds a :class:`Topology` of processor nodes.

The builder only records *specifications*; :meth:`Topology.instantiate` makes the runtime
nodes (:mod:`.nodes`) of one task. Keys that a ``group_by`` (or an operation that may
change keys, followed by ``group_by_key``) needs on the right task go through an internal
*repartition stream* ``<application_id>-<n>-repartition``: written by the task that read
the record, in the same commit as everything else, and read back by the task of the key's
partition.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..engine.validate import check_name
from . import nodes as N
from .serdes import SerdeSpec, WindowedSerde, serde
from .windowed import WindowAggregateNode
from .windows import SessionWindows, SlidingWindows, Windowed, Windows

INTERNAL = "\x00internal:"  # prefix of a stream name resolved against the application id


def is_internal(name: str) -> bool:
    """Whether a topology's stream name is an internal (repartition) stream."""
    return name.startswith(INTERNAL)


def internal_name(application_id: str, name: str) -> str:
    return f"{application_id}-{name[len(INTERNAL):]}" if name.startswith(INTERNAL) else name


@dataclass
class NodeSpec:
    name: str
    make: Callable[[Callable[[str], str]], N.Node]
    parents: list[str]
    branch: int | None = None  # index in the parent's BranchNode


@dataclass
class StoreSpec:
    name: str
    key_serde: Any
    value_serde: Any
    windowed: bool = False


@dataclass
class Topology:
    """A built topology (``StreamsBuilder.build()``): give it to ``App`` or ``TestDriver``."""

    nodes: dict[str, NodeSpec]
    stores: dict[str, StoreSpec]
    sources: dict[str, str]  # stream (INTERNAL-prefixed when internal) -> source node name
    sinks: dict[str, tuple[Any, Any]]  # stream -> (key serde, value serde) of its writers
    internal: dict[str, int | None] = field(default_factory=dict)  # internal stream -> partitions (None: task count)
    #: groups of streams that joins need co-partitioned (equal partition counts; checked by App)
    copartition: list[frozenset[str]] = field(default_factory=list)
    #: global tables: stream -> spec (see :mod:`.global_table`); not task sources
    global_tables: dict[str, Any] = field(default_factory=dict)

    def instantiate(self, application_id: str) -> dict[str, N.Node]:
        """The runtime nodes of one task, wired."""
        def resolve(name: str) -> str:
            return internal_name(application_id, name)

        made = {name: spec.make(resolve) for name, spec in self.nodes.items()}
        for name, spec in self.nodes.items():
            for parent in spec.parents:
                p = made[parent]
                if spec.branch is not None:
                    assert isinstance(p, N.BranchNode)
                    p.branches[spec.branch] = made[name]
                else:
                    p.children.append(made[name])
        return made

    def stream_names(self, application_id: str) -> tuple[list[str], list[str]]:
        """``(input streams, output streams)`` with internal names resolved."""
        return ([internal_name(application_id, s) for s in self.sources],
                [internal_name(application_id, s) for s in self.sinks])


class StreamsBuilder:
    """Builds a topology with the DSL (``stream``, ``filter``, ``group_by``, …) or the
    Processor API (``add_state_store``, ``add_processor`` / ``stream.process``)."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeSpec] = {}
        self._stores: dict[str, StoreSpec] = {}
        self._sources: dict[str, str] = {}
        self._sinks: dict[str, tuple[Any, Any]] = {}
        self._internal: dict[str, int | None] = {}
        self._copartition: list[frozenset[str]] = []
        self._global_tables: dict[str, Any] = {}
        self._counter = itertools.count()

    # -- naming ---------------------------------------------------------------------------
    def _name(self, kind: str, given: str | None = None) -> str:
        if given is not None:
            check_name(given, "node name")
            if given in self._nodes:
                raise errors.TopologyError(f"a node named {given!r} already exists")
            return given
        return f"{kind}-{next(self._counter):04d}"

    def _add(self, kind: str, make: Callable[[str], N.Node], parents: list[str],
             name: str | None = None, branch: int | None = None) -> str:
        """Add a node; ``make(node name)`` builds its runtime node for a task."""
        node_name = self._name(kind, name)

        def build(resolve: Callable[[str], str]) -> N.Node:
            return make(node_name)

        self._nodes[node_name] = NodeSpec(node_name, build, parents, branch)
        return node_name

    # -- sources and stores -------------------------------------------------------------
    def stream(self, name: str, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "bytes",
               timestamp: Callable[[Any, Any], int] | None = None) -> KStream:
        """A stream of records read from the engine stream ``name``.

        Items written by this library (envelopes) carry key, value and timestamp; any other
        item is a value with key None and its transaction's time. ``timestamp(key, value)``
        overrides the timestamp (event time, epoch ms)."""
        check_name(name)
        if timestamp is not None and not callable(timestamp):
            raise errors.InvalidArgument("timestamp must be a function (key, value) -> epoch ms")
        return self._source(name, key_serde, value_serde, timestamp)

    def _source(self, stream: str, key_serde: SerdeSpec, value_serde: SerdeSpec,
                timestamp: Callable[[Any, Any], int] | None) -> KStream:
        if stream in self._sources:
            raise errors.TopologyError(f"stream {stream!r} is already a source of this topology")
        ks, vs = serde(key_serde, "key_serde"), serde(value_serde, "value_serde")
        node = self._add("source", lambda n: N.SourceNode(n, stream, ks, vs, timestamp), [])
        self._sources[stream] = node
        return KStream(self, node, key_changed=False)

    def add_state_store(self, name: str, *, key_serde: SerdeSpec = "msgpack",
                        value_serde: SerdeSpec = "msgpack") -> StreamsBuilder:
        """Declare a key-value store for processors (``stores=[name]``)."""
        self._store(name, key_serde, value_serde)
        return self

    def _store(self, name: str | None, key_serde: SerdeSpec, value_serde: SerdeSpec, windowed: bool = False,
               kind: str = "store") -> str:
        if name is None:
            name = f"{kind}-{next(self._counter):04d}"
        check_name(name, "store name")
        if "/" in name:
            raise errors.InvalidArgument(f"store name must not contain '/', got {name!r}")
        if name in self._stores:
            raise errors.TopologyError(f"a store named {name!r} already exists")
        self._stores[name] = StoreSpec(name, serde(key_serde, "key_serde"), serde(value_serde, "value_serde"),
                                       windowed)
        return name

    def add_processor(self, name: str, factory: Callable[[], Any], parent: KStream,
                      stores: Iterable[str] = ()) -> KStream:
        """A user processor (see :class:`~.processor.Processor`) fed by ``parent``."""
        return parent.process(factory, stores=stores, name=name)

    def _sink(self, stream: str, key_serde: SerdeSpec, value_serde: SerdeSpec) -> tuple[Any, Any]:
        ks, vs = serde(key_serde, "key_serde"), serde(value_serde, "value_serde")
        self._sinks.setdefault(stream, (ks, vs))
        return ks, vs

    def build(self) -> Topology:
        """The topology (stores used by processors were checked when they were added)."""
        if not self._sources:
            raise errors.TopologyError("a topology needs at least one source stream (builder.stream(...))")
        return Topology(dict(self._nodes), dict(self._stores), dict(self._sources), dict(self._sinks),
                        dict(self._internal), list(self._copartition), dict(self._global_tables))

    # -- tables (see .table and .global_table) and the hooks their modules build with --------
    def table(self, name: str, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack",
              store: str | None = None) -> Any:
        """A table (KTable) of the latest value per key of stream ``name`` (a None value
        deletes the key), materialized in store ``store`` (default ``<name>-table``)."""
        from .table import source_table

        return source_table(self, name, key_serde, value_serde, store)

    def global_table(self, name: str, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack",
                     store: str | None = None) -> Any:
        """A global table: stream ``name`` replicated whole to every task (see
        :mod:`.global_table`); join it with ``stream.join(table, joiner, key_selector=…)``."""
        from .global_table import add_global_table

        return add_global_table(self, name, key_serde, value_serde, store)

    def add_node(self, kind: str, make: Callable[[str], N.Node], parents: list[str], name: str | None = None) -> str:
        """Add a runtime node made by ``make(node name)`` with ``parents``; its name."""
        return self._add(kind, make, parents, name)

    def add_store(self, name: str | None, key_serde: SerdeSpec, value_serde: SerdeSpec, kind: str = "store") -> str:
        """Declare a key-value store (a name is made from ``kind`` when ``name`` is None)."""
        return self._store(name, key_serde, value_serde, kind=kind)

    def add_source(self, stream: str, key_serde: SerdeSpec, value_serde: SerdeSpec) -> KStream:
        """A source node reading ``stream`` (checked like :meth:`stream`)."""
        check_name(stream)
        return self._source(stream, key_serde, value_serde, None)

    def add_global(self, stream: str, spec: Any) -> None:
        if stream in self._global_tables or stream in self._sources:
            raise errors.TopologyError(f"stream {stream!r} is already a source of this topology")
        self._global_tables[stream] = spec

    def source_streams(self, node: str) -> frozenset[str]:
        """The source streams upstream of ``node``."""
        by_node = {n: s for s, n in self._sources.items()}
        seen: set[str] = set()
        todo = [node]
        out: set[str] = set()
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            if n in by_node:
                out.add(by_node[n])
            todo.extend(self._nodes[n].parents)
        return frozenset(out)

    def require_copartitioned(self, streams: frozenset[str]) -> None:
        """The App checks at start that these streams have equal partition counts."""
        if len(streams) > 1:
            self._copartition.append(streams)


class KStream:
    """A stream of records; every operation returns a new KStream (or a grouped stream)."""

    def __init__(self, builder: StreamsBuilder, node: str, key_changed: bool, windowed: bool = False) -> None:
        self._b = builder
        self._node = node
        self._key_changed = key_changed
        self._windowed = windowed  # keys are Windowed (written with a WindowedSerde)

    def _then(self, kind: str, make: Callable[[str], N.Node], name: str | None = None,
              key_changed: bool | None = None) -> KStream:
        node = self._b._add(kind, make, [self._node], name)
        if key_changed is None:
            return KStream(self._b, node, self._key_changed, self._windowed)
        return KStream(self._b, node, key_changed)

    @property
    def name(self) -> str:
        """The name of the node this stream comes from."""
        return self._node

    @property
    def builder(self) -> StreamsBuilder:
        return self._b

    @property
    def key_changed(self) -> bool:
        """Whether an upstream operation may have changed keys (records may be on the wrong task)."""
        return self._key_changed

    # -- joins and dedup (see .joins and .dedup) ---------------------------------------------
    def join(self, other: Any, joiner: Callable[[Any, Any], Any], windows: Any = None, *,
             key_selector: Callable[[Any, Any], Any] | None = None, name: str | None = None,
             **serdes: SerdeSpec) -> KStream:
        """Inner join with a table, a global table (``key_selector``) or a stream (``windows=
        JoinWindows(...)``); ``joiner(this value, other value)``."""
        from .joins import join

        return join(self, other, joiner, windows, key_selector, "inner", name, serdes)

    def left_join(self, other: Any, joiner: Callable[[Any, Any], Any], windows: Any = None, *,
                  key_selector: Callable[[Any, Any], Any] | None = None, name: str | None = None,
                  **serdes: SerdeSpec) -> KStream:
        """Like :meth:`join`, and every record without a match with None as the other value."""
        from .joins import join

        return join(self, other, joiner, windows, key_selector, "left", name, serdes)

    def outer_join(self, other: KStream, joiner: Callable[[Any, Any], Any], windows: Any, *,
                   name: str | None = None, **serdes: SerdeSpec) -> KStream:
        """Windowed stream–stream outer join: unmatched records of both sides, padded with None."""
        from .joins import join

        return join(self, other, joiner, windows, None, "outer", name, serdes)

    def dedup(self, key: Callable[[Any, Any], Any], ttl_ms: int, *, key_serde: SerdeSpec = "msgpack",
              store: str | None = None, name: str | None = None) -> KStream:
        """Drop records whose ``key(k, v)`` was seen less than ``ttl_ms`` (event time) before
        (see :mod:`.dedup`)."""
        from .dedup import dedup

        return dedup(self, key, ttl_ms, key_serde, store, name)

    # -- stateless ---------------------------------------------------------------------------
    def filter(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """Records for which ``predicate(key, value)`` is true."""
        _callable(predicate, "predicate")
        return self._then("filter", lambda n: N.FilterNode(n, predicate, True), name)

    def filter_not(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """Records for which ``predicate(key, value)`` is false."""
        _callable(predicate, "predicate")
        return self._then("filter", lambda n: N.FilterNode(n, predicate, False), name)

    def map(self, fn: Callable[[Any, Any], tuple[Any, Any]], *, name: str | None = None) -> KStream:
        """``fn(key, value) -> (new key, new value)``."""
        _callable(fn, "fn")
        return self._then("map", lambda n: N.MapNode(n, fn), name, key_changed=True)

    def map_values(self, fn: Callable[..., Any], *, with_key: bool = False, name: str | None = None) -> KStream:
        """``fn(value)`` (or ``fn(key, value)`` with ``with_key=True``) as the new value."""
        _callable(fn, "fn")
        return self._then("map-values", lambda n: N.MapValuesNode(n, fn, with_key), name)

    def flat_map(self, fn: Callable[[Any, Any], Iterable[tuple[Any, Any]]], *, name: str | None = None) -> KStream:
        """``fn(key, value) -> iterable of (key, value)``."""
        _callable(fn, "fn")
        return self._then("flat-map", lambda n: N.FlatMapNode(n, fn, False), name, key_changed=True)

    def flat_map_values(self, fn: Callable[[Any], Iterable[Any]], *, name: str | None = None) -> KStream:
        """``fn(value) -> iterable of values``, each with the record's key."""
        _callable(fn, "fn")
        return self._then("flat-map-values", lambda n: N.FlatMapNode(n, fn, True), name)

    def select_key(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """``fn(key, value)`` as the new key."""
        _callable(fn, "fn")
        return self._then("select-key", lambda n: N.SelectKeyNode(n, fn), name, key_changed=True)

    def peek(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """Call ``fn(key, value)`` and pass the record on unchanged."""
        _callable(fn, "fn")
        return self._then("peek", lambda n: N.PeekNode(n, fn), name)

    def foreach(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> None:
        """Call ``fn(key, value)`` for every record (terminal)."""
        _callable(fn, "fn")
        self._then("foreach", lambda n: N.PeekNode(n, fn), name)

    def split(self, *, prefix: str = "", name: str | None = None) -> BranchedKStream:
        """Named branches: each record goes to the first branch whose predicate holds."""
        return BranchedKStream(self, prefix, name)

    def merge(self, other: KStream, *, name: str | None = None) -> KStream:
        """The records of both streams."""
        if not isinstance(other, KStream) or other._b is not self._b:
            raise errors.TopologyError("merge takes a KStream of the same builder")
        node = self._b._add("merge", N.Node, [self._node, other._node], name)
        return KStream(self._b, node, self._key_changed or other._key_changed)

    def to(self, stream: str, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack") -> None:
        """Write the records to the engine stream ``stream`` (created with the task count of
        partitions if missing), in the task's commit."""
        check_name(stream)
        if self._windowed:
            key_serde = WindowedSerde(serde(key_serde, "key_serde"))
        ks, vs = self._b._sink(stream, key_serde, value_serde)
        self._then("sink", lambda n: N.SinkNode(n, stream, ks, vs))

    def through(self, stream: str, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack") -> KStream:
        """Write to ``stream`` and read it back (records land on their key's partition)."""
        self.to(stream, key_serde=key_serde, value_serde=value_serde)
        return self._b._source(stream, key_serde, value_serde, None)

    def repartition(self, *, name: str | None = None, key_serde: SerdeSpec = "msgpack",
                    value_serde: SerdeSpec = "msgpack", partitions: int | None = None) -> KStream:
        """Through an internal stream ``<application_id>-<name or a number>-repartition``."""
        if name is not None:
            check_name(name, "repartition name")
        internal = f"{INTERNAL}{name or format(next(self._b._counter), '04d')}-repartition"
        if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, int)
                                       or partitions < 1):
            raise errors.InvalidArgument(f"partitions must be a positive integer, got {partitions!r}")
        self._b._internal[internal] = partitions
        ks, vs = self._b._sink(internal, key_serde, value_serde)
        self._then("sink", lambda n: N.SinkNode(n, internal, ks, vs))
        return self._b._source(internal, key_serde, value_serde, None)

    # -- stateful ----------------------------------------------------------------------------
    def group_by_key(self, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack") -> KGroupedStream:
        """Group by the current key (repartitioned first if an upstream operation may have
        changed keys)."""
        s = self.repartition(key_serde=key_serde, value_serde=value_serde) if self._key_changed else self
        return KGroupedStream(s, key_serde)

    def group_by(self, selector: Callable[[Any, Any], Any], *, key_serde: SerdeSpec = "msgpack",
                 value_serde: SerdeSpec = "msgpack") -> KGroupedStream:
        """Group by ``selector(key, value)`` (through a repartition stream)."""
        _callable(selector, "selector")
        return self.select_key(selector).group_by_key(key_serde=key_serde, value_serde=value_serde)

    def process(self, factory: Callable[[], Any], *, stores: Iterable[str] = (), name: str | None = None) -> KStream:
        """Run a user :class:`~.processor.Processor` (``factory()`` makes one per task); the
        records it forwards form the returned stream."""
        _callable(factory, "factory")
        names = tuple(stores)
        for s in names:
            if s not in self._b._stores:
                raise errors.TopologyError(f"store {s!r} is not declared (builder.add_state_store)")
        return self._then("processor", lambda n: N.ProcessorNode(n, factory, names), name, key_changed=True)


class BranchedKStream:
    """``stream.split()``: add ``branch(predicate, name=…)`` calls, then ``default_branch()``
    or ``no_default_branch()``, which return ``{name: KStream}``."""

    def __init__(self, stream: KStream, prefix: str, name: str | None) -> None:
        self._stream = stream
        self._prefix = prefix
        self._predicates: list[Callable[[Any, Any], Any] | None] = []
        self._names: list[str] = []
        preds = self._predicates
        self._node = stream._b._add("split", lambda n: _branch_node(n, preds), [stream._node], name)

    def branch(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> BranchedKStream:
        _callable(predicate, "predicate")
        self._add(predicate, name)
        return self

    def _add(self, predicate: Callable[[Any, Any], Any] | None, name: str | None) -> None:
        label = self._prefix + (name if name is not None else str(len(self._names) + 1))
        if label in self._names:
            raise errors.TopologyError(f"branch {label!r} already exists")
        self._predicates.append(predicate)
        self._names.append(label)

    def default_branch(self, *, name: str = "0") -> dict[str, KStream]:
        self._add(None, name)
        return self._result()

    def no_default_branch(self) -> dict[str, KStream]:
        return self._result()

    def _result(self) -> dict[str, KStream]:
        b = self._stream._b
        out = {}
        for i, label in enumerate(self._names):
            node = b._add("branch", N.Node, [self._node], branch=i)
            out[label] = KStream(b, node, self._stream._key_changed)
        return out


def _branch_node(name: str, predicates: list[Callable[[Any, Any], Any] | None]) -> N.BranchNode:
    node = N.BranchNode(name, list(predicates))
    node.branches = [None] * len(predicates)
    return node


def _count_agg() -> N.Aggregation:
    return N.Aggregation(lambda: 0, lambda k, v, agg: agg + 1, lambda k, a, b: a + b)


def _reduce_agg(reducer: Callable[[Any, Any], Any]) -> N.Aggregation:
    _callable(reducer, "reducer")
    return N.Aggregation(lambda: None, lambda k, v, agg: v if agg is None else reducer(agg, v),
                         lambda k, a, b: b if a is None else a if b is None else reducer(a, b))


def _aggregate_agg(initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                   merger: Callable[[Any, Any, Any], Any] | None) -> N.Aggregation:
    _callable(initializer, "initializer")
    _callable(aggregator, "aggregator")
    if merger is not None:
        _callable(merger, "merger")
    return N.Aggregation(initializer, aggregator, merger)


class KGroupedStream:
    """Records grouped by key: ``count``, ``reduce``, ``aggregate``, or ``windowed_by``."""

    def __init__(self, stream: KStream, key_serde: SerdeSpec) -> None:
        self._stream = stream
        self._key_serde = key_serde

    def count(self, *, store: str | None = None, name: str | None = None) -> KTable:
        """The number of records per key."""
        return self._aggregate(_count_agg(), store, "msgpack", name)

    def reduce(self, reducer: Callable[[Any, Any], Any], *, store: str | None = None,
               value_serde: SerdeSpec = "msgpack", name: str | None = None) -> KTable:
        """``reducer(aggregate, value)`` over the values of each key."""
        return self._aggregate(_reduce_agg(reducer), store, value_serde, name)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], *,
                  store: str | None = None, value_serde: SerdeSpec = "msgpack", name: str | None = None) -> KTable:
        """``aggregator(key, value, aggregate)`` from ``initializer()`` per key."""
        return self._aggregate(_aggregate_agg(initializer, aggregator, None), store, value_serde, name)

    def _aggregate(self, agg: N.Aggregation, store: str | None, value_serde: SerdeSpec, name: str | None) -> KTable:
        b = self._stream._b
        store_name = b._store(store, self._key_serde, value_serde, kind="aggregate-store")
        node = b._add("aggregate", lambda n: N.AggregateNode(n, store_name, agg), [self._stream._node], name)
        return KTable(b, node, None, store_name)

    def windowed_by(self, windows: Windows, *, late_to: str | None = None,
                    late_value_serde: SerdeSpec = "msgpack") -> WindowedKStream:
        """Aggregate per key and window (``TimeWindows``, ``SlidingWindows``,
        ``SessionWindows``, ``CalendarWindows``); records past the grace period are dropped
        and counted, or written to ``late_to``."""
        if not isinstance(windows, Windows):
            raise errors.InvalidArgument(f"windowed_by takes a window specification, got {windows!r:.60}")
        if late_to is not None:
            check_name(late_to, "late_to stream")
        return WindowedKStream(self, windows, late_to, late_value_serde)


class WindowedKStream:
    """A grouped stream with windows: ``count``, ``reduce``, ``aggregate`` per key and window."""

    def __init__(self, grouped: KGroupedStream, windows: Windows, late_to: str | None,
                 late_value_serde: SerdeSpec) -> None:
        self._g = grouped
        self._windows = windows
        self._late_to = late_to
        self._late_value_serde = late_value_serde

    def count(self, *, store: str | None = None, name: str | None = None) -> KTable:
        return self._aggregate(_count_agg(), store, "msgpack", name)

    def reduce(self, reducer: Callable[[Any, Any], Any], *, store: str | None = None,
               value_serde: SerdeSpec = "msgpack", name: str | None = None) -> KTable:
        return self._aggregate(_reduce_agg(reducer), store, value_serde, name)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], *,
                  merger: Callable[[Any, Any, Any], Any] | None = None, store: str | None = None,
                  value_serde: SerdeSpec = "msgpack", name: str | None = None) -> KTable:
        """Session windows need ``merger(key, agg1, agg2)`` to merge sessions."""
        if isinstance(self._windows, SessionWindows) and merger is None:
            raise errors.TopologyError("aggregate over SessionWindows needs merger=(key, agg1, agg2) -> agg")
        return self._aggregate(_aggregate_agg(initializer, aggregator, merger), store, value_serde, name)

    def _aggregate(self, agg: N.Aggregation, store: str | None, value_serde: SerdeSpec, name: str | None) -> KTable:
        b = self._g._stream._b
        store_name = b._store(store, self._g._key_serde, value_serde, windowed=True, kind="window-store")
        raw = None
        if isinstance(self._windows, SlidingWindows):
            raw = b._store(store_name + ".records", self._g._key_serde, "msgpack", windowed=True)
        windows, late_to = self._windows, self._late_to
        late_serde = serde(self._late_value_serde, "late_value_serde")
        if late_to is not None:
            b._sink(late_to, self._g._key_serde, late_serde)
        holder: list[KTable] = []

        def make(n: str) -> N.Node:
            made = WindowAggregateNode(n, store_name, windows, agg, late_to, late_serde, raw)
            made.suppress = holder[0]._suppressed
            return made

        node = b._add("window-aggregate", make, [self._g._stream._node], name)
        holder.append(KTable(b, node, windows, store_name))
        return holder[0]


class KTable:
    """The result of an aggregation: a changelog of values per key (per key and window)."""

    def __init__(self, builder: StreamsBuilder, node: str, windows: Windows | None, store: str) -> None:
        self._b = builder
        self._node = node
        self._windows = windows
        self._suppressed = False
        #: the name of the store that holds the table
        self.store = store

    def suppress_until_window_closes(self) -> KTable:
        """Emit one final result per window, when it closes (stream time >= end + grace)."""
        if self._windows is None:
            raise errors.TopologyError("suppress_until_window_closes needs a windowed table (windowed_by)")
        self._suppressed = True
        return self

    def to_stream(self) -> KStream:
        """The table's updates as a stream; windowed keys are :class:`~.windows.Windowed`."""
        windowed = self._windows is not None
        return KStream(self._b, self._node, key_changed=windowed, windowed=windowed)


def _callable(fn: Any, what: str) -> None:
    if not callable(fn):
        raise errors.InvalidArgument(f"{what} must be callable, got {fn!r:.60}")


__all__ = ["BranchedKStream", "KGroupedStream", "KStream", "KTable", "StreamsBuilder", "Topology", "Windowed",
           "WindowedKStream"]
