"""Stream metadata as stored in the ``streams`` database (name -> sealed msgpack record,
see :mod:`.seals`)."""

from __future__ import annotations

from typing import Any

import lmdb
import msgpack

from ... import errors
from ..protocol.backend import StreamInfo
from ..protocol.validate import utf8
from .store import Store


def encode_stream(info: StreamInfo) -> bytes:
    raw: bytes = msgpack.packb([info.id, info.partitions, info.ttl, info.description, info.created])
    return raw


def decode_stream(name: str, raw: bytes | memoryview) -> StreamInfo:
    sid, partitions, ttl, description, created = msgpack.unpackb(raw)
    return StreamInfo(name, sid, partitions, ttl, description, created)


def stream_of(store: Store, key: bytes, raw: bytes) -> StreamInfo:
    """The stream stored under ``key`` with the value ``raw`` (a ``streams`` cursor entry),
    its seal verified."""
    return decode_stream(bytes(key).decode("utf-8"), store.unseal("streams", key, raw))


def lookup_stream(txn: lmdb.Transaction, store: Store, name: Any) -> StreamInfo:
    """The stream ``name`` in snapshot ``txn``, or :class:`StreamNotFound`."""
    if not isinstance(name, str):
        raise errors.InvalidArgument(f"stream name must be a string, got {type(name).__name__}")
    raw = store.get(txn, "streams", utf8(name, "stream name")) if name else None
    if raw is None:
        raise errors.StreamNotFound(f"stream {name!r} does not exist")
    return decode_stream(name, raw)
