"""Argument validation and limits, shared by the public API and storage.

This module imports no storage code: the facade (``Engine``, ``Producer``, ``Consumer``,
``Batch``) validates arguments with it before anything is sent, and the applier
(:mod:`..storage.apply`) validates the same way when it applies a record, because records may also
arrive over the wire or from a replica. Every check raises a specific error from
:mod:`tstreams_embedded.errors` with a message naming the argument.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack

from ... import errors
from .backend import StreamInfo

MAX_NAME_BYTES = 255
#: the longest producer name (:func:`check_producer_name`), in UTF-8 bytes
MAX_PRODUCER_BYTES = 200
MAX_PARTITIONS = 1_000_000
MAX_TXN_TTL_MS = 7 * 24 * 3600 * 1000
MAX_STREAM_TTL = 100 * 365 * 24 * 3600
MAX_DESCRIPTION = 4096
MAX_ID = 2**63 - 1
MAX_INTERVAL = 365 * 86400.0
#: the most transactions one read returns (``fetch``, ``scan_index``, a consumer's ``prefetch``)
MAX_FETCH = 1 << 20


def check_name(value: Any, what: str = "stream name") -> str:
    """A non-empty string of at most :data:`MAX_NAME_BYTES` UTF-8 bytes without NUL."""
    if not isinstance(value, str) or not value:
        raise errors.InvalidArgument(f"{what} must be a non-empty string, got {value!r}")
    if "\x00" in value or len(utf8(value, what)) > MAX_NAME_BYTES:
        raise errors.InvalidArgument(f"{what} must be at most {MAX_NAME_BYTES} UTF-8 bytes without NUL")
    return value


def check_producer_name(value: Any) -> bytes:
    """A producer's name (recorded with the transactions it opens, for display only) as
    UTF-8: a non-empty string of at most :data:`MAX_PRODUCER_BYTES` bytes without control
    characters."""
    if not isinstance(value, str) or not value:
        raise errors.InvalidArgument(f"producer name must be a non-empty string, got {value!r:.80}")
    raw = utf8(value, "producer name")
    if len(raw) > MAX_PRODUCER_BYTES:
        raise errors.InvalidArgument(f"producer name must be at most {MAX_PRODUCER_BYTES} UTF-8 bytes, "
                                     f"got {len(raw)}: {value!r:.80}")
    if not value.isprintable():
        raise errors.InvalidArgument(f"producer name must be printable text (no control characters), "
                                     f"got {value!r:.80}")
    return raw


def utf8(value: str, what: str = "name") -> bytes:
    """``value`` encoded as UTF-8; InvalidArgument for a lone surrogate (not valid Unicode text)."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise errors.InvalidArgument(f"{what} is not valid Unicode text ({exc.reason} at {exc.start}): {value!r}"
                                     ) from None


def check_int(value: Any, what: str, lo: int, hi: int) -> int:
    """An ``int`` (not a ``bool``) in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.InvalidArgument(f"{what} must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise errors.InvalidArgument(f"{what} must be in [{lo}, {hi}], got {value}")
    return value


def check_interval(value: Any, what: str, allow_none: bool = False) -> float | None:
    """A period in seconds: a finite number in ``(0, MAX_INTERVAL]`` (or None if allowed)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= MAX_INTERVAL:
        choices = "None or " if allow_none else ""
        raise errors.InvalidArgument(
            f"{what} must be {choices}a finite number of seconds in (0, {MAX_INTERVAL:.0f}], got {value!r}"
        )
    return float(value)


def check_wait(seen: Any, timeout: Any) -> float:
    """The arguments of ``wait_for_commit``: ``seen`` an integer (a commit-log sequence, or
    -1), ``timeout`` a finite number of seconds in ``[0, MAX_INTERVAL]``; the timeout as a
    float."""
    if isinstance(seen, bool) or not isinstance(seen, int):
        raise errors.InvalidArgument(f"seen must be an integer, got {type(seen).__name__}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or not 0 <= timeout <= MAX_INTERVAL:
        raise errors.InvalidArgument(
            f"timeout must be a finite number of seconds in [0, {MAX_INTERVAL:.0f}], got {timeout!r}")
    return float(timeout)


def check_txn_id(value: Any, what: str = "transaction id") -> int:
    return check_int(value, what, 0, MAX_ID)


def check_stream_shape(partitions: Any, ttl: Any, description: Any = "") -> None:
    """The arguments of a stream creation (besides its name)."""
    check_int(partitions, "partitions", 1, MAX_PARTITIONS)
    check_int(ttl, "ttl (seconds)", 1, MAX_STREAM_TTL)
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise errors.InvalidArgument(f"description must be a string of at most {MAX_DESCRIPTION} characters")


def check_txn_ttl_ms(value: Any) -> int:
    return check_int(value, "transaction ttl (ms)", 1, MAX_TXN_TTL_MS)


def txn_ttl_ms(seconds: Any) -> int:
    """A transaction TTL given in seconds (a number in [0.001, 604800]) as milliseconds."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0.001 <= seconds <= 7 * 86400:
        raise errors.InvalidArgument(f"txn_ttl must be a number of seconds in [0.001, 604800], got {seconds!r}")
    return int(seconds * 1000)


def check_partition(info: StreamInfo, partition: Any) -> int:
    """A partition number of the stream ``info``."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise errors.InvalidArgument(f"partition must be an integer, got {type(partition).__name__}")
    if not 0 <= partition < info.partitions:
        raise errors.PartitionOutOfRange(
            f"partition {partition} is out of range for stream {info.name!r} with {info.partitions} partitions"
        )
    return partition


def chunk_count(chunk: Any, max_item_size: int) -> int:
    """Validate a packed chunk of items and return how many it holds."""
    if not isinstance(chunk, (bytes, bytearray, memoryview)):
        raise errors.InvalidArgument(f"items chunk must be bytes, got {type(chunk).__name__}")
    try:
        items = msgpack.unpackb(chunk)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is bad input
        raise errors.InvalidArgument(f"items chunk is not a msgpack array: {exc}") from None
    if not isinstance(items, list):
        raise errors.InvalidArgument("items chunk must be a msgpack array of binary items")
    if len(items) == 1:  # (the common case, checked without building a set)
        if type(items[0]) is not bytes:
            raise errors.InvalidArgument(f"items must be bytes, got {type(items[0]).__name__}")
    elif items:
        kinds = set(map(type, items))
        if kinds != {bytes}:
            bad = next(k for k in kinds if k is not bytes)
            raise errors.InvalidArgument(f"items must be bytes, got {bad.__name__}")
    if len(chunk) > max_item_size and items:  # (no item can be larger than its chunk)
        biggest = max(map(len, items))
        if biggest > max_item_size:
            raise errors.ItemTooLarge(f"item of {biggest} bytes exceeds max_item_size={max_item_size}")
    return len(items)
