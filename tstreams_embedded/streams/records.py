"""Records, the envelope that stores them in a stream, and the key partitioner.

A record is ``(key, value, timestamp)`` with optional headers. Streams written by the DSL
hold one *envelope* per item: the byte ``0xC1`` followed by the msgpack array
``[key bytes or nil, value bytes or nil, timestamp ms, headers map or nil]``. ``0xC1`` is the
one byte msgpack never uses, and no UTF-8 text (so no JSON) starts with it, so an item is
read as an envelope exactly when it starts with it; any other item is an opaque value with
key ``None`` and its transaction's timestamp.

Records with a key go to partition ``crc32c(key bytes) % partitions`` (CRC-32C, the
Castagnoli polynomial, from the ``crc32c`` package: hardware-accelerated and stable across
processes and versions, unlike Python's ``hash``). Records without a key stay in the
partition of the task that writes them (modulo the stream's partitions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import crc32c
import msgpack

from .. import errors

#: the valid record timestamps (epoch ms): those of the years 1 to 9999, the range of
#: ``datetime`` (so calendar windows can place every one) and far inside 64-bit window keys
MIN_TIMESTAMP = -62_135_596_800_000
MAX_TIMESTAMP = 253_402_300_799_999

ENVELOPE_MARK = 0xC1
_MARK = bytes([ENVELOPE_MARK])
_packer = msgpack.Packer(use_bin_type=True)


@dataclass(slots=True)
class Record:
    """One record: ``key``, ``value``, ``timestamp`` (event time, epoch ms) and ``headers``."""

    key: Any
    value: Any
    timestamp: int
    headers: dict[str, bytes] | None = field(default=None)

    def with_(self, key: Any = ..., value: Any = ..., timestamp: Any = ...) -> Record:
        """A copy with the given fields replaced."""
        return Record(self.key if key is ... else key, self.value if value is ... else value,
                      self.timestamp if timestamp is ... else timestamp, self.headers)


def check_timestamp(ts: Any, what: str) -> int:
    """``ts`` if it is a valid record timestamp (an int in ``[MIN_TIMESTAMP, MAX_TIMESTAMP]``);
    InvalidArgument naming ``what`` otherwise."""
    if isinstance(ts, bool) or not isinstance(ts, int):
        raise errors.InvalidArgument(f"{what} must be epoch ms as an int, got {ts!r:.40}")
    if not MIN_TIMESTAMP <= ts <= MAX_TIMESTAMP:
        raise errors.InvalidArgument(f"{what} is {ts}, outside the valid timestamps [{MIN_TIMESTAMP}, "
                                     f"{MAX_TIMESTAMP}] (the years 1 to 9999)")
    return ts


def check_headers(headers: Any) -> dict[str, bytes] | None:
    """``headers`` of a record: None or a dict of str names to bytes values (the envelope's
    shape); InvalidArgument otherwise."""
    if headers is None:
        return None
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, bytes) for k, v in headers.items()):
        raise errors.InvalidArgument(f"headers must be a dict of str names to bytes values, got {headers!r:.80}")
    return headers


def pack_envelope(key: bytes | None, value: bytes | None, timestamp: int, headers: dict[str, bytes] | None) -> bytes:
    data: bytes = _packer.pack([key, value, timestamp, headers])
    return _MARK + data


def unpack_envelope(item: bytes) -> tuple[bytes | None, bytes | None, int, dict[str, bytes] | None] | None:
    """The fields of an envelope item, or None if ``item`` is not one. SerdeError if it is a
    damaged one: not a msgpack array of four, or a field of the wrong type (a key or value
    that is not bytes or nil, a timestamp that is not an int, headers that are not a map of
    str to bytes): bad data, under the app's record-error policy."""
    if not item or item[0] != ENVELOPE_MARK:
        return None
    try:
        key, value, ts, headers = msgpack.unpackb(memoryview(item)[1:], raw=False, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 - a damaged envelope is bad data
        raise errors.SerdeError(f"damaged record envelope {item[:40]!r}: {exc}") from None
    if not ((key is None or type(key) is bytes) and (value is None or type(value) is bytes)
            and type(ts) is int and (headers is None or _header_map(headers))):
        raise errors.SerdeError(
            f"damaged record envelope {item[:40]!r}: its fields must be [key bytes or nil, value bytes or nil, "
            f"timestamp int, headers map of str to bytes or nil], got [{_kind(key)}, {_kind(value)}, {_kind(ts)}, "
            f"{_kind(headers)}]")
    return key, value, ts, headers


def _header_map(headers: Any) -> bool:
    return type(headers) is dict and all(type(k) is str and type(v) is bytes for k, v in headers.items())


def _kind(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


def partition_of(key: bytes, partitions: int) -> int:
    """The partition of a record with key bytes ``key`` (CRC-32C modulo ``partitions``)."""
    return int(crc32c.crc32c(key)) % partitions
