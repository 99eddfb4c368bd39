"""What ``tstreams streams describe`` and ``tstreams consumers …`` compute, as rows.

Everything is read through the :class:`~tstreams_embedded.engine.protocol.backend.Backend`
protocol: :meth:`~.Backend.describe_partitions` for heads, counts, open transactions and
sizes; :meth:`~.Backend.list_consumers` and :meth:`~.Backend.get_offsets` for consumers;
:meth:`~.Backend.scan_index` (IDs and item counts, no item data) for lags. Resets and
deletions are one operation record each (:class:`~.ops.ResetOffsets`,
:class:`~.ops.DeleteConsumer`): atomic, all partitions or none.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import errors
from ..engine.protocol import ops as O
from ..engine.protocol.backend import MAX_DESCRIBED_PARTITIONS, Backend, PartitionInfo, QueueStatus, StreamInfo
from ..engine.protocol.schedules import ScheduleInfo
from ..engine.protocol.validate import check_name, check_partition
from ..ids import txn_millis
from .output import duration, id_time, ms_time
from .positions import Position, skips_ahead, stable_offset


def stream_info(backend: Backend, stream: str) -> StreamInfo:
    return backend.get_stream(check_name(stream))


def checked_partitions(info: StreamInfo, partitions: Iterable[int]) -> list[int]:
    """``partitions`` (all of the stream's when empty), each checked to exist."""
    chosen = sorted(set(partitions))
    for p in chosen:
        check_partition(info, p)
    return chosen or list(range(info.partitions))


def describe_partitions(backend: Backend, info: StreamInfo, partitions: list[int]) -> list[PartitionInfo]:
    """The partitions' :class:`PartitionInfo`, asked in runs of consecutive partitions."""
    out: list[PartitionInfo] = []
    i = 0
    while i < len(partitions):
        first = partitions[i]
        j = i
        while (j + 1 < len(partitions) and partitions[j + 1] == partitions[j] + 1
               and j + 1 - i < MAX_DESCRIBED_PARTITIONS):
            j += 1
        out.extend(backend.describe_partitions(info.name, first, j - i + 1))
        i = j + 1
    return out


def partition_row(info: StreamInfo, p: PartitionInfo, now_ms: int) -> dict[str, Any]:
    """One partition of ``tstreams streams describe``."""
    return {
        "stream": info.name,
        "partition": p.partition,
        "head": p.head or None,
        "head_time": id_time(p.head),
        "first": p.first or None,
        "last_id": p.last_id or None,
        "transactions": p.checkpointed,
        "items": p.items,
        "expired": p.expired,
        "open": [{"id": t.id, "age_ms": now_ms - txn_millis(t.id), "deadline_ms": t.deadline - now_ms,
                  "items": t.items, "producer": t.producer} for t in p.open],
        "open_count": p.open_count,
        "bytes": p.bytes,
        "ttl": info.ttl,
    }


# --------------------------------------------------------------------------- consumers
def stored_offsets(backend: Backend, info: StreamInfo, consumer: str) -> dict[int, int]:
    """A consumer's stored offsets; ConsumerNotFound if it has none."""
    offsets = backend.get_offsets(info.name, check_name(consumer, "consumer name"))
    if not offsets:
        raise errors.ConsumerNotFound(f"consumer {consumer!r} has no stored offsets on stream {info.name!r}")
    return offsets


def expired_unread(backend: Backend, info: StreamInfo, consumer: str) -> dict[int, int]:
    """Partition -> items the stream's TTL deleted before ``consumer`` read them."""
    for c in backend.list_consumers(info.name):
        if c.name == consumer:
            return c.expired_unread
    return {}


@dataclass(frozen=True)
class Lag:
    """What is checkpointed after an offset: transactions, items, the first of them, and
    whether the scan stopped at an open transaction."""

    transactions: int
    items: int
    first_unread: int
    blocked: bool


#: transactions one :meth:`~.Backend.scan_index` call returns at most
SCAN_PAGE = 4096


def lag_after(backend: Backend, stream: str, partition: int, offset: int, cap: int | None = None) -> Lag:
    """Count the visible checkpointed transactions after ``offset`` (index only), all of
    them, or with ``cap`` the first ``cap`` at most (their items with them): a count that
    reaches ``cap`` reads "at least"."""
    txns = items = first = 0
    position = offset
    while True:
        page = SCAN_PAGE if cap is None else max(1, min(SCAN_PAGE, cap - txns))
        scan = backend.scan_index(stream, partition, position, max_txns=page)
        if scan.entries and not first:
            first = scan.entries[0][0]
        txns += len(scan.entries)
        items += sum(n for _, n in scan.entries)
        if not scan.truncated or scan.position <= position or (cap is not None and txns >= cap):
            return Lag(txns, items, first, scan.blocked)
        position = scan.position


def consumer_rows(backend: Backend, info: StreamInfo, consumer: str, offsets: dict[int, int],
                  now_ms: int, described_partitions: list[PartitionInfo] | None = None,
                  lag_cap: int | None = None) -> list[dict[str, Any]]:
    """One row per partition of ``tstreams consumers describe``: offset, head, lag (counted
    up to ``lag_cap`` transactions, :func:`lag_after`). ``described_partitions``: all the
    stream's partitions, if the caller has described them already."""
    described = {p.partition: p for p in (described_partitions if described_partitions is not None
                                          else describe_partitions(backend, info, list(range(info.partitions))))}
    heads = {n: p.head for n, p in described.items()}
    rows = []
    for partition in range(info.partitions):
        offset = offsets.get(partition)
        stable = stable_offset(described[partition])
        lag = lag_after(backend, info.name, partition, offset or 0, lag_cap)
        rows.append({
            "stream": info.name,
            "consumer": consumer,
            "partition": partition,
            "offset": offset,
            "offset_time": id_time(offset or 0),
            "head": heads[partition] or None,
            "head_time": id_time(heads[partition]),
            "lag_transactions": lag.transactions,
            "lag_items": lag.items,
            "lag_ms": now_ms - txn_millis(lag.first_unread) if lag.first_unread else 0,
            "blocked_by_open": lag.blocked,
            "stable": stable,
            # past the stable offset: the consumer skips an open transaction or data not written yet
            "ahead_of_head": offset is not None and skips_ahead(offset, described[partition], now_ms),
        })
    return rows


@dataclass(frozen=True)
class Planned:
    """A partition's new offset: ``offset``; ``wanted`` is what ``--to`` asked for, lowered
    to ``stable`` when above it (``clamped`` when it pointed into the future or past an open
    transaction); ``next_id`` the first checkpointed transaction read next (0 if none yet)."""

    offset: int
    wanted: int
    stable: int
    next_id: int
    clamped: bool


def reset_plan(backend: Backend, info: StreamInfo, consumer: str, to: Position,
               partitions: list[int]) -> tuple[dict[int, int], dict[int, Planned]]:
    """``(stored offsets, plan per partition)`` for a reset of ``partitions`` to ``to``:
    every new offset at most the partition's stable offset (see :mod:`.positions`)."""
    stored = stored_offsets(backend, info, consumer)
    described = {p.partition: p for p in describe_partitions(backend, info, partitions)}
    now_ms = backend.now_ms()
    plan = {}
    for p in partitions:
        stable = stable_offset(described[p])
        wanted = to.wanted(backend, info.name, p, stable)
        offset = min(wanted, stable)
        scan = backend.scan_index(info.name, p, offset, max_txns=1)
        plan[p] = Planned(offset, wanted, stable, scan.entries[0][0] if scan.entries else 0,
                          skips_ahead(wanted, described[p], now_ms))
    return stored, plan


def apply_reset(backend: Backend, info: StreamInfo, consumer: str, stored: dict[int, int],
                new: dict[int, int]) -> None:
    """One atomic write, refused (OffsetsConflict) if the offsets moved since ``stored``."""
    backend.submit([O.ResetOffsets(info.name, consumer, stored, new, info.id)], durable=True)


def delete_consumer(backend: Backend, info: StreamInfo, consumer: str) -> int:
    """Delete a consumer's offsets; ConsumerNotFound if it had none (checked first, so that
    deleting an unknown consumer writes nothing, not even a commit-log entry)."""
    stored_offsets(backend, info, consumer)
    (removed,) = backend.submit([O.DeleteConsumer(info.name, check_name(consumer, "consumer name"), info.id)])
    if not removed:
        raise errors.ConsumerNotFound(f"consumer {consumer!r} has no stored offsets on stream {info.name!r}")
    return int(removed)


def queue_summary(status: QueueStatus, now_ms: int) -> dict[str, Any]:
    """The row of ``tstreams queues describe --json`` (also the web console's)."""
    oldest = status.oldest_unsettled_ms
    return {"stream": status.stream, "group": status.group, "pending": sum((status.pending or {}).values()),
            "in_flight": status.in_flight, "waiting": status.waiting, **status.counters,
            "oldest_unsettled_age_ms": None if oldest is None else max(0, now_ms - oldest),
            "next_redelivery": None if status.next_due_ms is None else ms_time(status.next_due_ms),
            **status.settings}


def schedule_row(s: ScheduleInfo, now_ms: int) -> dict[str, Any]:
    """The row of ``tstreams schedules list --json`` (also the web console's)."""
    return {"id": s.id, "stream": s.stream, "partition": s.partition, "items": s.items, "due_ms": s.due_ms,
            "due": ms_time(s.due_ms), "in": duration(s.due_ms - now_ms) if s.due_ms >= now_ms
            else "-" + (duration(now_ms - s.due_ms) or ""), "created": ms_time(s.created_ms)}
