"""Sealed values: the checksum every stored value but a chunk carries.

Every value of ``streams``, ``parts``, ``txns``, ``offsets``, ``markers``, ``log``, ``state``
(state-store entries and leases) and ``meta`` (but ``directory_id`` and ``format``, which
are read before the format is known and checked otherwise, see :mod:`.directory`) is
stored *sealed*::

    payload | crc32c(key | payload) u32 little-endian

The checksum covers the key too, so a flipped bit in a key (an entry moved to another key)
is found like a flipped bit in a value. The payload comes first, so fixed-size records
(:data:`.keys.STATE`, ``u64``) decode in place from the stored value. Every read verifies
the seal (:func:`unseal`); a mismatch raises :class:`~tstreams_embedded.errors.DataCorrupted`
naming the database and the entry. ``tstreams check`` verifies every seal.

Verifying is one CRC over key and *stored* value: a CRC-32C appended little-endian to what
it covers makes the CRC of the whole the constant :data:`RESIDUE`, so no slicing and no
decoding of the stored checksum is needed (hot read loops inline this test).

Chunks (``data``) carry their own checksum (:mod:`.chunks`). Directories written before
sealed values (``meta`` ``format`` below :data:`.directory.DATA_FORMAT`) are sealed in place
when opened for writing (:func:`.directory.upgrade_values`); a read-only open of one reads
its values unsealed (:func:`unsealed`).
"""

from __future__ import annotations

import struct
from typing import Protocol

from crc32c import crc32c

from ...errors import DataCorrupted

SEAL_LEN = 4
#: crc32c(key | stored value) of every correctly sealed value
RESIDUE = 0x48674BC7
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class Unseal(Protocol):
    """``unseal(db, key, stored)``: the verified payload of a stored value (see :func:`unseal`)."""

    def __call__(self, db: str, key: bytes, raw: bytes) -> bytes: ...


def seal(key: bytes, payload: bytes) -> bytes:
    """The stored form of ``payload`` under ``key``."""
    return payload + crc32c(payload, crc32c(key)).to_bytes(SEAL_LEN, "little")


def unseal(db: str, key: bytes, raw: bytes) -> bytes:
    """The verified payload of the value ``raw`` stored under ``key`` in database ``db``;
    :class:`DataCorrupted` naming the entry if its checksum does not match."""
    if crc32c(raw, crc32c(key)) == RESIDUE and len(raw) >= SEAL_LEN:
        return raw[:-SEAL_LEN]
    raise damaged(db, key, raw)


def unsealed(db: str, key: bytes, raw: bytes) -> bytes:
    """The :class:`Unseal` of a directory whose values are not sealed yet (read-only opens of
    directories written before sealed values): the value as stored."""
    return raw


def is_sealed(key: bytes, raw: bytes) -> bool:
    """Whether ``raw`` is a correctly sealed value of ``key``."""
    return len(raw) >= SEAL_LEN and crc32c(raw, crc32c(key)) == RESIDUE


def damaged(db: str, key: bytes, raw: bytes) -> DataCorrupted:
    """The error for a value of ``db`` under ``key`` whose seal does not match."""
    partition, txn_id = locate(db, key)
    return DataCorrupted(
        f"the {describe(db, key)} is damaged (checksum mismatch in the {db!r} database, value of {len(raw)} "
        "bytes); nothing was read from it. Run `tstreams check --data DIR` for a full report and restore the "
        "directory from a backup",
        partition=partition, txn_id=txn_id,
    )


def describe(db: str, key: bytes) -> str:
    """What the entry ``key`` of ``db`` is, for messages (stream ids, not names: the
    catalog may itself be damaged)."""
    try:
        if db == "txns" and len(key) == 20:
            sid, part, tid = struct.unpack(">QIQ", key)
            return f"transaction record of stream #{sid} partition {part} transaction {tid}"
        if db == "parts" and len(key) == 12:
            sid, part = struct.unpack(">QI", key)
            return f"last allocated transaction ID of stream #{sid} partition {part}"
        if db == "offsets" and len(key) >= 13:
            sid = _U64.unpack_from(key)[0]
            consumer = key[8:-5].decode("utf-8", "replace")
            part = _U32.unpack_from(key, len(key) - 4)[0]
            return f"offset of consumer {consumer!r} on stream #{sid} partition {part}"
        if db == "log" and len(key) == 8:
            return f"commit-log entry {_U64.unpack(key)[0]}"
        if db == "streams":
            return f"catalog record of stream {key.decode('utf-8', 'replace')!r}"
        if db == "markers":
            return f"marker {key.decode('utf-8', 'replace')!r}"
        if db == "meta":
            return f"engine counter {key.decode('ascii', 'replace')!r}"
        if db == "state":
            store, _, user_key = bytes(key).partition(b"\x00")
            return f"entry {user_key[:40]!r} of state store {store.decode('utf-8', 'replace')!r}"
        if db == "queues" and len(key) > 10:
            sid = _U64.unpack_from(key, 1)[0]
            group = key[9:].partition(b"\x00")[0].decode("utf-8", "replace")
            kinds = {b"g": "settings", b"c": "cursor", b"e": "unsettled item", b"d": "redelivery index entry"}
            return f"{kinds.get(key[:1], 'entry')} of work queue group {group!r} on stream #{sid}"
    except (struct.error, ValueError):
        pass
    return f"entry {bytes(key[:40]).hex()} of {db!r}"


def locate(db: str, key: bytes) -> tuple[int | None, int | None]:
    """``(partition, txn_id)`` of a damaged transaction record (None elsewhere), for
    :class:`DataCorrupted`'s attributes."""
    if db == "txns" and len(key) == 20:
        _, part, tid = struct.unpack(">QIQ", key)
        return part, tid
    return None, None
