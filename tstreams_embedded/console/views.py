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
from ..engine.protocol import schedules as S
from ..engine.protocol.backend import Backend, PartitionInfo
from ..engine.protocol.validate import check_partition
from ..engine.storage.core import Core
from ..ids import txn_millis
from ..tools import report
from ..tools.formats import RecordSerdes, decode_item, record_serdes
from ..tools.output import id_time
from ..tools.report import queue_summary, schedule_row
from .appmetrics import ask_members
from .groups import queue_groups
from .partitions import PARTITION_READ_CAP, describe_bounded

#: streams listed by ``/api/streams`` (the list says when more exist)
MAX_LISTED_STREAMS = 1000
#: transactions counted per partition for a consumer's lag: past it the count reads "at
#: least" (``lag_capped``), so a consumer page costs the same however far behind it is
LAG_COUNT_CAP = 10_000
#: pending schedules listed by ``/api/schedules`` (earliest due first; the list says when more exist)
MAX_LISTED_SCHEDULES = 1000
#: work queue groups of a stream described by ``/api/streams/NAME/queues`` (each counts its pending items)
MAX_DESCRIBED_GROUPS = 20


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


def stream(core: Core, name: str, read_cap: int = PARTITION_READ_CAP) -> dict[str, Any]:
    """A stream and its partitions: the rows of ``tstreams streams describe --json``, each
    partition read at most ``read_cap`` records deep (:mod:`.partitions`): past that its
    counts read "at least" (``counts_capped``; ``bytes_capped`` for its bytes)."""
    info = report.stream_info(core, name)
    now = core.now_ms()
    parts = describe_bounded(core.store, info, list(range(info.partitions)), now, read_cap)
    return {"name": info.name, "partitions": info.partitions, "ttl": info.ttl, "description": info.description,
            "now_ms": now, "read_cap": read_cap,
            "rows": [{**report.partition_row(info, p.info, now), "counts_capped": p.counts_capped,
                      "bytes_capped": p.bytes_capped} for p in parts]}


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


def consumer(core: Core, name: str, consumer_name: str, lag_cap: int = LAG_COUNT_CAP) -> dict[str, Any]:
    """A consumer's rows (``tstreams consumers describe --json``, the lag counted up to
    ``lag_cap`` transactions a partition: ``lag_capped`` then, and ``lag_transactions`` and
    ``lag_items`` read "at least"), each with ``waits_on``: the open transaction that holds
    it back (``id``, ``age_ms``, ``expires_in_ms``, ``items``, ``producer``: the name of the
    producer that opened it, ``null`` when not known) or ``null``. The partitions' heads and open
    transactions are read as the stream page reads them (bounded, :mod:`.partitions`)."""
    info = report.stream_info(core, name)
    offsets = report.stored_offsets(core, info, consumer_name)
    now = core.now_ms()
    parts = [p.info for p in describe_bounded(core.store, info, list(range(info.partitions)), now)]
    rows = report.consumer_rows(core, info, consumer_name, offsets, now, parts, lag_cap)
    unread = report.expired_unread(core, info, consumer_name)
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
                    "expires_in_ms": t.deadline - now_ms, "items": t.items, "producer": t.producer}
    return None


def apps(core: Core) -> dict[str, Any]:
    """The stream-processing applications in the engine's state: each one's group members
    (live or not, their tasks), tasks no live member holds, and its input lag per partition
    (a bounded :func:`~tstreams_embedded.engine.operator.appgroups.app_overview`, as the cluster's
    status page shows). Each live member with an interactive-query server is asked for its
    dropped records by reason (:func:`~.appmetrics.ask_members`: they are in its process,
    not in the engine)."""
    found = app_overview(core.store, core.now_ms())
    listed = [dataclasses.asdict(a) for a in found.apps]
    ask_members(listed)
    return {"applications": listed, "truncated": found.truncated}


def queue(backend: Backend, name: str, group: str) -> dict[str, Any]:
    """Work queue ``group`` of a stream: the row of ``tstreams queues describe --json`` and
    the pending items per partition."""
    status = backend.queue_status(name, group, full=True)
    return {**queue_summary(status, backend.now_ms()),
            "pending_by_partition": {str(p): n for p, n in sorted((status.pending or {}).items())}}


def queues(core: Core, name: str | None) -> dict[str, Any]:
    """The work queue groups (of stream ``name``, or of every listed stream), at most
    :data:`MAX_DESCRIBED_GROUPS` (by stream, then group name), each the row of ``tstreams
    queues describe --json``; ``truncated`` when more exist."""
    names = [name] if name is not None else [s.name for s in core.list_streams("", MAX_LISTED_STREAMS)]
    now = core.now_ms()
    rows: list[dict[str, Any]] = []
    truncated = False
    for stream_name in names:
        groups, more = queue_groups(core, stream_name, MAX_DESCRIBED_GROUPS - len(rows))
        rows.extend(queue_summary(core.queue_status(stream_name, g, full=True), now) for g in groups)
        if more:
            truncated = True
            break
    return {"stream": name, "groups": rows, "truncated": truncated}


def schedules(core: Core, name: str | None) -> dict[str, Any]:
    """The pending schedules (of stream ``name``, or all), earliest due first, at most
    :data:`MAX_LISTED_SCHEDULES` (``truncated`` when more exist; of one stream, at most as
    many are looked at): the rows of ``tstreams schedules list --json``."""
    if name is not None:
        report.stream_info(core, name)  # StreamNotFound for an unknown stream
    now = core.now_ms()
    found = core.store_range(S.NAMESPACE, S.DUE, S.BY_ID, limit=MAX_LISTED_SCHEDULES + 1)
    infos = [S.info_of(k, v) for k, v in found[:MAX_LISTED_SCHEDULES]]
    return {"now_ms": now, "schedules": [schedule_row(i, now) for i in infos if name is None or i.stream == name],
            "truncated": len(found) > MAX_LISTED_SCHEDULES}
