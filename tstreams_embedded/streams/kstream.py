"""The stream side of the DSL: :class:`KStream` and what grouping and windowing make of it.

Each operation adds node specifications to the :class:`~.topology.TopologyGraph` the stream
belongs to (see :mod:`.topology`); joins and dedup are added by :mod:`.joins` and
:mod:`.dedup`, tables by :mod:`.table`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .. import errors
from ..engine.protocol.validate import check_name
from . import nodes as N
from .dedup import add_dedup
from .joins import join
from .nodes.joins import JoinKind
from .nodes.windowed import SuppressNode, WindowAggregateNode
from .processor import ProcessorNode
from .serdes import SerdeSpec, WindowedSerde, serde
from .topology import TopologyGraph, check_callable
from .windows import SessionWindows, SlidingWindows, Windows


class KStream:
    """A stream of records; every operation returns a new KStream (or a grouped stream)."""

    def __init__(self, builder: TopologyGraph, node: str, key_changed: bool, windowed: bool = False) -> None:
        self._b = builder
        self._node = node
        self._key_changed = key_changed
        self._windowed = windowed  # keys are Windowed (written with a WindowedSerde)

    def _then(self, kind: str, make: Callable[[str], N.Node], name: str | None = None,
              key_changed: bool | None = None) -> KStream:
        node = self._b.add_node(kind, make, [self._node], name)
        if key_changed is None:
            return KStream(self._b, node, self._key_changed, self._windowed)
        return KStream(self._b, node, key_changed)

    @property
    def name(self) -> str:
        """The name of the node this stream comes from."""
        return self._node

    @property
    def builder(self) -> TopologyGraph:
        """The graph (the :class:`~.builder.StreamsBuilder`) this stream belongs to."""
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
        return self._join(other, joiner, windows, key_selector, JoinKind.INNER, name, serdes)

    def left_join(self, other: Any, joiner: Callable[[Any, Any], Any], windows: Any = None, *,
                  key_selector: Callable[[Any, Any], Any] | None = None, name: str | None = None,
                  **serdes: SerdeSpec) -> KStream:
        """Like :meth:`join`, and every record without a match with None as the other value."""
        return self._join(other, joiner, windows, key_selector, JoinKind.LEFT, name, serdes)

    def outer_join(self, other: Any, joiner: Callable[[Any, Any], Any], windows: Any = None, *,
                   name: str | None = None, **serdes: SerdeSpec) -> KStream:
        """Windowed stream–stream outer join (``windows=JoinWindows(...)``, required):
        unmatched records of both sides, padded with None."""
        return self._join(other, joiner, windows, None, JoinKind.OUTER, name, serdes)

    def _join(self, other: Any, joiner: Callable[[Any, Any], Any], windows: Any,
              key_selector: Callable[[Any, Any], Any] | None, kind: JoinKind, name: str | None,
              serdes: dict[str, SerdeSpec]) -> KStream:
        node, key_changed = join(self, other, joiner, windows, key_selector, kind, name, serdes)
        return KStream(self._b, node, key_changed=key_changed)

    def dedup(self, key: Callable[[Any, Any], Any], ttl_ms: int, *, key_serde: SerdeSpec = "msgpack",
              store: str | None = None, name: str | None = None) -> KStream:
        """Drop records whose ``key(k, v)`` was seen less than ``ttl_ms`` (event time) before
        (see :mod:`.dedup`)."""
        node = add_dedup(self._b, self._node, self._key_changed, key, ttl_ms, key_serde, store, name)
        return KStream(self._b, node, key_changed=False)

    # -- stateless ---------------------------------------------------------------------------
    def filter(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """Records for which ``predicate(key, value)`` is true."""
        check_callable(predicate, "predicate")
        return self._then("filter", lambda n: N.FilterNode(n, predicate, True), name)

    def filter_not(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """Records for which ``predicate(key, value)`` is false."""
        check_callable(predicate, "predicate")
        return self._then("filter", lambda n: N.FilterNode(n, predicate, False), name)

    def map(self, fn: Callable[[Any, Any], tuple[Any, Any]], *, name: str | None = None) -> KStream:
        """``fn(key, value) -> (new key, new value)``."""
        check_callable(fn, "fn")
        return self._then("map", lambda n: N.MapNode(n, fn), name, key_changed=True)

    def map_values(self, fn: Callable[..., Any], *, with_key: bool = False, name: str | None = None) -> KStream:
        """``fn(value)`` (or ``fn(key, value)`` with ``with_key=True``) as the new value."""
        check_callable(fn, "fn")
        if not isinstance(with_key, bool):
            raise errors.InvalidArgument(f"with_key must be True or False, got {with_key!r:.40}")
        return self._then("map-values", lambda n: N.MapValuesNode(n, fn, with_key), name)

    def flat_map(self, fn: Callable[[Any, Any], Iterable[tuple[Any, Any]]], *, name: str | None = None) -> KStream:
        """``fn(key, value) -> iterable of (key, value)``."""
        check_callable(fn, "fn")
        return self._then("flat-map", lambda n: N.FlatMapNode(n, fn, False), name, key_changed=True)

    def flat_map_values(self, fn: Callable[[Any], Iterable[Any]], *, name: str | None = None) -> KStream:
        """``fn(value) -> iterable of values``, each with the record's key."""
        check_callable(fn, "fn")
        return self._then("flat-map-values", lambda n: N.FlatMapNode(n, fn, True), name)

    def select_key(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """``fn(key, value)`` as the new key."""
        check_callable(fn, "fn")
        return self._then("select-key", lambda n: N.SelectKeyNode(n, fn), name, key_changed=True)

    def peek(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """Call ``fn(key, value)`` and pass the record on unchanged."""
        check_callable(fn, "fn")
        return self._then("peek", lambda n: N.PeekNode(n, fn), name)

    def foreach(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> None:
        """Call ``fn(key, value)`` for every record (terminal)."""
        check_callable(fn, "fn")
        self._then("foreach", lambda n: N.PeekNode(n, fn), name)

    def split(self, *, prefix: str = "", name: str | None = None) -> BranchedKStream:
        """Named branches: each record goes to the first branch whose predicate holds."""
        if not isinstance(prefix, str):
            raise errors.InvalidArgument(f"split prefix must be a str, got {prefix!r:.40}")
        return BranchedKStream(self, prefix, name)

    def merge(self, other: KStream, *, name: str | None = None) -> KStream:
        """The records of both streams."""
        if not isinstance(other, KStream) or other.builder is not self._b:
            raise errors.TopologyError("merge takes a KStream of the same builder")
        node = self._b.add_node("merge", N.Node, [self._node, other.name], name)
        return KStream(self._b, node, self._key_changed or other.key_changed)

    def to(self, stream: str, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack") -> None:
        """Write the records to the engine stream ``stream`` (created with the task count of
        partitions if missing), in the task's commit."""
        check_name(stream)
        if self._windowed:
            key_serde = WindowedSerde(serde(key_serde, "key_serde"))
        ks, vs = self._b.add_sink(stream, key_serde, value_serde)
        self._then("sink", lambda n: N.SinkNode(n, stream, ks, vs))

    def through(self, stream: str, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack") -> KStream:
        """Write to ``stream`` and read it back (records land on their key's partition).
        Windowed keys (a windowed table's ``to_stream()``) stay windowed."""
        check_name(stream)
        key_serde = self._key_serde_written(key_serde)
        ks, vs = self._b.add_sink(stream, key_serde, value_serde)
        self._then("sink", lambda n: N.SinkNode(n, stream, ks, vs))
        return KStream(self._b, self._b.add_source_node(stream, key_serde, value_serde, None), key_changed=False,
                       windowed=self._windowed)

    def repartition(self, *, name: str | None = None, key_serde: SerdeSpec = "msgpack",
                    value_serde: SerdeSpec = "msgpack", partitions: int | None = None) -> KStream:
        """Through an internal stream ``<application_id>-<name or a number>-repartition``.
        Windowed keys stay windowed."""
        key_serde = self._key_serde_written(key_serde)
        internal = self._b.add_internal_stream(name, partitions)
        ks, vs = self._b.add_sink(internal, key_serde, value_serde)
        self._then("sink", lambda n: N.SinkNode(n, internal, ks, vs))
        return KStream(self._b, self._b.add_source_node(internal, key_serde, value_serde, None), key_changed=False,
                       windowed=self._windowed)

    def _key_serde_written(self, key_serde: SerdeSpec) -> SerdeSpec:
        """The key serde records are written with: ``key_serde``, around windowed keys
        (:class:`~.windows.Windowed`) when this stream carries them."""
        return WindowedSerde(serde(key_serde, "key_serde")) if self._windowed else key_serde

    # -- stateful ----------------------------------------------------------------------------
    def group_by_key(self, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack",
                     name: str | None = None) -> KGroupedStream:
        """Group by the current key (repartitioned first if an upstream operation may have
        changed keys, through ``<application_id>-<name>-repartition``: see :meth:`group_by`)."""
        serde(key_serde, "key_serde")
        serde(value_serde, "value_serde")
        if name is not None:
            check_name(name, "repartition name")
        s = self.repartition(name=name, key_serde=key_serde, value_serde=value_serde) if self._key_changed else self
        return KGroupedStream(s, key_serde)

    def group_by(self, selector: Callable[[Any, Any], Any], *, key_serde: SerdeSpec = "msgpack",
                 value_serde: SerdeSpec = "msgpack", name: str | None = None) -> KGroupedStream:
        """Group by ``selector(key, value)`` (through a repartition stream). ``name`` (like
        Kafka's ``Grouped.as``) names it ``<application_id>-<name>-repartition``; without
        it, the stream is numbered by the operation's position in the topology, and the
        number changes when operations are added before it (see docs/STREAMS.md, *Internal
        streams when a topology changes*)."""
        check_callable(selector, "selector")
        return self.select_key(selector).group_by_key(key_serde=key_serde, value_serde=value_serde, name=name)

    def process(self, factory: Callable[[], Any], *, stores: Iterable[str] = (), name: str | None = None) -> KStream:
        """Run a user :class:`~.processor.Processor` (``factory()`` makes one per task); the
        records it forwards form the returned stream."""
        check_callable(factory, "factory")
        names = tuple(stores)
        for s in names:
            if not self._b.has_store(s):
                raise errors.TopologyError(f"store {s!r} is not declared (builder.add_state_store)")
        return self._then("processor", lambda n: ProcessorNode(n, factory, names), name, key_changed=True)


class BranchedKStream:
    """``stream.split()``: add ``branch(predicate, name=…)`` calls, then ``default_branch()``
    or ``no_default_branch()``, which return ``{name: KStream}``."""

    def __init__(self, stream: KStream, prefix: str, name: str | None) -> None:
        self._stream = stream
        self._prefix = prefix
        self._predicates: list[Callable[[Any, Any], Any] | None] = []
        self._names: list[str] = []
        preds = self._predicates
        self._node = stream.builder.add_node("split", lambda n: _branch_node(n, preds), [stream.name], name)

    def branch(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> BranchedKStream:
        check_callable(predicate, "predicate")
        self._add(predicate, name)
        return self

    def _add(self, predicate: Callable[[Any, Any], Any] | None, name: str | None) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise errors.InvalidArgument(f"a branch name must be a non-empty str, got {name!r:.40}")
        label = self._prefix + (name if name is not None else str(len(self._names) + 1))
        if label in self._names:
            raise errors.TopologyError(f"branch {label!r} already exists")
        self._predicates.append(predicate)
        self._names.append(label)

    def default_branch(self, *, name: str = "0") -> dict[str, KStream]:
        if name is None:
            raise errors.InvalidArgument("the default branch needs a name (a non-empty str)")
        self._add(None, name)
        return self._result()

    def no_default_branch(self) -> dict[str, KStream]:
        return self._result()

    def _result(self) -> dict[str, KStream]:
        b = self._stream.builder
        out = {}
        for i, label in enumerate(self._names):
            node = b.add_node("branch", N.Node, [self._node], branch=i)
            out[label] = KStream(b, node, self._stream.key_changed)
        return out


def _branch_node(name: str, predicates: list[Callable[[Any, Any], Any] | None]) -> N.BranchNode:
    node = N.BranchNode(name, list(predicates))
    node.branches = [None] * len(predicates)
    return node


def _count_agg() -> N.Aggregation:
    return N.Aggregation(lambda: 0, lambda k, v, agg: agg + 1, lambda k, a, b: a + b)


def _reduce_agg(reducer: Callable[[Any, Any], Any]) -> N.Aggregation:
    check_callable(reducer, "reducer")
    return N.Aggregation(lambda: None, lambda k, v, agg: v if agg is None else reducer(agg, v),
                         lambda k, a, b: b if a is None else a if b is None else reducer(a, b))


def _aggregate_agg(initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                   merger: Callable[[Any, Any, Any], Any] | None) -> N.Aggregation:
    check_callable(initializer, "initializer")
    check_callable(aggregator, "aggregator")
    if merger is not None:
        check_callable(merger, "merger")
    return N.Aggregation(initializer, aggregator, merger)


class _CountAndReduce:
    """``count`` and ``reduce`` of a grouped stream, with or without windows: both are
    aggregations that the subclass materializes (``_aggregate``)."""

    def _aggregate(self, agg: N.Aggregation, store: str | None, value_serde: SerdeSpec, name: str | None) -> KTable:
        raise NotImplementedError

    def count(self, *, store: str | None = None, name: str | None = None) -> KTable:
        """The number of records per key (and window)."""
        return self._aggregate(_count_agg(), store, "msgpack", name)

    def reduce(self, reducer: Callable[[Any, Any], Any], *, store: str | None = None,
               value_serde: SerdeSpec = "msgpack", name: str | None = None) -> KTable:
        """``reducer(aggregate, value)`` over the values of each key (and window)."""
        return self._aggregate(_reduce_agg(reducer), store, value_serde, name)


class KGroupedStream(_CountAndReduce):
    """Records grouped by key: ``count``, ``reduce``, ``aggregate``, or ``windowed_by``."""

    def __init__(self, stream: KStream, key_serde: SerdeSpec) -> None:
        self._stream = stream
        self._key_serde = key_serde

    @property
    def stream(self) -> KStream:
        """The grouped stream."""
        return self._stream

    @property
    def key_serde(self) -> SerdeSpec:
        return self._key_serde

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], *,
                  store: str | None = None, value_serde: SerdeSpec = "msgpack", name: str | None = None) -> KTable:
        """``aggregator(key, value, aggregate)`` from ``initializer()`` per key."""
        return self._aggregate(_aggregate_agg(initializer, aggregator, None), store, value_serde, name)

    def _aggregate(self, agg: N.Aggregation, store: str | None, value_serde: SerdeSpec, name: str | None) -> KTable:
        b = self._stream.builder
        store_name = b.add_store(store, self._key_serde, value_serde, kind="aggregate-store")
        node = b.add_node("aggregate", lambda n: N.AggregateNode(n, store_name, agg), [self._stream.name], name)
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


class WindowedKStream(_CountAndReduce):
    """A grouped stream with windows: ``count``, ``reduce``, ``aggregate`` per key and window."""

    def __init__(self, grouped: KGroupedStream, windows: Windows, late_to: str | None,
                 late_value_serde: SerdeSpec) -> None:
        self._g = grouped
        self._windows = windows
        self._late_to = late_to
        self._late_value_serde = late_value_serde

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], *,
                  merger: Callable[[Any, Any, Any], Any] | None = None, store: str | None = None,
                  value_serde: SerdeSpec = "msgpack", name: str | None = None) -> KTable:
        """Session windows need ``merger(key, agg1, agg2)`` to merge sessions."""
        if isinstance(self._windows, SessionWindows) and merger is None:
            raise errors.TopologyError("aggregate over SessionWindows needs merger=(key, agg1, agg2) -> agg")
        return self._aggregate(_aggregate_agg(initializer, aggregator, merger), store, value_serde, name)

    def _aggregate(self, agg: N.Aggregation, store: str | None, value_serde: SerdeSpec, name: str | None) -> KTable:
        g = self._g
        b = g.stream.builder
        store_name = b.add_store(store, g.key_serde, value_serde, windowed=True, kind="window-store")
        raw = None
        if isinstance(self._windows, SlidingWindows):
            raw = b.add_store(store_name + ".record-slices", g.key_serde, "msgpack", windowed=True)
        windows, late_to = self._windows, self._late_to
        late_serde = serde(self._late_value_serde, "late_value_serde")
        if late_to is not None:
            b.add_sink(late_to, g.key_serde, late_serde)
        def make(n: str) -> N.Node:
            return WindowAggregateNode(n, store_name, windows, agg, late_to, late_serde, raw)

        node = b.add_node("window-aggregate", make, [g.stream.name], name)
        return KTable(b, node, windows, store_name)


class KTable:
    """The result of an aggregation: a changelog of values per key (per key and window)."""

    def __init__(self, builder: TopologyGraph, node: str, windows: Windows | None, store: str,
                 suppressed: bool = False) -> None:
        self._b = builder
        self._node = node
        self._windows = windows
        self._suppressed = suppressed
        #: the name of the store that holds the table
        self.store = store

    @property
    def suppressed(self) -> bool:
        """Whether the table emits only final results (:meth:`suppress_until_window_closes`)."""
        return self._suppressed

    def suppress_until_window_closes(self) -> KTable:
        """A table that emits one final result per window, when it closes (stream time >=
        end + grace). This table keeps emitting every update to its other readers."""
        if self._windows is None:
            raise errors.TopologyError("suppress_until_window_closes needs a windowed table (windowed_by)")
        if self._suppressed:
            return self
        node = self._b.add_node("suppress", SuppressNode, [self._node])
        return KTable(self._b, node, self._windows, self.store, suppressed=True)

    def to_stream(self) -> KStream:
        """The table's updates as a stream; windowed keys are :class:`~.windows.Windowed`."""
        windowed = self._windows is not None
        return KStream(self._b, self._node, key_changed=windowed, windowed=windowed)


__all__ = ["BranchedKStream", "KGroupedStream", "KStream", "KTable", "WindowedKStream"]
