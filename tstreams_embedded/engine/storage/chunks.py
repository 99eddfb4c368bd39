"""Checksummed data chunks: the value format of the ``data`` database.

A chunk (one flushed batch of items) travels and is logged as a msgpack array of ``bytes``
(:func:`..protocol.ops.pack_items`). It is *stored* in ``data`` sealed with a CRC32C checksum::

    0xC1 | crc32c(payload) u32 big-endian | payload (the msgpack array)

Compatibility rule: ``0xC1`` is the one byte msgpack never uses, and a msgpack array starts
with ``0x90``-``0x9F``, ``0xDC`` or ``0xDD``. So a value starting with ``0xC1`` is a sealed
chunk (verified on every read), and a value starting with an array marker is an unsealed
chunk written before checksums existed (read as before: decoded, not verified). Unsealed
chunks are accepted only in directories created before checksums (whose ``meta`` has no
``format`` key, see :mod:`.directory`); in a directory created with checksums any unsealed
value is damage. Anything else is damage.

The commit log keeps the unsealed payload (what operations carry); only the stored value
is sealed, so this module is the only place that knows the format.
"""

from __future__ import annotations

import struct

import msgpack
from crc32c import crc32c

from ...errors import DataCorrupted

TAG = 0xC1
_HEAD = struct.Struct(">BI")
_CRC = struct.Struct(">I")
HEAD_LEN = _HEAD.size
_ARRAY_MARKERS = frozenset([*range(0x90, 0xA0), 0xDC, 0xDD])


def seal(payload: bytes) -> bytes:
    """The stored form of a chunk payload (checksum prefix + payload)."""
    return _HEAD.pack(TAG, crc32c(payload)) + payload


def payload_of(raw: bytes, legacy: bool) -> memoryview | bytes:
    """The verified payload of a stored chunk; :class:`DataCorrupted` (without a location)
    if the checksum does not match or the value is not a chunk. ``legacy`` accepts
    unsealed chunks (directories created before checksums)."""
    if raw and raw[0] == TAG:
        if len(raw) < HEAD_LEN:
            raise DataCorrupted(f"chunk value truncated to {len(raw)} bytes")
        body = memoryview(raw)[HEAD_LEN:]
        want = _CRC.unpack_from(raw, 1)[0]
        got = crc32c(body)
        if got != want:
            raise DataCorrupted(f"chunk checksum mismatch (stored {want:#010x}, computed {got:#010x})")
        return body
    if legacy and raw and raw[0] in _ARRAY_MARKERS:
        return raw
    kind = "unsealed chunk in a directory created with checksums" if raw and raw[0] in _ARRAY_MARKERS \
        else "value is not a chunk"
    raise DataCorrupted(f"{kind} (first byte {raw[:1].hex() or 'none'}, {len(raw)} bytes)")


def items_of(raw: bytes, legacy: bool) -> list[bytes]:
    """The items of a stored chunk, verified (see :func:`payload_of`)."""
    if len(raw) >= HEAD_LEN and raw[0] == TAG:  # the hot path, inlined
        body = memoryview(raw)[HEAD_LEN:]
        if crc32c(body) == _CRC.unpack_from(raw, 1)[0]:
            try:  # a sealed payload is what the applier validated
                items: list[bytes] = msgpack.unpackb(body)
                if type(items) is list:
                    return items
            except Exception:  # noqa: BLE001 - reported by _decode
                pass
            return _decode(body, False)  # raises the clear error
    # a legacy unsealed chunk is read as before checksums: decoded, not verified
    return _decode(payload_of(raw, legacy), False)


def _decode(body: memoryview | bytes, full: bool) -> list[bytes]:
    """Decode a chunk payload; ``full`` also checks that every item is ``bytes``."""
    try:
        items = msgpack.unpackb(body)
    except Exception as exc:  # noqa: BLE001 - any decoding failure of stored data is damage
        raise DataCorrupted(f"chunk does not decode: {type(exc).__name__}: {exc}") from None
    if type(items) is not list or (full and not all(type(i) is bytes for i in items)):
        raise DataCorrupted("chunk is not an array of bytes items")
    return items


def verify(raw: bytes, legacy: bool) -> int:
    """Check a stored chunk completely (checksum, encoding, every item ``bytes``) and return
    its item count; for ``tstreams check``."""
    return len(_decode(payload_of(raw, legacy), True))
