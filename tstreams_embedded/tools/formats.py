"""How ``tstreams consume`` shows items and ``tstreams produce`` reads them.

Output formats (``--format``): ``raw`` (the stored bytes), ``json`` (items are JSON
documents), ``msgpack`` (items are msgpack documents, shown as JSON), ``hex``. Plain output is
one line per item; with ``--json`` each transaction is one JSON line whose ``items`` are the
decoded values (``raw`` as UTF-8 text with undecodable bytes escaped as ``\\xNN``, ``hex`` as
hex strings). Bytes inside msgpack documents are shown as hex strings.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack

from .. import errors

OUTPUT_FORMATS = ("raw", "json", "msgpack", "hex")
INPUT_FORMATS = ("lines", "json", "msgpack")


def _bytes_as_hex(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def decode_item(item: bytes, fmt: str) -> Any:
    """The value of ``item`` read as ``fmt``, fit for JSON; InvalidArgument if it is not one."""
    if fmt == "raw":
        return item.decode("utf-8", "backslashreplace")
    if fmt == "hex":
        return item.hex()
    if fmt == "json":
        try:
            return json.loads(item)
        except ValueError as exc:
            raise errors.InvalidArgument(f"an item is not JSON ({exc}); try --format raw or hex") from None
    if fmt == "msgpack":
        try:
            return msgpack.unpackb(item, raw=False, strict_map_key=False)
        except (ValueError, msgpack.UnpackException) as exc:
            raise errors.InvalidArgument(f"an item is not msgpack ({exc}); try --format hex") from None
    raise errors.InvalidArgument(f"unknown format {fmt!r}; expected one of {OUTPUT_FORMATS}")


def to_json(value: Any) -> str:
    """Compact JSON text (bytes as hex)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_bytes_as_hex)


def item_line(item: bytes, fmt: str) -> bytes:
    """The plain output of one item, without the line end."""
    if fmt == "raw":
        return item
    if fmt == "hex":
        return item.hex().encode()
    return to_json(decode_item(item, fmt)).encode("utf-8")
