"""Stored state of work queues (competing consumers with acknowledgements).

A work queue is a named *group* on a stream. It hands the items of the stream's
checkpointed transactions to its consumers, each item to one consumer at a time, and
tracks each handed-out item until it is settled (acknowledged, dead-lettered or
terminated). The state lives in the ``queues`` database, sealed like every other value:

* ``g`` · stream id u64 · group · 0x00 -> :class:`GroupConfig` and the group's counters;
* ``c`` · stream id u64 · group · 0x00 · partition u32 -> :class:`Cursor`: how far the
  partition's items have been handed out;
* ``e`` · stream id u64 · group · 0x00 · partition u32 · txn id u64 · index u32 ->
  :class:`Entry`: a *run* of ``count`` consecutive items of one transaction, from item
  ``index`` on, handed out and not settled yet, all in the same state (in flight, or
  waiting for their redelivery) with the same delivery count, deadlines and consumer. A
  receive writes one entry per transaction it hands items of; settling some items of a
  run trims or splits it. Runs never overlap. (Entries written before runs have no count:
  a run of one item.)
* ``d`` · stream id u64 · group · 0x00 · redeliver-at ms u64 · partition u32 · txn id u64 ·
  index u32 -> empty: the redelivery index, in time order, one key per run (its first item).

Only unsettled items that were handed out have keys. Items after a partition's cursor are
pending (never delivered); items before it without an entry are settled. So the state is a
range per partition plus at most ``max_in_flight`` entries, whatever the backlog: millions
of pending items cost nothing, and settled items leave nothing behind.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import msgpack

from ... import errors
from .validate import utf8

_U64 = struct.Struct(">Q")
_PART = struct.Struct(">I")
_ITEM = struct.Struct(">IQI")
_DUE = struct.Struct(">QIQI")

#: every counter a group keeps (``tstreams queues describe``)
COUNTERS = ("delivered", "redelivered", "acked", "nacked", "dead_lettered", "terminated", "exhausted", "gone")


class EntryState(IntEnum):
    """An unsettled item's state."""

    IN_FLIGHT = 1  # handed to a consumer; its lock ends at ``lock_deadline``
    WAITING = 2  # nacked (or its lock ran out): redelivered at ``redeliver_at``


class Settle(IntEnum):
    """What a consumer does with a delivery (:class:`~.ops.QueueSettle`)."""

    ACK = 1  # done: the item is settled
    NAK = 2  # failed: deliver it again after a delay (or the backoff)
    PROGRESS = 3  # still working on it: extend its lock by the ack timeout
    TERM = 4  # never deliver it again: to the dead-letter stream, if the group has one


@dataclass
class GroupConfig:
    """A group's settings (set by :class:`~.ops.QueueDeclare`) and counters."""

    ack_timeout_ms: int
    max_deliveries: int
    dead_letter: str | None
    backoff_ms: list[int]
    max_in_flight: int
    rotation: int = 0  # the partition the next receive starts at (fairness)
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))

    def pack(self) -> bytes:
        return bytes(msgpack.packb([self.ack_timeout_ms, self.max_deliveries, self.dead_letter, self.backoff_ms,
                                    self.max_in_flight, self.rotation, self.counters]))

    @classmethod
    def unpack(cls, raw: bytes) -> GroupConfig:
        timeout, deliveries, dead, backoff, in_flight, rotation, counters = msgpack.unpackb(raw)
        return cls(timeout, deliveries, dead, list(backoff), in_flight, rotation,
                   {**dict.fromkeys(COUNTERS, 0), **counters})

    def backoff_for(self, deliveries: int) -> int:
        """The delay before delivery ``deliveries + 1`` of an item that failed (ms)."""
        if not self.backoff_ms:
            return 0
        return self.backoff_ms[min(deliveries, len(self.backoff_ms)) - 1]

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n


@dataclass
class Cursor:
    """How far a partition was handed out: every item of the checkpointed transactions up to
    ``position``, and the first ``index`` items of transaction ``partial`` (0: none)."""

    position: int = 0
    partial: int = 0
    index: int = 0

    def pack(self) -> bytes:
        return bytes(msgpack.packb([self.position, self.partial, self.index]))

    @classmethod
    def unpack(cls, raw: bytes | None) -> Cursor:
        return cls(*msgpack.unpackb(raw)) if raw else cls()


@dataclass
class Entry:
    """A run of ``count`` consecutive items of one transaction handed out and not settled
    (its key names the first)."""

    state: EntryState
    deliveries: int
    lock_deadline: int
    redeliver_at: int
    consumer: str
    error: str | None = None
    count: int = 1

    def pack(self) -> bytes:
        return bytes(msgpack.packb([int(self.state), self.deliveries, self.lock_deadline, self.redeliver_at,
                                    self.consumer, self.error, self.count]))

    @classmethod
    def unpack(cls, raw: bytes) -> Entry:
        fields = msgpack.unpackb(raw)
        if len(fields) == 6:  # written before runs: one item
            fields.append(1)
        state, deliveries, lock, due, consumer, error, count = fields
        return cls(EntryState(state), deliveries, lock, due, consumer, error, count)

    @property
    def fate(self) -> tuple[Any, ...]:
        """Everything but the count: two adjacent runs with the same fate are one."""
        return self.state, self.deliveries, self.lock_deadline, self.redeliver_at, self.consumer, self.error


# --------------------------------------------------------------------------- keys
def group_prefix(stream_id: int, group: str) -> bytes:
    return _U64.pack(stream_id) + utf8(group, "group name") + b"\x00"


def group_key(stream_id: int, group: str) -> bytes:
    return b"g" + group_prefix(stream_id, group)


def cursor_key(stream_id: int, group: str, partition: int) -> bytes:
    return b"c" + group_prefix(stream_id, group) + _PART.pack(partition)


def entry_key_in(prefix: bytes, partition: int, txn_id: int, index: int) -> bytes:
    """An unsettled item's key, under its group's :func:`group_prefix`."""
    return b"e" + prefix + _ITEM.pack(partition, txn_id, index)


def entry_prefix(stream_id: int, group: str, partition: int | None = None) -> bytes:
    tail = b"" if partition is None else _PART.pack(partition)
    return b"e" + group_prefix(stream_id, group) + tail


def due_key_in(prefix: bytes, at: int, partition: int, txn_id: int, index: int) -> bytes:
    """A redelivery index key, under its group's :func:`group_prefix`."""
    return b"d" + prefix + _DUE.pack(at, partition, txn_id, index)


def due_prefix(stream_id: int, group: str) -> bytes:
    return b"d" + group_prefix(stream_id, group)


def parse_entry_key(key: bytes, prefix_len: int) -> tuple[int, int, int]:
    """``(partition, txn id, index)`` of an ``e`` key whose group prefix is ``prefix_len`` long."""
    partition, txn_id, index = _ITEM.unpack_from(key, prefix_len)
    return partition, txn_id, index


def parse_due_key(key: bytes, prefix_len: int) -> tuple[int, int, int, int]:
    """``(redeliver at, partition, txn id, index)`` of a ``d`` key."""
    at, partition, txn_id, index = _DUE.unpack_from(key, prefix_len)
    return at, partition, txn_id, index


def stream_prefixes(stream_id: int) -> list[bytes]:
    """The key prefixes of every group of a stream (dropped with the stream)."""
    sid = _U64.pack(stream_id)
    return [kind + sid for kind in (b"g", b"c", b"e", b"d")]


def check_not_declared(config: GroupConfig | None, stream: str, group: str) -> GroupConfig:
    if config is None:
        raise errors.WorkQueueNotFound(
            f"work queue group {group!r} of stream {stream!r} does not exist: create it with "
            f"engine.work_queue({stream!r}, {group!r}, ...)")
    return config


def delivery_row(partition: int, txn_id: int, index: int, deliveries: int, lock_deadline: int,
                 item: bytes) -> list[Any]:
    """One delivery as a receive's result carries it."""
    return [partition, txn_id, index, deliveries, lock_deadline, item]
