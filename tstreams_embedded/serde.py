"""Item serializers. Items are stored as bytes; a serializer maps user values to bytes and back.

``None`` means raw bytes; ``"str"`` (UTF-8), ``"json"`` (compact UTF-8 JSON), ``"msgpack"``, or
a ``(dumps, loads)`` pair of callables.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgpack

from .errors import InvalidArgument

Serde = tuple[Callable[[Any], bytes], Callable[[bytes], Any]]


def _raw_dumps(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgument(
        f"items must be bytes (got {type(value).__name__}); pass serializer='str', 'json' or 'msgpack'"
    )


def _raw_loads(data: bytes) -> bytes:
    return data


def _str_dumps(value: Any) -> bytes:
    if not isinstance(value, str):
        raise InvalidArgument(f"serializer 'str' needs str items, got {type(value).__name__}")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate has no UTF-8 form
        raise InvalidArgument(f"item is not valid Unicode text ({exc.reason} at index {exc.start}: "
                              f"{value[exc.start:exc.end]!r}); serializer 'str' writes UTF-8") from None


def _json_dumps(value: Any) -> bytes:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"item is not JSON-serializable: {exc}") from None


def _msgpack_dumps(value: Any) -> bytes:
    try:
        return msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(f"item is not msgpack-serializable: {exc}") from None


def _msgpack_loads(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False)


_NAMED: dict[str, Serde] = {
    "str": (_str_dumps, lambda b: b.decode("utf-8")),
    "json": (_json_dumps, json.loads),
    "msgpack": (_msgpack_dumps, _msgpack_loads),
}
RAW: Serde = (_raw_dumps, _raw_loads)


def resolve(spec: Any) -> Serde:
    """Turn a serializer spec into a ``(dumps, loads)`` pair, or raise :class:`InvalidArgument`."""
    if spec is None or spec == "bytes":
        return RAW
    if isinstance(spec, str):
        if spec in _NAMED:
            return _NAMED[spec]
        raise InvalidArgument(f"unknown serializer {spec!r}; use 'str', 'json', 'msgpack' or (dumps, loads)")
    if isinstance(spec, tuple) and len(spec) == 2 and all(callable(f) for f in spec):
        dumps, loads = spec

        def checked_dumps(value: Any) -> bytes:
            return _raw_dumps(dumps(value))

        return checked_dumps, loads
    raise InvalidArgument(f"serializer must be a name or a (dumps, loads) pair, got {spec!r}")
