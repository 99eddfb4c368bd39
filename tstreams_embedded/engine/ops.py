"""Operation records: the only way state changes.

An operation is a plain tuple ``(opcode, *args)`` that msgpack can carry. A *batch* of
operations is applied in exactly one (nested) LMDB write transaction and appended to the
commit log in that same transaction; it either applies completely or not at all.

Before an operation is logged, the engine *resolves* it: values that depend on the clock
or on stored state (a new transaction ID, a keep-alive deadline) are written into the
record. Replaying a logged batch on a replica therefore gives the same state.

Item payloads travel as ``chunk``: one msgpack array of ``bytes`` items, packed once by the
producer and stored as one LMDB value (see :func:`pack_items`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

# opcode                      args
CREATE_STREAM = 1  # name, partitions, ttl_seconds, description -> stream info dict
DELETE_STREAM = 2  # name -> None
OPEN = 3  # stream, partition, ttl_ms, txn_id|None(resolved), deadline|None(resolved), chunk|None -> txn_id
DATA = 4  # stream, partition, txn_id, chunk -> number of items stored so far
CHECKPOINT = 5  # stream, partition, txn_id, chunk|None -> number of items in the transaction
CANCEL = 6  # stream, partition, txn_id -> None
INSTANT = 7  # stream, partition, chunk, txn_id|None(resolved) -> txn_id
KEEPALIVE = 8  # [(stream, partition, txn_id), ...], ttl_ms, deadline|None(resolved) -> n still open
INVALIDATE = 9  # stream, partition, txn_id -> True if it was open and expired, else False
SET_OFFSETS = 10  # stream, consumer, {partition: txn_id} -> None
COMPACT = 11  # stream, partition, before_txn_id -> number of transactions removed
SET_MARKER = 12  # key, value, guard(bool) -> None; guard: fail with MarkerConflict if stored >= value
CANCEL_IF_OPEN = 13  # stream, partition, txn_id -> True if it was open (no error when already resolved)

OP_NAMES = {
    v: k
    for k, v in dict(globals()).items()
    if k.isupper() and isinstance(v, int) and not k.startswith("_") and k != "OP_NAMES"
}

# Transaction states (T-streams numbering where it has one).
OPENED = 1
CANCELLED = 3
INVALID = 4
CHECKPOINTED = 5

_packer = msgpack.Packer(use_bin_type=True)


def pack_items(items: Sequence[bytes]) -> bytes:
    """Pack a batch of ``bytes`` items into one chunk value."""
    return _packer.pack(list(items))


def unpack_items(chunk: bytes) -> list[bytes]:
    """Inverse of :func:`pack_items`."""
    return msgpack.unpackb(chunk, raw=False)


def pack_batch(now_ms: int, ops: Sequence[tuple]) -> bytes:
    """Encode a resolved batch as one commit-log value."""
    return msgpack.packb([now_ms, list(ops)], use_bin_type=True)


def unpack_batch(value: bytes) -> tuple[int, list[tuple]]:
    """Decode a commit-log value into ``(now_ms, ops)``."""
    now_ms, ops = msgpack.unpackb(value, raw=False, strict_map_key=False)
    return now_ms, [tuple(op) for op in ops]


def describe(op: Sequence[Any]) -> str:
    """A short human-readable form of an operation (for logs and errors)."""
    return f"{OP_NAMES.get(op[0], op[0])}{tuple(op[1:3])}"
