"""The grouped stream aggregation operator (count, reduce, aggregate of a ``KGroupedStream``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..records import Record
from .base import Node, TaskContext


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
