"""The contract between the user-facing API and a storage backend.

``Producer``, ``Consumer``, ``Subscriber`` and ``CheckpointGroup`` are written only against
:class:`Backend`. The embedded engine (:class:`tstreams_embedded.engine.storage.core.Core`) implements
it on LMDB; the network client implements it over ZeroMQ. The same user code therefore
behaves identically embedded or remote.

Every write goes through :meth:`Backend.submit` as a batch of operation records
(:mod:`tstreams_embedded.engine.protocol.ops`): the batch is atomic, and when ``durable`` is true the
call returns only after the batch is on disk (in ``durability="sync"`` mode).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ... import errors

if TYPE_CHECKING:
    from .ops import Operation


@dataclass(frozen=True)
class StreamInfo:
    """A stream's metadata. ``ttl`` is in seconds; ``created`` in epoch milliseconds."""

    name: str
    id: int
    partitions: int
    ttl: int
    description: str = ""
    created: int = 0

    def to_wire(self) -> list[Any]:
        return [self.name, self.id, self.partitions, self.ttl, self.description, self.created]

    @classmethod
    def from_wire(cls, v: Sequence[Any]) -> StreamInfo:
        return cls(*v)


@dataclass(frozen=True)
class TxnData:
    """A checkpointed transaction as stored: raw ``bytes`` items, in send order.
    ``stream_id`` is the incarnation of the stream it was read from (:attr:`StreamInfo.id`)."""

    stream: str
    partition: int
    id: int
    items: list[bytes] = field(default_factory=list)
    stream_id: int | None = field(default=None, compare=False)

    def to_wire(self) -> list[Any]:
        return [self.stream, self.partition, self.id, self.items, self.stream_id]

    @classmethod
    def from_wire(cls, v: Sequence[Any]) -> TxnData:
        return cls(v[0], v[1], v[2], list(v[3]), v[4] if len(v) > 4 else None)


@dataclass(frozen=True)
class Fetched:
    """The result of :meth:`Backend.fetch`.

    ``txns`` are checkpointed transactions in ID order. ``position`` is the ID of the last
    record examined and passed (checkpointed, cancelled, invalid or TTL-expired); a consumer
    that has processed all of ``txns`` may store ``position`` as its offset. ``blocked`` is
    true when the scan stopped at an open, unexpired transaction. ``stream_id`` is the
    incarnation of the stream that was read (:attr:`StreamInfo.id`): a consumer made before
    the stream was deleted and created again tells by it that its stream is gone.
    """

    txns: list[TxnData]
    position: int
    blocked: bool
    stream_id: int | None = None

    def to_wire(self) -> list[Any]:
        return [[t.to_wire() for t in self.txns], self.position, self.blocked, self.stream_id]

    @classmethod
    def from_wire(cls, v: Sequence[Any]) -> Fetched:
        return cls([TxnData.from_wire(t) for t in v[0]], v[1], v[2], v[3] if len(v) > 3 else None)


@dataclass(frozen=True)
class IndexScan:
    """The result of :meth:`Backend.scan_index`: what :meth:`Backend.fetch` would return,
    without the items.

    ``entries`` are ``(txn_id, item_count)`` of checkpointed transactions in ID order;
    ``position`` and ``blocked`` mean what they mean in :class:`Fetched`; ``truncated`` is
    true when the scan stopped at ``max_txns`` (more may follow from ``position``).
    """

    entries: list[tuple[int, int]]
    position: int
    blocked: bool
    truncated: bool

    def to_wire(self) -> list[Any]:
        return [[list(e) for e in self.entries], self.position, self.blocked, self.truncated]

    @classmethod
    def from_wire(cls, v: Sequence[Any]) -> IndexScan:
        return cls([(int(i), int(n)) for i, n in v[0]], v[1], v[2], v[3])


@dataclass(frozen=True)
class OpenTxn:
    """An open transaction as :meth:`Backend.describe_partitions` reports it: its ID, its
    deadline (epoch milliseconds; past it, the transaction expires), the items flushed so far
    and the name of the producer that opened it (``Engine.producer(name=...)``; None when not
    known: opened before the engine recorded it). The name is what the producer said: shown,
    never trusted."""

    id: int
    deadline: int
    items: int
    producer: str | None = None

    def to_wire(self) -> list[Any]:
        """``[id, deadline, items]``, plus the producer's name when known."""
        row: list[Any] = [self.id, self.deadline, self.items]
        if self.producer is not None:
            row.append(self.producer)
        return row


@dataclass(frozen=True)
class PartitionInfo:
    """What :meth:`Backend.describe_partitions` reports of one partition, from one snapshot.

    ``last_id`` is the highest transaction ID ever allocated (0 if none); ``first`` and
    ``head`` the lowest and highest visible checkpointed IDs (0 if none); ``checkpointed``
    and ``items`` count the visible checkpointed transactions and their items; ``expired``
    counts the transactions that expired but are still stored: checkpointed ones past the
    stream's TTL that compaction has not removed yet, and open ones past their deadline (a
    writer that died; a reader invalidates them when it reaches them). ``open`` lists up to
    :data:`MAX_OPEN_LISTED` open, unexpired transactions in ID order (``open_count`` counts
    them all). ``bytes`` is the size of the partition's stored keys
    and values (transaction records and data chunks), without LMDB's page overhead.
    """

    partition: int
    last_id: int
    first: int
    head: int
    checkpointed: int
    items: int
    expired: int
    open: list[OpenTxn]
    open_count: int
    bytes: int

    def to_wire(self) -> list[Any]:
        return [self.partition, self.last_id, self.first, self.head, self.checkpointed, self.items, self.expired,
                [t.to_wire() for t in self.open], self.open_count, self.bytes]

    @classmethod
    def from_wire(cls, v: Sequence[Any]) -> PartitionInfo:
        return cls(v[0], v[1], v[2], v[3], v[4], v[5], v[6], [OpenTxn(*t) for t in v[7]], v[8], v[9])


@dataclass(frozen=True)
class QueueStatus:
    """A work queue group as :meth:`Backend.queue_status` reports it, from one snapshot.

    ``settings``: ack_timeout_ms, max_deliveries, dead_letter, backoff_ms, max_in_flight;
    ``counters``: delivered, redelivered, acked, nacked, dead_lettered, terminated,
    exhausted (past max_deliveries with no dead-letter stream) and gone (expired by the
    stream's TTL before being settled); ``in_flight``: items locked to a consumer;
    ``waiting``: items waiting for a redelivery; ``ready``: whether a receive now would hand
    something out; ``next_due_ms``: the earliest redelivery time (engine clock), if any;
    with ``full``: ``pending`` (items never delivered, per partition) and
    ``oldest_unsettled_ms`` (checkpoint time of the oldest item not settled, if any)."""

    stream: str
    group: str
    settings: dict[str, Any]
    counters: dict[str, int]
    in_flight: int
    waiting: int
    ready: bool
    next_due_ms: int | None
    pending: dict[int, int] | None = None
    oldest_unsettled_ms: int | None = None

    def to_wire(self) -> list[Any]:
        return [self.stream, self.group, self.settings, self.counters, self.in_flight, self.waiting, self.ready,
                self.next_due_ms, self.pending, self.oldest_unsettled_ms]

    @classmethod
    def from_wire(cls, v: Sequence[Any]) -> QueueStatus:
        pending = None if v[8] is None else {int(k): n for k, n in v[8].items()}
        return cls(v[0], v[1], dict(v[2]), dict(v[3]), v[4], v[5], v[6], v[7], pending, v[9])


@dataclass(frozen=True)
class BackupCopy:
    """A consistent, compacted copy of the engine's data made for a backup
    (:meth:`Backend.backup_begin`): its ``token``, size, CRC32C, and the sequence number and
    time of the newest commit-log entry it holds."""

    token: str
    bytes: int
    crc32c: int
    log_seq: int
    log_time_ms: int | None

    def to_wire(self) -> list[Any]:
        return [self.token, self.bytes, self.crc32c, self.log_seq, self.log_time_ms]

    @classmethod
    def from_wire(cls, v: Sequence[Any]) -> BackupCopy:
        return cls(*v)


#: The most open transactions :meth:`Backend.describe_partitions` lists per partition.
MAX_OPEN_LISTED = 100
#: The most partitions one :meth:`Backend.describe_partitions` call describes.
MAX_DESCRIBED_PARTITIONS = 1024


@dataclass(frozen=True)
class ConsumerInfo:
    """A named consumer of a stream and its stored offsets (partition -> last processed txn
    ID); ``expired_unread``: partition -> items that the stream's TTL deleted before this
    consumer read them (see :mod:`..storage.expiry`; partitions without any are left out)."""

    stream: str
    name: str
    offsets: dict[int, int]
    expired_unread: dict[int, int] = field(default_factory=dict)

    def to_wire(self) -> list[Any]:
        return [self.stream, self.name, self.offsets, self.expired_unread]

    @classmethod
    def from_wire(cls, v: Sequence[Any]) -> ConsumerInfo:
        unread = v[3] if len(v) > 3 else {}
        return cls(v[0], v[1], {int(p): int(o) for p, o in v[2].items()},
                   {int(p): int(n) for p, n in unread.items()})


@dataclass(frozen=True)
class StoreScan:
    """One range of a state store that :meth:`Backend.store_snapshot` reads: the entries of
    ``store`` with ``start <= key < end`` (None: unbounded; ``end`` may be one byte longer
    than a key, so that ``[key, key + b"\\0")`` reads one key), at most ``limit`` of them
    (None: no limit). For a windowed store (keys as :func:`..storage.state_stores.window_key` encodes them),
    ``window_key`` keeps only the windows of that user key, and ``window_start_from`` /
    ``window_start_to`` only the windows that start in that range (epoch ms, inclusive)."""

    store: str
    start: bytes | None = None
    end: bytes | None = None
    limit: int | None = None
    window_key: bytes | None = None
    window_start_from: int | None = None
    window_start_to: int | None = None

    def to_wire(self) -> list[Any]:
        return [self.store, self.start, self.end, self.limit, self.window_key, self.window_start_from,
                self.window_start_to]

    @classmethod
    def from_wire(cls, v: Any) -> StoreScan:
        if not isinstance(v, (list, tuple)) or len(v) != 7:
            raise errors.InvalidArgument(f"a store scan is [store, start, end, limit, window_key, "
                                         f"window_start_from, window_start_to], got {v!r:.80}")
        return cls(*v)


class Backend(Protocol):
    """What the public API needs from storage. Every method raises errors from
    :mod:`tstreams_embedded.errors` (``EngineClosed`` once closed)."""

    @property
    def closed(self) -> bool:
        """True once closed; every call then raises ``EngineClosed``."""
        ...

    @property
    def max_item_size(self) -> int:
        """The largest item accepted, in bytes."""
        ...

    @property
    def local_clock(self) -> bool:
        """True when :meth:`now_ms` is a cheap local call (consumers may ask it per transaction)."""
        ...

    # --- writes ---------------------------------------------------------------------
    def submit(self, ops: Sequence[Operation], durable: bool = True) -> list[Any]:
        """Apply the client records ``ops`` (:mod:`.ops`) atomically, all or nothing, and
        return one result per record. Engine-only records and engine-resolved fields are
        refused with :class:`~tstreams_embedded.errors.InvalidArgument`."""
        ...

    # --- metadata -------------------------------------------------------------------
    def get_stream(self, name: str) -> StreamInfo: ...

    def list_streams(self, prefix: str = "", limit: int | None = None) -> list[StreamInfo]: ...

    # --- reads ----------------------------------------------------------------------
    def fetch(self, stream: str, partition: int, after: int, max_txns: int = 256) -> Fetched:
        """Checkpointed transactions with ID > ``after``, stopping at an open one."""
        ...

    def scan_index(self, stream: str, partition: int, after: int, upto: int = 2**63 - 1,
                   max_txns: int = 4096) -> IndexScan:
        """Like :meth:`fetch` for ``after < id <= upto``, returning IDs and item counts only
        (no item bytes): query planning reads the index, not the data. When the scan meets
        a transaction beyond ``upto``, ``position`` is ``upto``."""
        ...

    def get_transaction(self, stream: str, partition: int, txn_id: int) -> TxnData | None:
        """The checkpointed transaction ``txn_id``, or None if it is not (or no longer) visible."""
        ...

    def transactions_range(self, stream: str, partition: int, from_id: int, to_id: int) -> list[TxnData]:
        """Checkpointed transactions with ``from_id <= id <= to_id``, stopping at an open one."""
        ...

    def last_transaction(self, stream: str, partition: int) -> TxnData | None:
        """The checkpointed transaction with the highest ID, or None."""
        ...

    def last_txn_id(self, stream: str, partition: int) -> int:
        """The highest transaction ID ever allocated in the partition (0 if none)."""
        ...

    def get_offsets(self, stream: str, consumer: str) -> dict[int, int]:
        """The stored offsets of a named consumer: partition -> last processed txn ID."""
        ...

    def get_marker(self, key: str) -> int | None: ...

    def list_consumers(self, stream: str | None = None, limit: int | None = None) -> list[ConsumerInfo]:
        """The consumers with stored offsets, by stream name then consumer name: those of
        ``stream`` (``StreamNotFound`` if unknown), or of every stream when it is None; at
        most ``limit``."""
        ...

    def backup_begin(self) -> BackupCopy:
        """Make a consistent, compacted copy of the data for a backup (on the engine's host,
        in its temporary directory) and return what identifies it; read it with
        :meth:`backup_read` and drop it with :meth:`backup_end` (copies left behind are
        dropped after an hour). ``tstreams backup --connect`` uses these."""
        ...

    def backup_read(self, token: str, offset: int, size: int) -> bytes:
        """Up to ``size`` (at most 4 MiB) bytes of backup copy ``token`` from ``offset``;
        InvalidArgument for an unknown (or dropped) token."""
        ...

    def backup_end(self, token: str) -> None:
        """Drop backup copy ``token`` (no error if it is gone)."""
        ...

    def queue_status(self, stream: str, group: str, full: bool = False) -> QueueStatus:
        """Work queue ``group`` of ``stream`` (:class:`QueueStatus`); WorkQueueNotFound if
        it was never declared. ``full`` also counts pending items per partition, which reads
        the index of every transaction not yet handed out."""
        ...

    def describe_partitions(self, stream: str, first: int = 0, count: int = 256) -> list[PartitionInfo]:
        """Partitions ``first .. first+count-1`` of ``stream`` (those that exist; ``count`` at
        most :data:`MAX_DESCRIBED_PARTITIONS`), each read in one snapshot: heads, counts,
        open transactions and bytes used. It visits every transaction record of those
        partitions (no item data)."""
        ...

    def first_open_at(self, stream: str, partition: int, ms: int) -> int:
        """The lowest ID of a transaction of the partition that was open at ``ms`` (epoch
        milliseconds): opened before ``ms`` and still open, or checkpointed at or after
        ``ms``; 0 if none. A consumer that must read everything checkpointed since ``ms``
        starts before it (``tstreams consumers reset --to TIME``). It visits the transaction
        records up to ``ms`` (no item data)."""
        ...

    # --- state stores (engine/storage/state_stores.py; written with the StoreWrite record) -----------
    def store_get(self, store: str, key: bytes) -> bytes | None:
        """The value of ``key`` in the state store ``store``, or None."""
        ...

    def store_range(self, store: str, start: bytes | None = None, end: bytes | None = None,
                    limit: int = 10_000) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` entries ``(key, value)`` of ``store`` with ``start <= key < end``
        (None: unbounded), in key order, and at most about 16 MiB
        (:data:`..storage.state_stores.MAX_READ_BYTES`); page by continuing after the last key until a read
        returns nothing."""
        ...

    def store_windows(self, store: str, key: bytes | None, end_from: int, end_to: int,
                      limit: int = 10_000) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` entries of the windowed store ``store`` whose window ends in
        ``[end_from, end_to]`` (epoch ms), of user key ``key`` (None: every key), ordered by
        (end, start, key); keys as :func:`..storage.state_stores.window_key` encodes them. At most about
        16 MiB per read, like :meth:`store_range`."""
        ...

    def store_snapshot(self, scans: Sequence[StoreScan],
                       max_bytes: int | None = None) -> list[list[tuple[bytes, bytes]]]:
        """The entries of each of ``scans`` (one list per scan, in key order), all read in ONE
        snapshot of the engine: a commit is either wholly in the answer or not at all, across
        every store and range it covers. The answer's keys and values total at most
        ``max_bytes`` (default and most: :data:`..storage.state_stores.MAX_READ_BYTES`, 16 MiB);
        :class:`~tstreams_embedded.errors.QueryTooLarge` if they would exceed it (narrow the
        ranges, or give limits). At most :data:`..storage.state_stores.MAX_SCANS` scans."""
        ...

    def wait_for_commit(self, seen: int, timeout: float) -> int:
        """Block until a commit newer than generation ``seen`` (or ``timeout`` seconds);
        return the current commit generation."""
        ...

    def now_ms(self) -> int:
        """The engine's clock, in epoch milliseconds."""
        ...

    def stats(self) -> dict[str, Any]: ...

    # --- maintenance ----------------------------------------------------------------
    def compact(self) -> dict[str, int]:
        """Delete every transaction past its stream's TTL now; counts of what was removed."""
        ...

    def close(self) -> None: ...
