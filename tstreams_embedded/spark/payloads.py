"""Chunk payloads (msgpack arrays of ``bytes`` items) decoded for Arrow, without a Python
object per item where the layout allows it.

A stored chunk's payload is ``array header | (bin header | item bytes) × n``
(:func:`tstreams_embedded.engine.protocol.ops.pack_items`). When every item of a chunk has the same
length (fixed-size records, which msgpack encodes with identical headers), the items sit at
a fixed stride: :func:`fixed_items` proves that layout with vectorised comparisons and
returns the items as an ``n × length`` view, which the batch builder copies straight into
the Arrow data buffer. Any other chunk is decoded by msgpack (:func:`item_list`).

Why the layout proof is exact: if the record at ``start + k × stride`` starts with the same
bin header as record 0 for every ``k < n`` and the payload ends at ``start + n × stride``,
a sequential msgpack decode reads exactly these ``n`` items (by induction on ``k``) and
nothing after them, so both paths yield the same items.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import numpy as np

from ..errors import DataCorrupted

#: Below this many items the vectorised check costs more than msgpack's decode.
MIN_FIXED_ITEMS = 16

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")

#: bin marker byte -> (item header length, length field decoder; None: the byte after the marker)
_BIN_HEADS: dict[int, tuple[int, struct.Struct | None]] = {0xC4: (2, None), 0xC5: (3, _U16), 0xC6: (5, _U32)}


def _array_header(payload: Any) -> tuple[int, int] | None:
    """``(item count, header length)`` of a msgpack array at the start of ``payload``."""
    if not len(payload):
        return None
    b0 = payload[0]
    if 0x90 <= b0 <= 0x9F:
        return b0 & 0x0F, 1
    if b0 == 0xDC and len(payload) >= 3:
        return int(_U16.unpack_from(payload, 1)[0]), 3
    if b0 == 0xDD and len(payload) >= 5:
        return int(_U32.unpack_from(payload, 1)[0]), 5
    return None


def fixed_items(payload: Any) -> np.ndarray | None:
    """The items of ``payload`` as an ``n × length`` uint8 view when they all have the same
    length (see the module docstring), else ``None``. The view shares ``payload``'s memory."""
    head = _array_header(payload)
    if head is None:
        return None
    n, start = head
    if n < MIN_FIXED_ITEMS or len(payload) <= start:
        return None
    bin_head = _BIN_HEADS.get(payload[start])
    if bin_head is None:
        return None
    item_head, unpacker = bin_head
    if len(payload) < start + item_head:
        return None
    length = payload[start + 1] if unpacker is None else int(unpacker.unpack_from(payload, start + 1)[0])
    stride = item_head + length
    if start + n * stride != len(payload):
        return None
    view = memoryview(payload)
    end = start + n * stride
    for j in range(start, start + item_head):  # byte j of every item header, one strided slice each
        if view[j:end:stride] != view[j:j + 1].tobytes() * n:
            return None
    records = np.frombuffer(payload, np.uint8, count=n * stride, offset=start).reshape(n, stride)
    return records[:, item_head:]


def item_list(payload: Any) -> list[bytes]:
    """The items of ``payload`` decoded by msgpack (:class:`DataCorrupted` if it is not an
    array of ``bytes``; the caller adds the transaction's location)."""
    try:
        items = msgpack.unpackb(payload)
    except Exception as exc:  # noqa: BLE001 - any decoding failure of stored data is damage
        raise DataCorrupted(f"chunk does not decode: {type(exc).__name__}: {exc}") from None
    if type(items) is not list:
        raise DataCorrupted("chunk is not an array of bytes items")
    return items
