"""Tables (KTables): the latest value per key, and what is derived from it.

A table's nodes pass :class:`Change` records (``value`` is ``Change(new, old)``; ``None``
means "absent"), so that a grouped aggregation can subtract the old value and add the new
one, as in Kafka Streams. ``to_stream()`` turns changes back into records of the new value
(None: a tombstone).

Every table has a *value getter*: how a task reads its current value of a key. A source
table and an aggregation read their store; ``filter``, ``map_values`` and table–table joins
compute from their parents' getters (nothing extra is materialized). Joins use the getters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import errors
from ..engine.protocol.validate import check_name
from . import nodes as N
from .joins import check_copartitioned
from .kstream import KStream
from .nodes import Getter
from .nodes.joins import TagNode
from .nodes.table import (
    Change,
    GroupMapNode,
    TableAggregateNode,
    TableFilterNode,
    TableJoinNode,
    TableMapValuesNode,
    TableSourceNode,
    ToStreamNode,
    join_values,
    store_getter,
)
from .serdes import SerdeSpec, serde
from .topology import TopologyGraph, check_callable


class FlaggedSerde:
    """``(is_addition, value)`` in a repartition stream: one flag byte, then the value."""

    def __init__(self, inner: SerdeSpec) -> None:
        self.inner = serde(inner, "value_serde")

    def serialize(self, obj: Any) -> bytes:
        add, value = obj
        return (b"\x01" if add else b"\x00") + self.inner.serialize(value)

    def deserialize(self, data: bytes) -> Any:
        return (data[:1] == b"\x01", self.inner.deserialize(data[1:]))


class Table:
    """A KTable: ``filter``, ``filter_not``, ``map_values``, ``join`` / ``left_join`` /
    ``outer_join`` with another table, ``group_by(...).aggregate(...)``, ``to_stream()``.

    ``store`` is the name of the store that holds it (None for derived tables, which are
    computed from their parent when read)."""

    def __init__(self, builder: TopologyGraph, node: str, getter: Getter, store: str | None) -> None:
        self._b = builder
        self._node = node
        self._getter = getter
        #: the store that materializes this table (queryable with ``app.store``), or None
        self.store = store

    @property
    def name(self) -> str:
        return self._node

    @property
    def getter(self) -> Getter:
        return self._getter

    @property
    def builder(self) -> TopologyGraph:
        """The graph (the :class:`~.builder.StreamsBuilder`) this table belongs to."""
        return self._b

    def sources(self) -> frozenset[str]:
        return self._b.source_streams(self._node)

    def _derive(self, kind: str, make: Callable[[str], N.Node], getter: Getter, name: str | None) -> Table:
        return Table(self._b, self._b.add_node(kind, make, [self._node], name), getter, None)

    def filter(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> Table:
        """Rows for which ``predicate(key, value)`` holds (a row that stops matching is deleted)."""
        return self._filter(predicate, True, name)

    def filter_not(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> Table:
        return self._filter(predicate, False, name)

    def _filter(self, predicate: Callable[[Any, Any], Any], keep: bool, name: str | None) -> Table:
        check_callable(predicate, "predicate")
        parent = self._getter

        def getter(ctx: N.TaskContext) -> Callable[[Any], Any]:
            get = parent(ctx)

            def lookup(key: Any) -> Any:
                v = get(key)
                return None if v is None or bool(predicate(key, v)) is not keep else v
            return lookup
        return self._derive("table-filter", lambda n: TableFilterNode(n, predicate, keep), getter, name)

    def map_values(self, fn: Callable[..., Any], *, with_key: bool = False, name: str | None = None) -> Table:
        """``fn(value)`` (or ``fn(key, value)``) as each row's value."""
        check_callable(fn, "fn")
        f: Callable[[Any, Any], Any] = fn if with_key else (lambda k, v: fn(v))
        parent = self._getter

        def getter(ctx: N.TaskContext) -> Callable[[Any], Any]:
            get = parent(ctx)

            def lookup(key: Any) -> Any:
                v = get(key)
                return None if v is None else f(key, v)
            return lookup
        return self._derive("table-map-values", lambda n: TableMapValuesNode(n, f), getter, name)

    def to_stream(self) -> KStream:
        """The table's updates as records of the new value (None for a deleted row)."""
        return KStream(self._b, self._b.add_node("table-to-stream", ToStreamNode, [self._node]), key_changed=False)

    def join(self, other: Table, joiner: Callable[[Any, Any], Any], *, name: str | None = None) -> Table:
        """Rows whose key is in both tables: ``joiner(this value, other value)``."""
        return self._join(other, joiner, "inner", name)

    def left_join(self, other: Table, joiner: Callable[[Any, Any], Any], *, name: str | None = None) -> Table:
        """Every row of this table, joined with the other's row or None."""
        return self._join(other, joiner, "left", name)

    def outer_join(self, other: Table, joiner: Callable[[Any, Any], Any], *, name: str | None = None) -> Table:
        """Rows of either table, the missing side None."""
        return self._join(other, joiner, "outer", name)

    def _join(self, other: Table, joiner: Callable[[Any, Any], Any], kind: str, name: str | None) -> Table:
        if not isinstance(other, Table) or other.builder is not self._b:
            raise errors.TopologyError("a table joins a table of the same builder (b.table(...) or derived)")
        check_callable(joiner, "joiner")
        check_copartitioned(self._b, self.sources(), other.sources(), "table–table join")
        b = self._b
        left = b.add_node("join-this", lambda n: TagNode(n, 0), [self._node])
        right = b.add_node("join-other", lambda n: TagNode(n, 1), [other.name])
        getters = (self._getter, other.getter)
        node = b.add_node("table-join", lambda n: TableJoinNode(n, getters, joiner, kind), [left, right], name)

        def getter(ctx: N.TaskContext) -> Callable[[Any], Any]:
            lg, rg = getters[0](ctx), getters[1](ctx)
            return lambda key: join_values(kind, joiner, lg(key), rg(key))
        return Table(b, node, getter, None)

    def group_by(self, selector: Callable[[Any, Any], tuple[Any, Any]], *, key_serde: SerdeSpec = "msgpack",
                 value_serde: SerdeSpec = "msgpack", name: str | None = None) -> GroupedTable:
        """Regroup rows by ``selector(key, value) -> (new key, new value)`` (through a
        repartition stream, ``<application_id>-<name>-repartition`` when ``name`` is given,
        like Kafka's ``Grouped.as``; else numbered); aggregate with an adder and a subtractor."""
        check_callable(selector, "selector")
        if name is not None:
            check_name(name, "repartition name")
        node = self._b.add_node("table-group-by", lambda n: GroupMapNode(n, selector), [self._node])
        stream = KStream(self._b, node, key_changed=True).repartition(name=name, key_serde=key_serde,
                                                                      value_serde=FlaggedSerde(value_serde))
        return GroupedTable(stream, key_serde)


class GroupedTable:
    """``table.group_by(...)``: ``aggregate(initializer, adder, subtractor)``, ``count()``,
    ``reduce(adder, subtractor)``."""

    def __init__(self, stream: KStream, key_serde: SerdeSpec) -> None:
        self._stream = stream
        self._key_serde = key_serde

    def aggregate(self, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any],
                  subtractor: Callable[[Any, Any, Any], Any], *, store: str | None = None,
                  value_serde: SerdeSpec = "msgpack", name: str | None = None) -> Table:
        """Per new key: ``adder(key, value, agg)`` when a row joins the group,
        ``subtractor(key, value, agg)`` when it leaves it (an update does both)."""
        for fn, what in ((initializer, "initializer"), (adder, "adder"), (subtractor, "subtractor")):
            check_callable(fn, what)
        b = self._stream.builder
        store_name = b.add_store(store, self._key_serde, value_serde, kind="table-aggregate-store")
        node = b.add_node("table-aggregate",
                          lambda n: TableAggregateNode(n, store_name, initializer, adder, subtractor),
                          [self._stream.name], name)
        return Table(b, node, store_getter(store_name), store_name)

    def count(self, *, store: str | None = None, name: str | None = None) -> Table:
        """The number of rows per new key."""
        return self.aggregate(lambda: 0, lambda k, v, n: n + 1, lambda k, v, n: n - 1, store=store, name=name)

    def reduce(self, adder: Callable[[Any, Any], Any], subtractor: Callable[[Any, Any], Any], *,
               store: str | None = None, value_serde: SerdeSpec = "msgpack", name: str | None = None) -> Table:
        """``adder(agg, value)`` / ``subtractor(agg, value)``; the first value starts the aggregate."""
        check_callable(adder, "adder")
        check_callable(subtractor, "subtractor")
        return self.aggregate(lambda: None, lambda k, v, agg: v if agg is None else adder(agg, v),
                              lambda k, v, agg: subtractor(agg, v), store=store, value_serde=value_serde, name=name)


def source_table(b: TopologyGraph, stream: str, key_serde: SerdeSpec, value_serde: SerdeSpec,
                 store: str | None) -> Table:
    """``builder.table(stream)``: a source and the node that materializes it."""
    check_name(stream)
    source = b.add_source_node(stream, key_serde, value_serde, None)
    b.mark_table_source(stream)
    store_name = b.add_store(store if store is not None else f"{stream}-table", key_serde, value_serde)
    node = b.add_node("table-source", lambda n: TableSourceNode(n, store_name), [source])
    return Table(b, node, store_getter(store_name), store_name)


__all__ = ["Change", "GroupedTable", "Table"]
