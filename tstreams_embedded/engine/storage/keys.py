"""Key layout of the LMDB named databases.

All integers are big-endian so that LMDB's byte order equals numeric order:

* ``meta``: ASCII name (``next_stream_id``, ``log_seq``, ``format``) -> u64; ``directory_id`` -> hex id
  (:mod:`.directory`)
* ``streams``: stream name (UTF-8) -> msgpack ``[id, partitions, ttl, description, created_ms]``
* ``parts``: stream id u64 | partition u32 -> last allocated txn id u64
* ``txns``: stream id u64 | partition u32 | txn id u64 -> :data:`STATE` record (+ the producer's
  name while open, if known)
* ``data``: stream id u64 | partition u32 | txn id u64 | chunk u32 -> sealed msgpack array of ``bytes``
  items (checksum prefix, :mod:`.chunks`)
* ``offsets``: stream id u64 | consumer name (UTF-8) | 0x00 | partition u32 -> txn id u64
* ``markers``: marker name (UTF-8) -> i64
* ``log``: sequence number u64 -> msgpack ``[now_ms, [resolved ops]]``

Every value above but a chunk and ``meta``'s ``directory_id`` and ``format`` is stored
*sealed*, followed by a CRC32C of key and value (:mod:`.seals`): read them through
``Store.get`` / ``Store.unseal`` and write them through ``Store.put``.

A stream costs one ``streams`` key plus a few keys per partition that holds data: no file
and no database per stream, so millions of streams cost only keys.
"""

from __future__ import annotations

import struct

U64 = struct.Struct(">Q")
I64 = struct.Struct(">q")
_PART = struct.Struct(">QI")
_TXN = struct.Struct(">QIQ")
_CHUNK = struct.Struct(">QIQI")
_U32 = struct.Struct(">I")

# Transaction state record: state u8, time_ms i64, chunks u32, items u32. time_ms is the deadline
# of an open transaction and the time a checkpointed one was checkpointed (engine clock, epoch
# ms; 0 in records written before it was kept: unknown). See inspection.first_open_at. An open
# transaction's record may be followed by its producer's name (UTF-8, Open.producer; absent in
# records written before it was kept, or when not given): read the fixed part with
# STATE.unpack_from, the name with producer_of. A finished transaction's record has no name.
STATE = struct.Struct("<BqII")
STATE_LEN = STATE.size


def producer_of(record: bytes | memoryview) -> str | None:
    """The producer name stored after a transaction state record, or None if there is none."""
    return bytes(record[STATE_LEN:]).decode("utf-8", "replace") if len(record) > STATE_LEN else None

PART_LEN = _PART.size
TXN_LEN = _TXN.size


def stream_prefix(stream_id: int) -> bytes:
    return U64.pack(stream_id)


def part_key(stream_id: int, partition: int) -> bytes:
    return _PART.pack(stream_id, partition)


def txn_key(stream_id: int, partition: int, txn_id: int) -> bytes:
    return _TXN.pack(stream_id, partition, txn_id)


def txn_id_of(key: bytes) -> int:
    txn_id: int = U64.unpack_from(key, PART_LEN)[0]
    return txn_id


def chunk_key(stream_id: int, partition: int, txn_id: int, chunk: int) -> bytes:
    return _CHUNK.pack(stream_id, partition, txn_id, chunk)


def offsets_prefix(stream_id: int, consumer: str) -> bytes:
    return U64.pack(stream_id) + consumer.encode("utf-8") + b"\x00"


def offset_key(stream_id: int, consumer: str, partition: int) -> bytes:
    return offsets_prefix(stream_id, consumer) + _U32.pack(partition)


def partition_of_offset_key(key: bytes) -> int:
    partition: int = _U32.unpack_from(key, len(key) - 4)[0]
    return partition
