"""The answers of the console API, computed from the engine's reads.

Every figure comes from the :class:`~tstreams_embedded.engine.protocol.backend.Backend` reads and the
rows of :mod:`tstreams_embedded.tools.report` (what ``tstreams streams describe --json`` and
``tstreams consumers describe --json`` print), so the console and the CLI agree by
construction. Items are decoded by :func:`tstreams_embedded.tools.formats.decode_item`
(``tstreams consume --format``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import errors
from ..engine.operator.appgroups import app_overview
from ..engine.protocol.backend import Backend, PartitionInfo
from ..engine.protocol.validate import check_partition
from ..engine.storage.core import Core
from ..ids import txn_millis
from ..tools import report
from ..tools.formats import RecordSerdes, decode_item, record_serdes
from ..tools.output import id_time
from ..tools.queues import queue_summary

#: streams listed by ``/api/streams`` (the list says when more exist)
MAX_LISTED_STREAMS = 1000
#: transactions counted per partition for a consumer's lag: past it the count reads "at
#: least" (``lag_capped``), so a consumer page costs the same however far behind it is
LAG_COUNT_CAP = 10_000


def node(core: Core) -> dict[str, Any]:
    """The node: its directory, durability, stream count, map and disk use, commit counters."""
    stats = core.stats()
    usage = core.store.usage()
    return {
        "path": stats["path"],
        "durability": stats["durability"],
        "now_ms": core.now_ms(),
        "streams": stats["streams"],
        "transactions": stats["transactions"],
        "commits": stats["commits"],
        "fsyncs": stats["fsyncs"],
        "map_used_bytes": usage.used_bytes,
        "map_size_bytes": usage.map_bytes,
        "map_limit_bytes": usage.max_map_bytes,
        "disk_bytes": usage.disk_bytes,
    }


def streams(backend: Backend) -> dict[str, Any]:
    """The streams (first :data:`MAX_LISTED_STREAMS` by name) with their consumer counts."""
    listed = backend.list_streams("", MAX_LISTED_STREAMS + 1)
    counts: dict[str, int] = {}
    for c in backend.list_consumers(None):
        counts[c.stream] = counts.get(c.stream, 0) + 1
    return {
        "streams": [{"name": s.name, "partitions": s.partitions, "ttl": s.ttl, "description": s.description,
                     "created": s.created or None, "created_time": id_time(s.created),
                     "consumers": counts.get(s.name, 0)} for s in listed[:MAX_LISTED_STREAMS]],
        "truncated": len(listed) > MAX_LISTED_STREAMS,
    }


def stream(backend: Backend, name: str) -> dict[str, Any]:
    """A stream and its partitions: the rows of ``tstreams streams describe --json``."""
    info = report.stream_info(backend, name)
    now = backend.now_ms()
    parts = report.describe_partitions(backend, info, list(range(info.partitions)))
    return {"name": info.name, "partitions": info.partitions, "ttl": info.ttl, "description": info.description,
            "now_ms": now, "rows": [report.partition_row(info, p, now) for p in parts]}


def messages(backend: Backend, name: str, partition: int, after: int, limit: int, fmt: str, key_serde: str,
             value_serde: str) -> dict[str, Any]:
    """One page of a partition's checkpointed transactions after ID ``after`` (0: from the
    oldest), at most ``limit``, items decoded as ``fmt``. ``next_after`` continues the page;
    ``more`` is false when the page is not full (the end of what is readable now)."""
    info = report.stream_info(backend, name)
    check_partition(info, partition)
    serdes: RecordSerdes | None = record_serdes(key_serde, value_serde) if fmt == "record" else None
    fetched = backend.fetch(info.name, partition, after, limit)
    txns = fetched.txns[:limit]
    position = txns[-1].id if len(fetched.txns) > limit else fetched.position
    return {
        "stream": info.name, "partition": partition, "after": after, "format": fmt,
        "transactions": [{"id": t.id, "time": id_time(t.id), "items": [_decoded(i, fmt, serdes, txn_millis(t.id))
                                                                      for i in t.items]} for t in txns],
        "next_after": max(position, after),
        "more": len(txns) == limit,
        "blocked_by_open": fetched.blocked,
    }


def _decoded(item: bytes, fmt: str, serdes: RecordSerdes | None, timestamp: int) -> dict[str, Any]:
    """``{"value": ...}``, or ``{"error": ...}`` for an item that is not of ``fmt`` (the
    rest of the page is still shown)."""
    try:
        return {"value": decode_item(item, fmt, serdes, timestamp), "bytes": len(item)}
    except errors.InvalidArgument as exc:
        return {"error": str(exc), "bytes": len(item)}


def consumers(backend: Backend, name: str | None) -> dict[str, Any]:
    """The consumers with stored offsets (of one stream or all): ``tstreams consumers list``."""
    if name is not None:
        report.stream_info(backend, name)  # StreamNotFound for an unknown stream
    return {"consumers": [{"stream": c.stream, "consumer": c.name, "partitions": len(c.offsets),
                           "oldest_offset_time": id_time(min(c.offsets.values())),
                           "expired_unread": sum(c.expired_unread.values())}
                          for c in backend.list_consumers(name)]}


def consumer(backend: Backend, name: str, consumer_name: str, lag_cap: int = LAG_COUNT_CAP) -> dict[str, Any]:
    """A consumer's rows (``tstreams consumers describe --json``, the lag counted up to
    ``lag_cap`` transactions a partition: ``lag_capped`` then, and ``lag_transactions`` and
    ``lag_items`` read "at least"), each with ``waits_on``: the open transaction that holds
    it back (``id``, ``age_ms``, ``expires_in_ms``, ``items``) or ``null``. Which producer
    opened it is not known: the engine does not record it."""
    info = report.stream_info(backend, name)
    offsets = report.stored_offsets(backend, info, consumer_name)
    now = backend.now_ms()
    parts = report.describe_partitions(backend, info, list(range(info.partitions)))
    rows = report.consumer_rows(backend, info, consumer_name, offsets, now, parts, lag_cap)
    unread = report.expired_unread(backend, info, consumer_name)
    described = {p.partition: p for p in parts}
    for row in rows:
        row["lag_capped"] = row["lag_transactions"] >= lag_cap
        row["expired_unread"] = unread.get(row["partition"], 0)
        row["waits_on"] = (_blocker(described[row["partition"]], row["offset"] or 0, now)
                           if row["blocked_by_open"] else None)
    return {"stream": info.name, "consumer": consumer_name, "now_ms": now, "rows": rows,
            "lag_transactions": sum(r["lag_transactions"] for r in rows),
            "lag_items": sum(r["lag_items"] for r in rows),
            "lag_capped": any(r["lag_capped"] for r in rows), "lag_cap": lag_cap}


def _blocker(p: PartitionInfo, offset: int, now_ms: int) -> dict[str, Any] | None:
    """The oldest open transaction after ``offset``: the one a consumer cannot read past."""
    for t in p.open:
        if t.id > offset:
            return {"id": t.id, "opened": id_time(t.id), "age_ms": now_ms - txn_millis(t.id),
                    "expires_in_ms": t.deadline - now_ms, "items": t.items}
    return None


def apps(core: Core) -> dict[str, Any]:
    """The stream-processing applications in the engine's state: each one's group members
    (live or not, their tasks), tasks no live member holds, and its input lag per partition
    (a bounded :func:`~tstreams_embedded.engine.operator.appgroups.app_overview`, as the cluster's
    status page shows)."""
    found = app_overview(core.store, core.now_ms())
    return {"applications": [dataclasses.asdict(a) for a in found.apps], "truncated": found.truncated}


def queue(backend: Backend, name: str, group: str) -> dict[str, Any]:
    """Work queue ``group`` of a stream: the row of ``tstreams queues describe --json`` and
    the pending items per partition."""
    status = backend.queue_status(name, group, full=True)
    return {**queue_summary(status, backend.now_ms()),
            "pending_by_partition": {str(p): n for p, n in sorted((status.pending or {}).items())}}
