"""Table operators: a table's source (latest value per key), filter, map_values, to_stream,
the table–table join, and the re-grouping and aggregation of ``Table.group_by``. They
forward :class:`Change` records (a row's new and old value)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ... import errors
from ..records import Record
from .base import Getter, Node, TaskContext


@dataclass(slots=True, frozen=True)
class Change:
    """An update of a table row: its ``new`` and ``old`` value (None: absent)."""

    new: Any
    old: Any


def store_getter(store: str) -> Getter:
    def make(ctx: TaskContext) -> Callable[[Any], Any]:
        return ctx.store(store).get
    return make


class TableSourceNode(Node):
    """Keeps the latest value per key in its store; a None value deletes the key."""

    def __init__(self, name: str, store: str) -> None:
        super().__init__(name)
        self.store_name = store

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        self.store = ctx.store(self.store_name)

    def process(self, rec: Record) -> None:
        if rec.key is None:
            self.ctx.count("skipped_null_key")
            return
        kb = self.store.key_serde.serialize(rec.key)
        old = self.store.get_raw(kb)
        if old is None and rec.value is None:
            return
        self.store.put_raw(kb, rec.value)
        self.forward(Record(rec.key, Change(rec.value, old), rec.timestamp, rec.headers))


class TableFilterNode(Node):
    def __init__(self, name: str, predicate: Callable[[Any, Any], Any], keep: bool) -> None:
        super().__init__(name)
        self.predicate = predicate
        self.keep = keep

    def _keep(self, key: Any, value: Any) -> Any:
        return None if value is None or bool(self.predicate(key, value)) is not self.keep else value

    def process(self, rec: Record) -> None:
        ch: Change = rec.value
        new, old = self._keep(rec.key, ch.new), self._keep(rec.key, ch.old)
        if new is not None or old is not None:
            self.forward(Record(rec.key, Change(new, old), rec.timestamp, rec.headers))


class TableMapValuesNode(Node):
    def __init__(self, name: str, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(name)
        self.fn = fn

    def process(self, rec: Record) -> None:
        ch: Change = rec.value
        new = None if ch.new is None else self.fn(rec.key, ch.new)
        old = None if ch.old is None else self.fn(rec.key, ch.old)
        self.forward(Record(rec.key, Change(new, old), rec.timestamp, rec.headers))


class ToStreamNode(Node):
    """Changes -> records of the new value (None: a tombstone)."""

    def process(self, rec: Record) -> None:
        self.forward(Record(rec.key, rec.value.new, rec.timestamp, rec.headers))


def join_values(kind: str, joiner: Callable[[Any, Any], Any], left: Any, right: Any) -> Any:
    """The joined value of a table–table join (None: no row)."""
    if left is None and right is None:
        return None
    if kind == "inner" and (left is None or right is None):
        return None
    if kind == "left" and left is None:
        return None
    return joiner(left, right)


class TableJoinNode(Node):
    """Table–table join: an update of either side is joined with the other side's current
    value; forwards the change of the joined row."""

    def __init__(self, name: str, getters: tuple[Getter, Getter], joiner: Callable[[Any, Any], Any],
                 kind: str) -> None:
        super().__init__(name)
        self.getters = getters
        self.joiner = joiner
        self.kind = kind

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        self.lookups = (self.getters[0](ctx), self.getters[1](ctx))

    def process(self, rec: Record) -> None:
        side, ch = rec.value
        other = self.lookups[1 - side](rec.key)
        if side == 0:
            new = join_values(self.kind, self.joiner, ch.new, other)
            old = join_values(self.kind, self.joiner, ch.old, other)
        else:
            new = join_values(self.kind, self.joiner, other, ch.new)
            old = join_values(self.kind, self.joiner, other, ch.old)
        if new is not None or old is not None:
            self.forward(Record(rec.key, Change(new, old), rec.timestamp, rec.headers))
        else:  # no joined row before or after: the update is dropped
            self.ctx.count("join_no_match")


class GroupMapNode(Node):
    """``table.group_by(selector)``: the old row is sent as a subtraction, the new one as an
    addition (value ``(is_addition, value)``), both under the key ``selector`` gives."""

    def __init__(self, name: str, selector: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        super().__init__(name)
        self.selector = selector

    def _send(self, rec: Record, value: Any, add: bool) -> None:
        pair = self.selector(rec.key, value)
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise errors.TopologyError(f"{self.name}: the selector must return a (key, value) pair, got {pair!r:.80}")
        if pair[0] is None:
            self.ctx.count("skipped_null_key")
            return
        self.forward(Record(pair[0], (add, pair[1]), rec.timestamp, rec.headers))

    def process(self, rec: Record) -> None:
        ch: Change = rec.value
        if ch.old is not None:
            self._send(rec, ch.old, False)
        if ch.new is not None:
            self._send(rec, ch.new, True)


class TableAggregateNode(Node):
    """``adder(key, value, agg)`` for additions, ``subtractor(key, value, agg)`` for
    subtractions, from ``initializer()``; forwards the aggregate's change."""

    def __init__(self, name: str, store: str, initializer: Callable[[], Any],
                 adder: Callable[[Any, Any, Any], Any], subtractor: Callable[[Any, Any, Any], Any]) -> None:
        super().__init__(name)
        self.store_name = store
        self.initializer = initializer
        self.adder = adder
        self.subtractor = subtractor

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        self.store = ctx.store(self.store_name)

    def process(self, rec: Record) -> None:
        add, value = rec.value
        kb = self.store.key_serde.serialize(rec.key)
        old = self.store.get_raw(kb)
        current = self.initializer() if old is None else old
        new = (self.adder if add else self.subtractor)(rec.key, value, current)
        self.store.put_raw(kb, new)
        self.forward(Record(rec.key, Change(new, old), rec.timestamp, rec.headers))
