"""Runtime processor nodes (the operators), one instance per task, wired parent -> children;
the DSL (:mod:`..kstream`, :mod:`..table`, :mod:`..joins`, :mod:`..dedup`) builds them.
The base class and what a node may use of its task: :mod:`.base`; the operators by family:
:mod:`.stateless`, :mod:`.aggregate`, :mod:`.table`, :mod:`.joins`, :mod:`.dedup`,
:mod:`.windowed`."""

from .aggregate import AggregateNode, Aggregation
from .base import Getter, Node, TaskContext
from .stateless import (
    BranchNode,
    FilterNode,
    FlatMapNode,
    MapNode,
    MapValuesNode,
    PeekNode,
    SelectKeyNode,
    SinkNode,
    SourceNode,
)
from .windowed import SuppressNode, WindowAggregateNode

__all__ = ["AggregateNode", "Aggregation", "BranchNode", "FilterNode", "FlatMapNode", "Getter", "MapNode",
           "MapValuesNode", "Node", "PeekNode", "SelectKeyNode", "SinkNode", "SourceNode", "SuppressNode",
           "TaskContext", "WindowAggregateNode"]
