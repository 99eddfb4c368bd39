"""Reading an app's streams from outside the streams library: :func:`decode`.

An item written by the DSL (``to()``, ``send_records``, internal streams) is an *envelope*:
the byte ``0xC1`` and the msgpack array ``[key bytes or nil, value bytes or nil, timestamp
(epoch ms, int), headers (map of str to bytes) or nil]`` (:mod:`.records`). The key and
value bytes are what the sink's serdes made of them. A windowed aggregation's result key
(:class:`~.windows.Windowed`) is the msgpack array ``[inner key bytes, start, end]`` (the
inner key by the key serde given to the aggregation, ``start`` and ``end`` epoch ms of the
half-open window ``[start, end)``): ask for it with ``key_serde="windowed(str)"`` (any
serde name in the parentheses) or ``serdes.WindowedSerde(inner)``.

>>> from tstreams_embedded.streams import decode
>>> item = bytes.fromhex("c194c40693c401610a14c401020fc0")  # a count of 2 for "a" in [10, 20), at 15
>>> decode(item, key_serde="windowed(str)", value_serde="msgpack")
Record(key=Windowed(key='a', start=10, end=20), value=2, timestamp=15, headers=None)
"""

from __future__ import annotations

from typing import Any

from .. import errors
from .records import Record, unpack_envelope
from .serdes import SerdeSpec, serde


def decode(item: bytes, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack",
           timestamp: int = 0) -> Record:
    """The :class:`~.records.Record` an item of a stream holds, its key and value decoded by
    ``key_serde`` and ``value_serde`` (as ``key_serde=`` / ``value_serde=`` of the DSL, also
    ``"windowed(<name>)"`` for the key of a windowed result; the defaults are the sinks').

    An item that is not an envelope (written by a plain producer) is a value with key
    ``None`` and the given ``timestamp`` (the DSL uses its transaction's time).
    :class:`~tstreams_embedded.errors.SerdeError` if it is a damaged envelope or its key or
    value is not what the serde reads; InvalidArgument if ``item`` is not bytes."""
    if not isinstance(item, (bytes, bytearray, memoryview)):
        raise errors.InvalidArgument(f"item must be bytes, got {type(item).__name__}")
    item = bytes(item)
    ks, vs = serde(key_serde, "key_serde"), serde(value_serde, "value_serde")
    env = unpack_envelope(item)
    if env is None:
        return Record(None, vs.deserialize(item), timestamp)
    kb, vb, ts, headers = env
    key: Any = None if kb is None else ks.deserialize(kb)
    return Record(key, None if vb is None else vs.deserialize(vb), ts, headers)
