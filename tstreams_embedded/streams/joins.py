"""Joins of a stream with a table, a global table or another stream (windowed).

* **stream–table** (``join``, ``left_join``): each stream record is joined with the table's
  current value of its key in the same task (table updates trigger nothing).
* **stream–global-table**: the same, with ``key_selector(key, value)`` giving the table key;
  the global table holds every partition, so no co-partitioning is needed.
* **stream–stream** with :class:`JoinWindows`: records ``l`` (this side) and ``r`` (other)
  of the same key join when ``l.ts - before_ms <= r.ts <= l.ts + after_ms``; the result has
  the larger timestamp. *Stream time* ``T`` is the largest timestamp either side has seen
  in the task. A record of this side is late (dropped, counted in ``late_dropped``) when
  ``ts + after_ms + grace_ms < T``, of the other side when ``ts + before_ms + grace_ms < T``
  (as in Kafka Streams). A record is *closed* when no accepted record can match it any more:
  ``ts + before_ms + after_ms + grace_ms < T``; closed records are deleted, and ``left_join``
  (this side) / ``outer_join`` (both sides) emit the closed ones that never matched, padded
  with None, with their own timestamp; the others are dropped (counted in ``join_no_match``,
  as are the stream records an inner stream–table join finds no row for).

Both sides of a join must be co-partitioned (same key on the same task): checked when the
topology is built (an upstream key change raises :class:`~..errors.TopologyError` with a hint
to ``repartition()``) and when the App starts (equal partition counts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from .. import errors
from .global_table import GlobalTable
from .nodes import Getter
from .nodes.joins import BufferSerde, JoinKind, StreamJoinNode, StreamTableJoinNode, TagNode
from .serdes import SerdeSpec, describe, serde
from .topology import TopologyGraph, internal_name
from .windows import JoinWindows


@runtime_checkable
class JoinedStream(Protocol):
    """A stream on either side of a join (:class:`~.kstream.KStream` is one)."""

    @property
    def builder(self) -> TopologyGraph: ...

    @property
    def name(self) -> str: ...

    @property
    def key_changed(self) -> bool: ...


@runtime_checkable
class JoinedTable(Protocol):
    """A table a stream joins by key, in the task of the key (:class:`~.table.Table` is one)."""

    @property
    def builder(self) -> TopologyGraph: ...

    @property
    def getter(self) -> Getter: ...

    def sources(self) -> frozenset[str]: ...


def check_copartitioned(b: TopologyGraph, left: frozenset[str], right: frozenset[str], what: str) -> None:
    """Both sides of a join must put each key on the same task: their sources must serialize
    keys alike (a record's partition is chosen by its key's *bytes*), checked here; their
    partition counts must be equal, checked when the App starts (:func:`check_partition_counts`)."""
    serdes = {stream: describe(b.source_key_serde(stream)) for stream in sorted(left | right)}
    if len(set(serdes.values())) > 1:
        shown = ", ".join(f"{internal_name('<application_id>', s)!r}: {d}" for s, d in serdes.items())
        raise errors.TopologyError(
            f"{what}: the joined streams are not co-partitioned: they serialize keys differently ({shown}), and a "
            "record's partition is chosen by its key's bytes, so equal keys would be on different tasks; read both "
            "sides with the same key_serde, or repartition(key_serde=...) one side to match the other")
    b.require_copartitioned(left | right)


def check_partition_counts(groups: list[frozenset[str]], resolve: Callable[[str], str], info: dict[str, Any]) -> None:
    """At start: the streams of each joined group have equal partition counts."""
    for group in groups:
        counts = {}
        for stream in group:
            name = resolve(stream)
            if name in info:
                counts[name] = info[name].partitions
        if len(set(counts.values())) > 1:
            raise errors.TopologyError(
                f"joined streams must be co-partitioned (equal partition counts), got {counts}; "
                "repartition() one side (repartition(partitions=N)) to match the other")


def _check_key(stream: JoinedStream, what: str) -> None:
    if stream.key_changed:
        raise errors.TopologyError(
            f"{what}: an operation upstream of {stream.name!r} may have changed the keys, so its records are not "
            "on the task of their key; call .repartition() on the stream before the join")


def join(this: JoinedStream, other: Any, joiner: Callable[[Any, Any], Any], windows: Any,
         key_selector: Callable[[Any, Any], Any] | None, kind: JoinKind, name: str | None,
         serdes: dict[str, SerdeSpec]) -> tuple[str, bool]:
    """``stream.join`` / ``left_join`` / ``outer_join`` (see the module docstring): the join's
    node, and whether its keys may be on the wrong task (as ``this``'s after a global join)."""
    if not callable(joiner):
        raise errors.InvalidArgument(f"joiner must be callable, got {joiner!r:.60}")
    b = this.builder
    unknown = set(serdes) - {"key_serde", "value_serde", "other_value_serde"}
    if unknown:
        raise errors.InvalidArgument(f"unknown join arguments {sorted(unknown)}")
    if isinstance(other, GlobalTable):
        if key_selector is None or not callable(key_selector):
            raise errors.TopologyError("a join with a global table needs key_selector=(key, value) -> table key")
        if kind == "outer" or windows is not None:
            raise errors.TopologyError("a global table joins a stream with join or left_join, without windows")
        getter = other.getter
        node = b.add_node("global-join", lambda n: StreamTableJoinNode(n, getter, joiner, kind == "left",
                                                                       key_selector), [this.name], name)
        return node, this.key_changed
    if key_selector is not None:
        raise errors.TopologyError("key_selector is for joins with a global table")
    if isinstance(other, JoinedTable):
        if other.builder is not b:
            raise errors.TopologyError("the table belongs to another StreamsBuilder")
        if kind == "outer" or windows is not None:
            raise errors.TopologyError("a stream joins a table with join or left_join, without windows")
        _check_key(this, "stream–table join")
        check_copartitioned(b, b.source_streams(this.name), other.sources(), "stream–table join")
        table_getter = other.getter
        node = b.add_node("table-join", lambda n: StreamTableJoinNode(n, table_getter, joiner, kind == "left",
                                                                      None), [this.name], name)
        return node, False
    if isinstance(other, JoinedStream):
        if other.builder is not b:
            raise errors.TopologyError("the stream belongs to another StreamsBuilder")
        if not isinstance(windows, JoinWindows):
            raise errors.TopologyError("a stream–stream join needs windows=JoinWindows(before_ms, after_ms, grace_ms)")
        _check_key(this, "stream–stream join")
        _check_key(other, "stream–stream join")
        check_copartitioned(b, b.source_streams(this.name), b.source_streams(other.name), "stream–stream join")
        ks = serdes.get("key_serde", "msgpack")
        this_buf = BufferSerde(serde(serdes.get("value_serde", "msgpack"), "value_serde"))
        other_buf = BufferSerde(serde(serdes.get("other_value_serde", "msgpack"), "other_value_serde"))
        stores = (b.add_store(None, ks, this_buf, kind="join-this-store"),
                  b.add_store(None, ks, other_buf, kind="join-other-store"),
                  b.add_store(None, "bytes", "msgpack", kind="join-index-store"))
        left = b.add_node("join-this", lambda n: TagNode(n, 0), [this.name])
        right = b.add_node("join-other", lambda n: TagNode(n, 1), [other.name])
        node = b.add_node("stream-join", lambda n: StreamJoinNode(n, windows, joiner, kind, stores), [left, right],
                          name)
        return node, False
    raise errors.TopologyError(f"a stream joins a Table, a GlobalTable or a KStream, got {type(other).__name__}")


__all__ = ["JoinWindows"]
