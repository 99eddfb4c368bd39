"""Decoding a whole input transaction at once for the task's batched record path
(:func:`decode_batch`).

The records come out exactly as the task's record-by-record decoding makes them (an
envelope's key, value, timestamp and headers, or a plain item as a value with key None and
the transaction's time; then the source's timestamp extractor). Plain JSON items are parsed
with ``orjson`` (the JSON serde's parser) in one loop. When any record of the transaction is
bad data (a damaged envelope, a key or value its serde cannot read, a bad timestamp, one
stamped past ``latest``), the answer is None and the task decodes the transaction record by
record instead, so the record-error policy sees each bad record exactly as before.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

from .. import errors
from ..engine.protocol.backend import TxnData
from ..ids import ID_MULTIPLIER
from .nodes import SourceNode
from .records import ENVELOPE_MARK, MAX_TIMESTAMP, MIN_TIMESTAMP, Record, unpack_envelope
from .serdes import JSON_LIBRARY, JsonSerde

if JSON_LIBRARY == "orjson":  # pragma: no branch - depends on the installation
    import orjson

    _fast_json_loads: Any = orjson.loads
else:  # pragma: no cover
    _fast_json_loads = None


def decode_batch(node: SourceNode, txn: TxnData, latest: int) -> list[Record] | None:
    """The records of ``txn`` read by source ``node``, none stamped past ``latest``; None if
    one of them is bad data (see the module docstring)."""
    items = txn.items
    txn_ts = txn.id // ID_MULTIPLIER
    vs, ks, extract = node.value_serde, node.key_serde, node.extract
    try:
        values = _values(vs, items)  # (None when an item is an envelope: 0xC1 starts no JSON)
        if values is not None:  # plain items: values only
            n = len(values)
            if extract is None:
                if txn_ts > latest:
                    return None
                return list(map(Record, repeat(None, n), values, repeat(txn_ts, n)))
            stamps = list(map(extract, repeat(None, n), values))
            if set(map(type, stamps)) != {int} or min(stamps) < MIN_TIMESTAMP or \
                    max(stamps) > min(MAX_TIMESTAMP, latest):
                return None
            return list(map(Record, repeat(None, n), values, stamps))
        if not any(item[:1] == b"\xc1" for item in items):
            return None  # plain items, one of which the serde cannot read
        out = []
        for item in items:
            if item and item[0] == ENVELOPE_MARK:
                env = unpack_envelope(item)
                assert env is not None
                kb, vb, ts, headers = env
                key = None if kb is None else ks.deserialize(kb)
                value = None if vb is None else vs.deserialize(vb)
            else:
                key, value, ts, headers = None, vs.deserialize(item), txn_ts, None
            if extract is not None:
                ts = extract(key, value)
            if type(ts) is not int or not MIN_TIMESTAMP <= ts <= MAX_TIMESTAMP or ts > latest:
                return None
            out.append(Record(key, value, ts, headers))
        return out
    except (errors.SerdeError, errors.InvalidArgument):
        return None


def _values(vs: Any, items: list[bytes]) -> list[Any] | None:
    """The values of ``items`` if they are all plain items that ``vs`` reads, else None (an
    envelope among them, or bad data)."""
    if type(vs) is JsonSerde and _fast_json_loads is not None:
        try:  # one C loop; an envelope fails it (0xC1 is not UTF-8), and so does bad JSON
            return list(map(_fast_json_loads, items))
        except ValueError:
            return None
    if any(item[:1] == b"\xc1" for item in items):
        return None
    try:
        return [vs.deserialize(item) for item in items]
    except errors.SerdeError:
        return None
