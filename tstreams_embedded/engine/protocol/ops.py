"""Operation records: the only way state changes.

Every state change is one typed record (a :class:`~typing.NamedTuple`) defined here, and
only here. A *batch* of records is applied in exactly one (nested) LMDB write transaction
and appended to the commit log in that same transaction; it applies completely or not at
all.

Each record class is declared with :func:`operation`, which gives it an :class:`OpSpec`:

``opcode``
    its number on the wire and in the commit log (:class:`Opcode`);
``client``
    whether clients may submit it (:meth:`Backend.submit`); the others are written only by
    the engine itself (maintenance, invalidation on read);
``resolved``
    fields that only the engine fills in: a client leaves them ``None``, the engine writes
    the clock- or state-dependent value (a new transaction ID, a deadline) into the logged
    record, and replaying that record on a replica therefore gives the same state. Only the
    privileged replay path (:meth:`Core.apply_log`) accepts them set;
``mergeable``
    whether batches made only of such records may be concatenated without changing what
    any of them does (the network server merges such bursts into one write);
``addresses_txn``
    whether the record acts on an existing transaction named by ``(stream, partition,
    txn_id)`` (the network client orders its pipelined writes by that key).

Records that address a stream carry an optional last field ``stream_id``: the stream's
incarnation (:attr:`StreamInfo.id <.backend.StreamInfo.id>`). When set, the record applies
only to that incarnation, and raises :class:`~tstreams_embedded.errors.StreamNotFound` once
the stream was deleted (even if a stream of the same name was created since). Producers and
consumers always set it; commit-log rows written before it existed simply lack it.
``KEEPALIVE`` targets may likewise carry it as a fourth element.

Encoding (wire and commit log) is a msgpack array ``[opcode, *fields]``; a logged batch is
``[now_ms, [record, ...]]``. Item payloads travel as ``chunk``: one msgpack array of
``bytes`` items, packed once by the producer and stored as one LMDB value
(:func:`pack_items`). The commit log keeps no copy of a stored chunk: the logged record
carries a :class:`ChunkRef` (where the chunk is stored, and its item count) instead, so
deleting or compacting data frees its space at once. Reading the log resolves references
back to bytes; a chunk deleted since is read as :class:`GoneChunk`.

To add an operation: declare its record here with :func:`operation`, and register its
handler in :mod:`..storage.apply` with ``@handles(NewRecord)``. Nothing else dispatches on opcodes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple, TypeVar

import msgpack

from ... import errors


class Opcode(IntEnum):
    """Operation numbers, as written on the wire and in the commit log."""

    CREATE_STREAM = 1
    DELETE_STREAM = 2
    OPEN = 3
    DATA = 4
    CHECKPOINT = 5
    CANCEL = 6
    INSTANT = 7
    KEEPALIVE = 8
    INVALIDATE = 9
    SET_OFFSETS = 10
    COMPACT = 11
    SET_MARKER = 12
    CANCEL_IF_OPEN = 13
    # 20..29: operator tooling (``tstreams consumers``)
    DELETE_CONSUMER = 20
    RESET_OFFSETS = 21
    # 30..39: state stores (``tstreams_embedded.streams``)
    STORE_WRITE = 30
    LEASE = 31
    CHECK_LEASE = 32
    # 40..49: work queues (:mod:`.queuestate`, ``engine.work_queue``)
    QUEUE_DECLARE = 40
    QUEUE_RECEIVE = 41
    QUEUE_SETTLE = 42
    # 50..59: scheduled delivery (:mod:`.schedules`)
    SCHEDULE = 50
    CANCEL_SCHEDULE = 51
    FIRE_SCHEDULE = 52


class TxnState(IntEnum):
    """Stored transaction states (T-streams' numbering)."""

    OPENED = 1
    CANCELLED = 3
    INVALID = 4
    CHECKPOINTED = 5

    @property
    def label(self) -> str:
        return self.name.lower() if self is not TxnState.OPENED else "open"


@dataclass(frozen=True)
class OpSpec:
    """The properties of one operation record class (see the module docstring)."""

    opcode: Opcode
    record: type
    client: bool
    mergeable: bool
    addresses_txn: bool
    resolved: tuple[str, ...]
    #: The record's number of fields.
    width: int = 0

    @property
    def name(self) -> str:
        return self.opcode.name


_SPECS: dict[type, OpSpec] = {}
_BY_CODE: dict[int, OpSpec] = {}
R = TypeVar("R")


def operation(opcode: Opcode, *, client: bool = True, mergeable: bool = True, addresses_txn: bool = False,
              resolved: tuple[str, ...] = ()) -> Callable[[type[R]], type[R]]:
    """Class decorator declaring an operation record and its :class:`OpSpec`."""

    def declare(cls: type[R]) -> type[R]:
        fields: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]
        unknown = [f for f in resolved if f not in fields]
        if unknown or opcode in _BY_CODE:
            raise TypeError(f"bad operation declaration {cls.__name__}: {unknown or opcode}")
        spec = OpSpec(opcode, cls, client, mergeable, addresses_txn, resolved, len(fields))
        _SPECS[cls] = spec
        _BY_CODE[int(opcode)] = spec
        return cls

    return declare


# --------------------------------------------------------------------------- chunk references
@dataclass(frozen=True, slots=True)
class ChunkRef:
    """A logged record's chunk, by reference: the ``data`` key it is stored under."""

    stream_id: int
    partition: int
    txn_id: int
    index: int
    items: int

    _STRUCT = struct.Struct(">QIQII")

    def to_ext(self) -> msgpack.ExtType:
        # tuple.__new__ skips ExtType's Python-level argument checks (a constant code and
        # bytes: nothing to check); every logged chunk passes here.
        return _new_tuple(msgpack.ExtType, (EXT_CHUNK_REF, ChunkRef._STRUCT.pack(
            self.stream_id, self.partition, self.txn_id, self.index, self.items)))

    @classmethod
    def from_ext(cls, data: bytes) -> ChunkRef:
        return cls(*cls._STRUCT.unpack(data))


@dataclass(frozen=True, slots=True)
class GoneChunk:
    """A logged chunk whose data was deleted (cancelled, compacted, stream deleted) before the
    log was read. Replaying it counts its items and stores no data: a later record of the
    same log removes the transaction."""

    items: int


EXT_CHUNK_REF = 2
_new_tuple = tuple.__new__


def _log_ext(obj: Any) -> Any:
    if type(obj) is ChunkRef:
        return obj.to_ext()
    raise TypeError(f"cannot log {type(obj).__name__}")


def _log_ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_CHUNK_REF:
        return ChunkRef.from_ext(data)
    return msgpack.ExtType(code, data)


Chunk = bytes | ChunkRef | GoneChunk
"""A record's items: packed bytes from clients; a reference or a gone chunk in the log."""


# --------------------------------------------------------------------------- the records
@operation(Opcode.CREATE_STREAM, mergeable=False)
class CreateStream(NamedTuple):
    """Create a stream; result: its info in wire form (``StreamInfo.to_wire()``)."""

    name: str
    partitions: int
    ttl: int  # seconds
    description: str = ""


@operation(Opcode.DELETE_STREAM, mergeable=False)
class DeleteStream(NamedTuple):
    """Delete a stream with its transactions, data and offsets; result: None."""

    name: str


@operation(Opcode.OPEN, resolved=("txn_id", "deadline"))
class Open(NamedTuple):
    """Register an open transaction, optionally with its first chunk; result: its ID.

    ``producer`` names the producer that opens it (``Engine.producer(name=...)``): stored
    with the transaction while it is open, for display only (``tstreams streams describe``,
    the console), never trusted for anything else; at most
    :data:`~.validate.MAX_PRODUCER_BYTES` UTF-8 bytes. Records written before it existed
    lack it (None: not known)."""

    stream: str
    partition: int
    ttl_ms: int
    txn_id: int | None = None
    deadline: int | None = None
    chunk: Chunk | None = None
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked
    producer: str | None = None  # who opened it (display only); None: not known


@operation(Opcode.DATA, addresses_txn=True)
class Data(NamedTuple):
    """Add a chunk of items to an open transaction; result: its item count so far."""

    stream: str
    partition: int
    txn_id: int
    chunk: Chunk
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked


@operation(Opcode.CHECKPOINT, addresses_txn=True)
class Checkpoint(NamedTuple):
    """Make an open transaction visible (with an optional last chunk); result: its item
    count. Checkpointing an empty transaction cancels it."""

    stream: str
    partition: int
    txn_id: int
    chunk: Chunk | None = None
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked


@operation(Opcode.CANCEL, addresses_txn=True)
class Cancel(NamedTuple):
    """Cancel an open transaction (error if it is not open); result: None."""

    stream: str
    partition: int
    txn_id: int
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked


@operation(Opcode.INSTANT, resolved=("txn_id",))
class Instant(NamedTuple):
    """A whole checkpointed transaction in one record; result: its ID."""

    stream: str
    partition: int
    chunk: Chunk
    txn_id: int | None = None
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked


@operation(Opcode.KEEPALIVE, resolved=("deadline",))
class KeepAlive(NamedTuple):
    """Push the deadline of open transactions ``[(stream, partition, txn_id), ...]`` to
    ``now + ttl_ms``; result: how many are still open."""

    targets: list[Any]
    ttl_ms: int
    deadline: int | None = None


@operation(Opcode.INVALIDATE, client=False, addresses_txn=True)
class Invalidate(NamedTuple):
    """Mark an open transaction whose deadline passed as invalid (engine only); result:
    True if it was open and expired."""

    stream: str
    partition: int
    txn_id: int
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked


@operation(Opcode.SET_OFFSETS)
class SetOffsets(NamedTuple):
    """Store a consumer's offsets ``{partition: txn_id}``; result: None."""

    stream: str
    consumer: str
    offsets: dict[int, int]
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked


@operation(Opcode.COMPACT, client=False)
class Compact(NamedTuple):
    """Delete a partition's transactions with ID < ``before_id`` (engine only, computed
    from the stream's TTL); result: how many were removed."""

    stream: str
    partition: int
    before_id: int
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked


@operation(Opcode.SET_MARKER)
class SetMarker(NamedTuple):
    """Store an integer marker; with ``guard``, fail with MarkerConflict unless the stored
    value is lower. Result: None."""

    key: str
    value: int
    guard: bool = False


@operation(Opcode.CANCEL_IF_OPEN, addresses_txn=True)
class CancelIfOpen(NamedTuple):
    """Cancel a transaction if it is still open (no error otherwise); result: True if it was."""

    stream: str
    partition: int
    txn_id: int
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked


@operation(Opcode.DELETE_CONSUMER, mergeable=False)
class DeleteConsumer(NamedTuple):
    """Delete every stored offset of a consumer; result: how many partitions' offsets were
    deleted (0 if it had none)."""

    stream: str
    consumer: str
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked


@operation(Opcode.RESET_OFFSETS, mergeable=False)
class ResetOffsets(NamedTuple):
    """Set a consumer's offsets ``{partition: txn_id}`` (they may move back) if its stored
    offsets are still exactly ``expected`` (every partition: a consumer still running would
    have moved them); otherwise fail with OffsetsConflict and write nothing. Result: None."""

    stream: str
    consumer: str
    expected: dict[int, int]
    offsets: dict[int, int]
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked


@operation(Opcode.STORE_WRITE)
class StoreWrite(NamedTuple):
    """Change the entries of one state store (a namespace of the ``state`` database, used by
    :mod:`tstreams_embedded.streams`): first delete every key in each ``[start, end)`` of
    ``delete_ranges`` (``end`` None: to the store's end), then each key of ``deletes``, then
    write ``puts`` (``[[key, value], ...]``, bytes). Result: None.

    A streams task puts one per store into its commit batch, next to its output
    transactions and its input offsets, so state, output and input position change in one
    write, and the commit log (and a cluster's replicated log) carries the state too."""

    store: str
    puts: list[Any]
    deletes: list[Any] | None = None
    delete_ranges: list[Any] | None = None


@operation(Opcode.LEASE, mergeable=False, resolved=("deadline",))
class Lease(NamedTuple):
    """Take, renew or release the lease ``key`` of state store ``store`` (its value there is
    a :class:`..storage.state_stores.LeaseRecord`, the msgpack array ``[owner, epoch, deadline_ms]``).
    Result: the new deadline (epoch ms of the engine's clock; 0 after a release).

    * **renew** (``ttl_ms > 0``): the stored lease is ``(owner, epoch)``; deadline = now + ttl;
    * **release** (``ttl_ms == 0``): the stored lease is ``(owner, epoch)``; it becomes free
      (owner ``""``, deadline 0), keeping its epoch;
    * **take** (``ttl_ms > 0``): ``epoch`` is the stored epoch + 1 (1 when there is none)
      and the stored lease is free (released, or its deadline passed) — or ``force`` is set
      (a successor that knows the holder is gone, e.g. the restart of a static member:
      still a compare-and-set on the epoch, so the old holder is fenced all the same).

    Anything else raises LeaseConflict and the batch writes nothing. Streams apps hold one
    lease per task; every task commit carries a :class:`CheckLease` of it, so a task whose
    lease was taken over (a new epoch) can never commit again."""

    store: str
    key: bytes
    owner: str
    epoch: int
    ttl_ms: int
    force: bool = False
    deadline: int | None = None  # resolved: now + ttl_ms (0 for a release)


@operation(Opcode.CHECK_LEASE)
class CheckLease(NamedTuple):
    """Fence: fail with LeaseConflict (so the whole batch writes nothing) unless the lease
    ``key`` of ``store`` is held by ``owner`` at ``epoch`` (its deadline does not matter: a
    lease can only change hands through a take, which moves the epoch). Result: None."""

    store: str
    key: bytes
    owner: str
    epoch: int


@operation(Opcode.QUEUE_DECLARE, mergeable=False)
class QueueDeclare(NamedTuple):
    """Create work queue group ``group`` on ``stream``, or change its settings (its cursor,
    in-flight items and counters stay). ``ack_timeout_ms``: how long a delivery is locked to
    its consumer; ``max_deliveries``: deliveries before an item goes to ``dead_letter`` (a
    stream name, or None: the item is only counted as exhausted); ``backoff_ms``: the delay
    before the 1st, 2nd, ... redelivery of a failed item (the last repeats; empty: none);
    ``max_in_flight``: the most unsettled handed-out items of the group (back-pressure: a
    receive hands out nothing new beyond it). Result: True if the group was created."""

    stream: str
    group: str
    ack_timeout_ms: int
    max_deliveries: int
    dead_letter: str | None
    backoff_ms: list[int]
    max_in_flight: int
    stream_id: int | None = None


@operation(Opcode.QUEUE_RECEIVE, mergeable=False, resolved=("deliveries",))
class QueueReceive(NamedTuple):
    """Hand up to ``max_items`` items (and about ``max_bytes``) of work queue ``group`` to
    ``consumer``: first items due for redelivery (an item past ``max_deliveries`` goes to the
    dead-letter stream instead, in this same write), then new items of checkpointed
    transactions, never past an open one. Result: the deliveries, each ``[partition, txn id,
    index, delivery count, lock deadline ms, item]``. Resolved: the deliveries without their
    items, ``[partition, txn id, index, delivery count]``; a replay recomputes them from the
    same state and clock and checks they agree."""

    stream: str
    group: str
    consumer: str
    max_items: int
    max_bytes: int
    stream_id: int | None = None
    deliveries: list[Any] | None = None  # resolved


@operation(Opcode.QUEUE_SETTLE, mergeable=False)
class QueueSettle(NamedTuple):
    """Settle deliveries of work queue ``group`` made to ``consumer``, all alike: ``action``
    is a :class:`.queuestate.Settle` (ack, nak after ``delay_ms`` or the group's backoff
    when None, progress, term), ``error`` the consumer's reason (kept for the dead-letter
    record); ``deliveries`` lists ``[partition, txn id, item index, delivery number]``.
    DeliveryExpired, and nothing written, unless each is still its item's current
    delivery. Result: None."""

    stream: str
    group: str
    consumer: str
    action: int
    deliveries: list[Any]
    delay_ms: int | None = None
    error: str | None = None
    stream_id: int | None = None


@operation(Opcode.SCHEDULE, resolved=("schedule_id", "due_ms", "created_ms"))
class Schedule(NamedTuple):
    """Store a transaction to write to ``stream`` partition ``partition`` at ``at_ms``
    (epoch ms) or ``delay_ms`` after the engine's clock now (exactly one of them); result:
    the schedule's ID (:mod:`.schedules`). It is not a transaction until it fires."""

    stream: str
    partition: int
    chunk: Chunk
    at_ms: int | None = None
    delay_ms: int | None = None
    schedule_id: int | None = None  # resolved: the next schedule ID
    due_ms: int | None = None  # resolved: at_ms, or now + delay_ms
    created_ms: int | None = None  # resolved: the engine's clock
    stream_id: int | None = None  # the stream's incarnation (StreamInfo.id); None: unchecked


@operation(Opcode.CANCEL_SCHEDULE)
class CancelSchedule(NamedTuple):
    """Delete a schedule that has not fired; result: True if it was pending (False: no such
    schedule, or it fired or was cancelled already)."""

    schedule_id: int


@operation(Opcode.FIRE_SCHEDULE, client=False, resolved=("txn_id",))
class FireSchedule(NamedTuple):
    """Turn a due schedule into one checkpointed transaction of its stream and delete it, in
    this one write (engine only: the firer, or a cluster's leader); result: the new
    transaction's ID, or None when there was nothing to fire (fired already, cancelled, not
    due yet on this batch's clock; a schedule whose stream was deleted is dropped)."""

    schedule_id: int
    txn_id: int | None = None  # resolved: the transaction's ID (None: nothing fired)


Operation = (CreateStream | DeleteStream | Open | Data | Checkpoint | Cancel | Instant | KeepAlive | Invalidate
             | SetOffsets | Compact | SetMarker | CancelIfOpen | DeleteConsumer | ResetOffsets | StoreWrite
             | Lease | CheckLease | QueueDeclare | QueueReceive | QueueSettle | Schedule | CancelSchedule
             | FireSchedule)
"""Any operation record."""

RECORDS: tuple[type, ...] = tuple(_SPECS)
_CODES: dict[type, int] = {record: int(spec.opcode) for record, spec in _SPECS.items()}


# --------------------------------------------------------------------------- properties
def spec(op: Any) -> OpSpec:
    """The :class:`OpSpec` of a record; :class:`InvalidArgument` if ``op`` is not one."""
    s = _SPECS.get(type(op))
    if s is None:
        raise errors.InvalidArgument(
            f"an operation must be a record from tstreams_embedded.engine.ops, got {type(op).__name__}: {op!r:.80}"
        )
    return s


def spec_of_code(opcode: Any) -> OpSpec:
    s = _BY_CODE.get(opcode) if type(opcode) is int else None
    if s is None:
        raise errors.InvalidArgument(f"unknown operation code {opcode!r:.40}")
    return s


def all_specs() -> list[OpSpec]:
    return list(_SPECS.values())


def is_mergeable(op: Any) -> bool:
    s = _SPECS.get(type(op))
    return s is not None and s.mergeable


def txn_address(op: Any) -> tuple[str, int, int] | None:
    """``(stream, partition, txn_id)`` of a record that acts on an existing transaction."""
    s = _SPECS.get(type(op))
    if s is None or not s.addresses_txn:
        return None
    return (op.stream, op.partition, op.txn_id)


def check_client_batch(batch: Any) -> list[Operation]:
    """Validate a batch a client submitted: records only, client operations only, and no
    field that only the engine may set. Returns it as a list."""
    if not isinstance(batch, (list, tuple)):
        raise errors.InvalidArgument("ops must be a list of operation records")
    for op in batch:
        s = spec(op)
        if not s.client:
            raise errors.InvalidArgument(f"{s.name} records are written by the engine only; clients cannot submit them")
        for field in s.resolved:
            if getattr(op, field) is not None:
                raise errors.InvalidArgument(
                    f"{s.name}.{field} is set by the engine; leave it None (only log replay may carry it)"
                )
    return list(batch)


@dataclass(frozen=True, slots=True)
class MaintenanceBatch:
    """Engine maintenance that a cluster leader replicates so that every node applies the
    same: :class:`Compact` records computed from the streams' TTL
    (:meth:`~tstreams_embedded.engine.storage.core.Core.expired_compactions`), or
    :class:`FireSchedule` records of the due schedules
    (:meth:`~tstreams_embedded.engine.storage.core.Core.due_schedule_firings`). Clients cannot
    submit it; only the cluster's log carries it."""

    ops: tuple[Operation, ...]


def check_maintenance_batch(batch: Any) -> list[Operation]:
    """Validate a :class:`MaintenanceBatch`'s records: :class:`Compact` and
    :class:`FireSchedule` only. Returns a list."""
    if not isinstance(batch, (list, tuple)):
        raise errors.InvalidArgument("a maintenance batch is a list of Compact or FireSchedule records")
    for op in batch:
        if not isinstance(op, (Compact, FireSchedule)):
            raise errors.InvalidArgument(f"a maintenance batch holds Compact and FireSchedule records only, "
                                         f"not {describe(op)}")
    return list(batch)


def describe(op: Any) -> str:
    """A short human-readable form of a record (for logs and errors)."""
    s = _SPECS.get(type(op))
    return f"{s.name}{tuple(op)[:2]}" if s is not None else f"{op!r:.60}"


# --------------------------------------------------------------------------- encoding
def encode(op: Operation) -> list[Any]:
    """``[opcode, *fields]``: the wire and commit-log form of a record."""
    return [_CODES[type(op)], *op]


def decode(row: Any) -> Operation:
    """The record of a ``[opcode, *fields]`` row; :class:`InvalidArgument` if malformed."""
    if type(row) not in (list, tuple) or not row:
        raise errors.InvalidArgument(f"an operation must be a non-empty array, got {row!r:.80}")
    s = spec_of_code(row[0])
    if len(row) == s.width + 1:  # every field present (what encode writes): no default to fill in,
        fast: Operation = _new_tuple(s.record, row[1:])  # so no Python-level __new__
        return fast
    try:
        op: Operation = s.record(*row[1:])
    except TypeError:
        fields = ", ".join(s.record._fields)  # type: ignore[attr-defined]
        raise errors.InvalidArgument(f"{s.name} takes ({fields}), got {len(row) - 1} values") from None
    return op


def decode_all(rows: Any) -> list[Operation]:
    if type(rows) is not list and type(rows) is not tuple:
        raise errors.InvalidArgument("ops must be a list of operations")
    return [decode(r) for r in rows]


_packer = msgpack.Packer(use_bin_type=True)


def pack_items(items: Sequence[bytes]) -> bytes:
    """Pack a batch of ``bytes`` items into one chunk value."""
    chunk: bytes = _packer.pack(list(items))
    return chunk


_log_packer = msgpack.Packer(use_bin_type=True, default=_log_ext)


def pack_batch(now_ms: int, ops: Iterable[Operation]) -> bytes:
    """Encode a resolved batch as one commit-log value (chunk references as msgpack ext 2)."""
    value: bytes = _log_packer.pack([now_ms, [[_CODES[type(op)], *op] for op in ops]])
    return value


def unpack_batch(value: bytes | memoryview) -> tuple[int, list[Operation]]:
    """Decode a commit-log value into ``(now_ms, records)``; chunks stay :class:`ChunkRef`."""
    now_ms, rows = msgpack.unpackb(value, raw=False, strict_map_key=False, ext_hook=_log_ext_hook)
    return now_ms, [decode(r) for r in rows]


#: msgpack ext code of a :class:`GoneChunk` in a self-contained entry (its item count, u32)
EXT_GONE_CHUNK = 3


def _entry_ext(obj: Any) -> Any:
    if type(obj) is GoneChunk:
        return msgpack.ExtType(EXT_GONE_CHUNK, struct.pack(">I", obj.items))
    raise TypeError(f"cannot pack {type(obj).__name__} into a self-contained log entry")


def _entry_ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_GONE_CHUNK:
        return GoneChunk(struct.unpack(">I", data)[0])
    return msgpack.ExtType(code, data)


def pack_entries(entries: Iterable[tuple[int, int, Sequence[Operation]]]) -> bytes:
    """Encode log entries as ``Core.read_log`` returns them (``(seq, now_ms, records)``, with
    chunks as bytes) into one self-contained value: what ``Core.apply_log`` takes back after
    :func:`unpack_entries` (the archive's segments, :mod:`..operator.backup`)."""
    rows = [[seq, now_ms, [[_CODES[type(op)], *op] for op in ops]] for seq, now_ms, ops in entries]
    packed: bytes = msgpack.packb(rows, use_bin_type=True, default=_entry_ext)
    return packed


def unpack_entries(value: bytes) -> list[tuple[int, int, list[Operation]]]:
    """Inverse of :func:`pack_entries`."""
    rows = msgpack.unpackb(value, raw=False, strict_map_key=False, ext_hook=_entry_ext_hook)
    return [(seq, now_ms, [decode(r) for r in ops]) for seq, now_ms, ops in rows]
