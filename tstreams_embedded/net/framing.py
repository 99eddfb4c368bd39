"""Wire framing shared by the server and the client.

A request, as the ROUTER sees it, is a multipart message::

    [identity, header, body, blob_0, blob_1, ...]

* ``identity`` is added by ZeroMQ (the DEALER never sends it).
* ``header`` is msgpack ``[request_id, method, flags]``.
* ``body`` (optional) is msgpack of the argument list. A ``bytes`` argument may travel as
  its own frame instead: the body then holds ``ExtType(BLOB, i)`` and the payload is
  ``blob_i``. Item chunks of ``DATA``/``CHECKPOINT``/``INSTANT`` operations always travel
  this way, so payloads are never re-encoded: the server hands the received frame to the
  engine as the stored chunk.

A reply is ``[identity, header, body, blob...]`` with header msgpack ``[request_id, flags]``.
``flags & MORE`` marks one of several responses of a generator method; the last response
has no ``MORE``. ``flags & ERROR`` marks an error reply whose body is ``[class name,
message]`` from :func:`tstreams_embedded.errors.error_to_wire`; it is always final.
``flags & NOT_EXECUTED`` (with ``ERROR``) says the server did not execute the request
because it is stopping: the client may send it again, to this or another server.

Everything that can be wrong with a message raises :class:`ProtocolError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from ..errors import ProtocolError

# Extension type code of an out-of-band blob reference.
BLOB = 1

# Request flags.
NO_REPLY = 1  # no response at all, not even an error; the request still runs (writes are applied)

# Reply flags.
MORE = 1  # one of several responses of a generator method; more follow
ERROR = 2  # an error reply; always final
NOT_EXECUTED = 4  # with ERROR: the request was not executed (server stopping); the client may send it again

MAX_METHOD_LEN = 64

_pack: Callable[[Any], bytes] = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_EMPTY_ARGS: list[Any] = []


def pack(value: Any) -> bytes:
    """msgpack-encode ``value`` (bytes stay binary)."""
    return _pack(value)


def pack_request_header(req_id: int, method: str, flags: int = 0) -> bytes:
    return _pack([req_id, method, flags])


def pack_reply_header(req_id: int, flags: int = 0) -> bytes:
    return _pack([req_id, flags])


def encode_args(args: Sequence[Any], blob_positions: Sequence[int] = ()) -> list[bytes]:
    """Encode an argument list as ``[body, *blobs]``.

    Arguments at ``blob_positions`` that are bytes-like travel as their own frames.
    """
    if not blob_positions:
        return [_pack(list(args))]
    body = list(args)
    blobs: list[Any] = []
    for i in blob_positions:
        v = body[i] if i < len(body) else None
        if isinstance(v, (bytes, bytearray, memoryview)):
            body[i] = msgpack.ExtType(BLOB, len(blobs).to_bytes(4, "big"))
            blobs.append(v)
    return [_pack(body), *blobs]


def unpack_request(frames: Sequence[bytes], first: int = 1) -> tuple[int, str, int, list[Any]]:
    """Decode ``frames[first:]`` = ``[header, body?, blobs...]`` into ``(id, method, flags, args)``.

    Raises :class:`ProtocolError` for anything malformed; the request id is ``-1`` when even
    the header could not be read.
    """
    n = len(frames) - first
    if n < 1:
        raise ProtocolError("empty request")
    try:
        header = msgpack.unpackb(frames[first], raw=False)
    except Exception as e:  # msgpack raises several unrelated classes
        raise ProtocolError(f"header is not msgpack: {type(e).__name__}") from None
    if (
        type(header) is not list
        or len(header) != 3
        or type(header[0]) is not int
        or type(header[1]) is not str
        or type(header[2]) is not int
    ):
        raise ProtocolError("header must be msgpack [int id, str method, int flags]")
    req_id, method, flags = header
    if n == 1:
        return req_id, method, flags, _EMPTY_ARGS
    args = unpack_body(frames[first + 1], frames[first + 2 :])
    if type(args) is not list:
        raise ProtocolError("body must be a msgpack array of arguments")
    return req_id, method, flags, args


def unpack_body(body: bytes, blobs: Sequence[bytes]) -> Any:
    """Decode a body frame, resolving blob references against ``blobs``."""
    try:
        if not blobs:
            return msgpack.unpackb(body, raw=False, strict_map_key=False, ext_hook=_no_blobs)
        used: list[int] = []

        def hook(code: int, data: bytes) -> Any:
            if code != BLOB or len(data) != 4:
                raise ProtocolError(f"unknown msgpack extension type {code}")
            i = int.from_bytes(data, "big")
            if i >= len(blobs):
                raise ProtocolError(f"blob reference {i} out of range ({len(blobs)} blob frames)")
            used.append(i)
            return blobs[i]

        value = msgpack.unpackb(body, raw=False, strict_map_key=False, ext_hook=hook)
    except ProtocolError:
        raise
    except Exception as e:
        raise ProtocolError(f"body is not valid msgpack: {type(e).__name__}: {e}") from None
    if len(used) != len(blobs):
        raise ProtocolError(f"{len(blobs)} blob frames but {len(used)} references")
    return value


def guess_request_id(frames: Sequence[bytes], first: int = 1) -> int:
    """The request ID of a malformed request ``frames[first:]``, when its header is readable (else -1)."""
    if len(frames) > first:
        try:
            h = msgpack.unpackb(frames[first], raw=False)
            if type(h) is list and h and type(h[0]) is int:
                return h[0]
        except Exception:
            pass
    return -1


def guess_flags(frames: Sequence[bytes], first: int = 1) -> int:
    """The request flags of a malformed request ``frames[first:]``, when its header is readable (else 0)."""
    if len(frames) > first:
        try:
            h = msgpack.unpackb(frames[first], raw=False)
            if type(h) is list and len(h) >= 3 and type(h[2]) is int:
                return h[2]
        except Exception:
            pass
    return 0


def _no_blobs(code: int, data: bytes) -> Any:
    raise ProtocolError(f"unexpected msgpack extension type {code} (no blob frames)")


def unpack_reply(frames: Sequence[bytes]) -> tuple[int, int, Any]:
    """Decode a reply ``[header, body, blobs...]`` (as the DEALER sees it) into ``(id, flags, value)``."""
    if not frames:
        raise ProtocolError("empty reply")
    try:
        header = msgpack.unpackb(frames[0], raw=False)
        req_id, flags = header
    except Exception as e:
        raise ProtocolError(f"bad reply header: {e}") from None
    value = unpack_body(frames[1], frames[2:]) if len(frames) > 1 else None
    return req_id, flags, value
