"""``stream.dedup(key=…, ttl_ms=…)``: the DSL call's topology nodes. The operator and its
semantics (TTL in event time, exact across crashes, ``dedup_expired``) are
:mod:`.nodes.dedup`'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import errors
from .nodes.dedup import DedupNode
from .serdes import SerdeSpec
from .topology import TopologyGraph


def add_dedup(b: TopologyGraph, parent: str, key_changed: bool, key: Callable[[Any, Any], Any], ttl_ms: int,
              key_serde: SerdeSpec, store: str | None, name: str | None) -> str:
    """``stream.dedup`` of the stream from node ``parent``: its stores and node; the node's name."""
    if not callable(key):
        raise errors.InvalidArgument(f"key must be a function (key, value) -> dedup key, got {key!r:.60}")
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 1:
        raise errors.InvalidArgument(f"ttl_ms must be a positive integer, got {ttl_ms!r}")
    if key_changed:
        raise errors.TopologyError(
            f"dedup: an operation upstream of {parent!r} may have changed the keys, so records with the same "
            "dedup key may be on different tasks; call .repartition() before dedup")
    seen = b.add_store(store, key_serde, "msgpack", kind="dedup-store")
    index = b.add_store(seen + ".index", "bytes", "msgpack")
    inputs = frozenset(s for s in b.source_streams(parent) if not b.writes(s))
    return b.add_node("dedup", lambda n: DedupNode(n, key, ttl_ms, seen, index, inputs), [parent], name)
