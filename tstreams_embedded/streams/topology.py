"""A topology and the graph it is built from.

:class:`TopologyGraph` records *specifications* (nodes, stores, sources, sinks, internal
streams); :meth:`TopologyGraph.build` freezes them into a :class:`Topology`, whose
:meth:`Topology.instantiate` makes the runtime nodes (:mod:`.nodes`) of one task. The DSL
(:mod:`.kstream`, :mod:`.table`, :mod:`.joins`, :mod:`.dedup`, :mod:`.global_table`) adds to
the graph through its public methods; :class:`~.builder.StreamsBuilder` is a graph with the
DSL's entry points.

Keys that a ``group_by`` (or an operation that may change keys, followed by
``group_by_key``) needs on the right task go through an internal *repartition stream*
``<application_id>-<n>-repartition``: written by the task that read the record, in the same
commit as everything else, and read back by the task of the key's partition.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..engine.protocol.validate import check_name
from . import nodes as N
from .serdes import SerdeSpec, serde

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
    #: a windowed store of the Processor API (``add_window_store``): its windows' size and
    #: how long they are kept (None: the DSL's, of any size, expired by their aggregation)
    size_ms: int | None = None
    retention_ms: int | None = None


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
    #: sources read as tables (``b.table``): on equal timestamps a task reads them before streams
    table_sources: frozenset[str] = frozenset()

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


def check_callable(fn: Any, what: str) -> None:
    """A function argument of the DSL must be callable (checked when the topology is built)."""
    if not callable(fn):
        raise errors.InvalidArgument(f"{what} must be callable, got {fn!r:.60}")


class TopologyGraph:
    """The specifications of a topology being built: nodes (by name, with their parents),
    stores, source and sink streams, internal streams, co-partitioned groups, global tables."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeSpec] = {}
        self._stores: dict[str, StoreSpec] = {}
        self._sources: dict[str, str] = {}
        self._sinks: dict[str, tuple[Any, Any]] = {}
        self._internal: dict[str, int | None] = {}
        self._copartition: list[frozenset[str]] = []
        self._global_tables: dict[str, Any] = {}
        self._source_keys: dict[str, Any] = {}
        self._table_sources: set[str] = set()
        self._counter = itertools.count()

    # -- naming -----------------------------------------------------------------------------
    def _name(self, kind: str, given: str | None = None) -> str:
        if given is not None:
            check_name(given, "node name")
            if given in self._nodes:
                raise errors.TopologyError(f"a node named {given!r} already exists")
            return given
        return f"{kind}-{next(self._counter):04d}"

    # -- nodes, stores, streams --------------------------------------------------------------
    def add_node(self, kind: str, make: Callable[[str], N.Node], parents: list[str], name: str | None = None,
                 branch: int | None = None) -> str:
        """Add a runtime node made by ``make(node name)`` with ``parents`` (``branch``: its
        index among the branches of its parent, a BranchNode); its name."""
        node_name = self._name(kind, name)

        def build(resolve: Callable[[str], str]) -> N.Node:
            return make(node_name)

        self._nodes[node_name] = NodeSpec(node_name, build, parents, branch)
        return node_name

    def add_store(self, name: str | None, key_serde: SerdeSpec, value_serde: SerdeSpec, kind: str = "store",
                  windowed: bool = False, size_ms: int | None = None, retention_ms: int | None = None) -> str:
        """Declare a store (a name is made from ``kind`` when ``name`` is None); its name."""
        if name is None:
            name = f"{kind}-{next(self._counter):04d}"
        check_name(name, "store name")
        if "/" in name:
            raise errors.InvalidArgument(f"store name must not contain '/', got {name!r}")
        if name in self._stores:
            raise errors.TopologyError(f"a store named {name!r} already exists")
        self._stores[name] = StoreSpec(name, serde(key_serde, "key_serde"), serde(value_serde, "value_serde"),
                                       windowed, size_ms, retention_ms)
        return name

    def has_store(self, name: str) -> bool:
        return name in self._stores

    def add_source_node(self, stream: str, key_serde: SerdeSpec, value_serde: SerdeSpec,
                        timestamp: Callable[[Any, Any], int] | None) -> str:
        """The source node reading ``stream`` (its name is not checked here: internal
        streams have the :data:`INTERNAL` prefix); the node's name."""
        if stream in self._sources:
            raise errors.TopologyError(f"stream {stream!r} is already a source of this topology")
        ks, vs = serde(key_serde, "key_serde"), serde(value_serde, "value_serde")
        node = self.add_node("source", lambda n: N.SourceNode(n, stream, ks, vs, timestamp), [])
        self._sources[stream] = node
        self._source_keys[stream] = ks
        return node

    def source_key_serde(self, stream: str) -> Any:
        """The key serde source ``stream`` is read with (its keys' bytes chose their partitions)."""
        return self._source_keys[stream]

    def mark_table_source(self, stream: str) -> None:
        """Source ``stream`` is read as a table (see :attr:`Topology.table_sources`)."""
        self._table_sources.add(stream)

    def add_sink(self, stream: str, key_serde: SerdeSpec, value_serde: SerdeSpec) -> tuple[Any, Any]:
        """Record that the topology writes ``stream``; the serdes (the first writer's win)."""
        ks, vs = serde(key_serde, "key_serde"), serde(value_serde, "value_serde")
        self._sinks.setdefault(stream, (ks, vs))
        return ks, vs

    def writes(self, stream: str) -> bool:
        """Whether the topology writes ``stream`` (a sink, ``through`` or repartition stream):
        its records are on their key's partition."""
        return stream in self._sinks

    def add_internal_stream(self, name: str | None, partitions: int | None) -> str:
        """Declare the internal stream ``<application_id>-<name or a number>-repartition``
        with ``partitions`` (None: the task count); its topology name."""
        if name is not None:
            check_name(name, "repartition name")
        internal = f"{INTERNAL}{name or format(next(self._counter), '04d')}-repartition"
        if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, int)
                                       or partitions < 1):
            raise errors.InvalidArgument(f"partitions must be a positive integer, got {partitions!r}")
        self._internal[internal] = partitions
        return internal

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

    def build(self) -> Topology:
        """The topology (stores used by processors were checked when they were added)."""
        if not self._sources:
            raise errors.TopologyError("a topology needs at least one source stream (builder.stream(...))")
        return Topology(dict(self._nodes), dict(self._stores), dict(self._sources), dict(self._sinks),
                        dict(self._internal), list(self._copartition), dict(self._global_tables),
                        frozenset(self._table_sources))
