"""Stateless operators: source, filter, map, map_values, flat_map, select_key, peek, branch, sink."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ... import errors
from ..records import Record
from ..serdes import Serde
from .base import Node


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
        for rec in recs:  # (in place: see nodes.base, "In place")
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
        if self.with_key:  # (in place: see nodes.base, "In place")
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
        for rec in recs:  # (in place: see nodes.base, "In place")
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


def _iterable(value: Any, where: str, what: str) -> Iterable[Any]:
    if not isinstance(value, Iterable):
        raise errors.TopologyError(f"{where}: the function must return an iterable of {what}, got {value!r:.80}")
    return value


def _pair(value: Any, where: str) -> tuple[Any, Any]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise errors.TopologyError(f"{where}: the function must return a (key, value) pair, got {value!r:.80}")
    return value[0], value[1]
