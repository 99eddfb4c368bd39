"""How ``tstreams consume`` shows items and ``tstreams produce`` reads them.

Output formats (``--format``): ``raw`` (the stored bytes), ``json`` (items are JSON
documents), ``msgpack`` (items are msgpack documents, shown as JSON), ``hex``, and
``record``: the records of a streams app's stream (envelopes, see
:func:`tstreams_embedded.streams.decode`), shown as JSON objects ``{"key", "value",
"timestamp", "headers"}`` with key and value decoded by ``--key-serde`` and ``--value-serde``
(a windowed key, ``windowed(<serde>)``, as ``{"key", "start", "end"}``). Plain output is
one line per item; with ``--json`` each transaction is one JSON line whose ``items`` are the
decoded values (``raw`` as UTF-8 text with undecodable bytes escaped as ``\\xNN``, ``hex`` as
hex strings). Bytes inside msgpack documents, keys and values are shown as hex strings (also
as map keys), msgpack extension types as ``{"ext": code, "data": hex}`` and msgpack
timestamps as ``{"timestamp_ns": n}``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import msgpack

from .. import errors

if TYPE_CHECKING:  # the streams library is imported only for --format record
    from ..streams.serdes import Serde

OUTPUT_FORMATS = ("raw", "json", "msgpack", "hex", "record")
INPUT_FORMATS = ("lines", "json", "msgpack")
#: the serdes of ``--format record`` (``--key-serde``, ``--value-serde``)
RECORD_SERDES = ("msgpack", "json", "str", "bytes", "windowed(msgpack)", "windowed(json)", "windowed(str)",
                 "windowed(bytes)")


#: the key and value serdes of ``--format record``
RecordSerdes = tuple["Serde", "Serde"]


def record_serdes(key_serde: str, value_serde: str) -> RecordSerdes:
    """The serdes of ``--format record`` (imports the streams library only then)."""
    from ..streams.serdes import serde

    return serde(key_serde, "--key-serde"), serde(value_serde, "--value-serde")


def _not_a(what: str, item: bytes, exc: Exception, other: str) -> errors.InvalidArgument:
    """The error of an item that is not ``what``: a streams record envelope is named as such."""
    from ..streams.records import ENVELOPE_MARK

    if item[:1] == bytes([ENVELOPE_MARK]):
        return errors.InvalidArgument(f"an item is not {what}: this is a streams record envelope (it starts with "
                                      f"0xC1); try --format record --key-serde SERDE --value-serde SERDE")
    return errors.InvalidArgument(f"an item is not {what} ({str(exc) or type(exc).__name__}); try {other}")


def _bytes_as_hex(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, msgpack.Timestamp):
        return {"timestamp_ns": value.to_unix_nano()}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _jsonable(value: Any) -> Any:
    """``value`` with map keys JSON can have: bytes keys as hex, array keys as JSON text."""
    if isinstance(value, dict):
        return {k if k is None or isinstance(k, (str, int, float)) else
                bytes(k).hex() if isinstance(k, (bytes, bytearray, memoryview)) else to_json(k): _jsonable(v)
                for k, v in value.items()}
    if isinstance(value, msgpack.ExtType):
        return {"ext": value.code, "data": value.data.hex()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def decode_item(item: bytes, fmt: str, serdes: RecordSerdes | None = None, timestamp: int = 0) -> Any:
    """The value of ``item`` read as ``fmt``, fit for JSON; InvalidArgument if it is not one.
    ``record`` needs ``serdes`` (:func:`record_serdes`); ``timestamp`` is that of a plain
    item (not an envelope): its transaction's time."""
    if fmt == "raw":
        return item.decode("utf-8", "backslashreplace")
    if fmt == "hex":
        return item.hex()
    if fmt == "json":
        try:
            return json.loads(item)
        except ValueError as exc:
            raise _not_a("JSON", item, exc, "--format raw or hex") from None
    if fmt == "msgpack":
        try:
            return msgpack.unpackb(item, raw=False, strict_map_key=False)
        except (ValueError, msgpack.UnpackException) as exc:
            raise _not_a("msgpack", item, exc, "--format hex") from None
    if fmt == "record":
        if serdes is None:
            raise errors.InvalidArgument("--format record needs the key and value serdes")
        return _record_json(item, serdes, timestamp)
    raise errors.InvalidArgument(f"unknown format {fmt!r}; expected one of {OUTPUT_FORMATS}")


def _record_json(item: bytes, serdes: RecordSerdes, timestamp: int) -> Any:
    from ..streams.decoding import decode
    from ..streams.windows import Windowed

    try:
        r = decode(item, key_serde=serdes[0], value_serde=serdes[1], timestamp=timestamp)
    except errors.SerdeError as exc:
        raise errors.InvalidArgument(f"an item is not a record of these serdes: {exc}; try other --key-serde / "
                                     f"--value-serde, or --format hex") from None
    key = {"key": r.key.key, "start": r.key.start, "end": r.key.end} if isinstance(r.key, Windowed) else r.key
    return {"key": key, "value": r.value, "timestamp": r.timestamp, "headers": r.headers}


def to_json(value: Any) -> str:
    """Compact JSON text (bytes as hex, msgpack extension types as ``{"ext", "data"}``);
    InvalidArgument if ``value`` cannot be shown as JSON (nested too deep)."""
    try:
        return json.dumps(_jsonable(value), separators=(",", ":"), ensure_ascii=False, default=_bytes_as_hex)
    except (RecursionError, TypeError, ValueError) as exc:
        raise errors.InvalidArgument(f"an item cannot be shown as JSON ({exc}); try --format hex") from None


def item_line(item: bytes, fmt: str, serdes: RecordSerdes | None = None, timestamp: int = 0) -> bytes:
    """The plain output of one item, without the line end."""
    if fmt == "raw":
        return item
    if fmt == "hex":
        return item.hex().encode()
    return to_json(decode_item(item, fmt, serdes, timestamp)).encode("utf-8")
