"""Wire framing shared by the server and the client (protocol version 3; versions 1 and 2 answered).

**Version 3** (this client's) is version 2 below, with one rule more: no ZeroMQ message is
larger than :data:`PIECE_BYTES` (64 KiB) plus a piece header. A request whose frames
together are larger travels as **pieces** (:func:`split_request`), each piece its own
ZeroMQ message of two frames::

    [identity, piece header, payload]
    piece header = 0xC1, request_id u64, index u32, total u64, flags u8   (22 bytes, big-endian)
    flags: FRAME_END = 1 (the payload ends one of the request's frames), LAST = 2 (the last piece)

The payloads, in ``index`` order (0, 1, ...), are the request's frames cut at most every
:data:`PIECE_BYTES` bytes; ``total`` (the same in every piece) is their sum. The server
reassembles them (counting the bytes against its budgets from the first piece on) and runs
the request as if its frames had come as one message. ZeroMQ holds a message whole until its
last frame has arrived and bounds a frame's size (``ZMQ_MAXMSGSIZE``) and a connection's
queue in messages (``ZMQ_RCVHWM``), never in bytes: with every message small, what it holds
per connection is bounded in bytes too. Pieces of one request are sent one after another
(other whole requests may come between them). ``0xC1`` is never the first byte of msgpack,
so a piece is told from a whole request by its first byte. The request frame itself says
version 3; a version-2 request (the same layout) is answered as long as it fits one message.

**Version 2**. A request, as the ROUTER sees it, is::

    [identity, request, blob_0, blob_1, ...]
    request = msgpack [2, request_id, method, flags, [arg, ...]]

and a reply, as the DEALER sees it, one frame::

    reply = msgpack [request_id, flags, value]

* ``identity`` is added by ZeroMQ (the DEALER never sends it).
* The header and the arguments travel in ONE frame, decoded by one ``msgpack`` call (the
  frame count was a measured cost: 1–1.5 µs per frame and side through pyzmq).
* A ``bytes`` argument of :data:`BLOB_MIN` bytes or more may travel as its own frame: the
  arguments then hold ``ExtType(BLOB, i)`` (4-byte big-endian index) and the payload is
  ``blob_i``, handed to the engine as received (never re-encoded, no copy of a large item
  chunk). Smaller ones are plain msgpack ``bin`` inside the request frame. Every blob must
  be referenced exactly once.
* Reply ``flags & MORE`` marks one of several responses of a generator method; the last
  response has no ``MORE``. ``flags & ERROR`` marks an error reply whose value is ``[class
  name, message]`` from :func:`tstreams_embedded.errors.error_to_wire`; it is always final.
  ``flags & NOT_EXECUTED`` (with ``ERROR``) says the server did not execute the request
  because it is stopping: the client may send it again, to this or another server.

**Version 1** (clients before issue 21), still answered by the server in kind::

    [identity, header, body?, blob_0, ...]     header = msgpack [request_id, method, flags]
    [identity, msgpack [request_id, flags], msgpack value]            (the reply)

A version-1 header is always a 3-element msgpack array, so its first byte (``0x93``) tells
the versions apart before anything is decoded. A request of any other version (a msgpack
array whose first element is an integer other than 2) is refused with
:class:`~tstreams_embedded.errors.ProtocolVersionError`; a version-2 client that gets a
version-1 reply (an older server: it cannot read version 2) fails its requests with
:class:`~tstreams_embedded.errors.ProtocolVersionError` too.

Everything else that can be wrong with a message raises :class:`ProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from ..errors import ProtocolError, ProtocolVersionError

#: The wire protocol version this code speaks (the first element of a request frame).
VERSION = 3
#: The version before pieces (the same request frame; answered while a request fits one message).
UNPIECED_VERSION = 2
#: The older version the server still answers (header and body in separate frames).
LEGACY_VERSION = 1
#: All three, as the server reports them (``server_info``) and names them in errors.
SUPPORTED_VERSIONS = (LEGACY_VERSION, UNPIECED_VERSION, VERSION)

#: The largest piece payload, and the largest request sent as one message (all frames).
PIECE_BYTES = 64 * 1024
PIECE_MARK = 0xC1  # the first byte of a piece header (never the first byte of msgpack)
_PIECE_HEADER = struct.Struct(">BQIQB")
#: Bytes of a piece header.
PIECE_HEADER_BYTES = _PIECE_HEADER.size
# Piece flags.
FRAME_END = 1  # the payload ends one of the request's frames
LAST_PIECE = 2  # the last piece of the request (with FRAME_END)
#: The largest ZeroMQ message (all frames) a version-3 client sends: a piece, header included.
MESSAGE_LIMIT = PIECE_BYTES + PIECE_HEADER_BYTES

# Extension type code of an out-of-band blob reference.
BLOB = 1
#: ``bytes`` arguments at least this large travel as their own frame (no copies); smaller
#: ones inside the request frame (a frame costs more than copying a few KiB).
BLOB_MIN = 4096

# Request flags.
NO_REPLY = 1  # no response at all, not even an error; the request still runs (writes are applied)

# Reply flags.
MORE = 1  # one of several responses of a generator method; more follow
ERROR = 2  # an error reply; always final
NOT_EXECUTED = 4  # with ERROR: the request was not executed (server stopping); the client may send it again

_LEGACY_MARK = 0x93  # first byte of every version-1 header: a 3-element msgpack array
_LEGACY_REPLY_MARK = 0x92  # first byte of every version-1 reply header: [request_id, flags]
_HEAD_PREFIX = 256  # bytes of a malformed request read to find its request ID and flags
_EMPTY_ARGS_BODY = b"\x90"  # msgpack []

_pack: Callable[[Any], bytes] = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_unpackb = msgpack.unpackb
_EMPTY_ARGS: list[Any] = []
_ExtType = msgpack.ExtType


def pack(value: Any) -> bytes:
    """msgpack-encode ``value`` (bytes stay binary)."""
    return _pack(value)


# ---------------------------------------------------------------------- requests (client side)
def request_frame(req_id: int, method: str, flags: int = 0, body: bytes = _EMPTY_ARGS_BODY) -> bytes:
    """The version-2 request frame of ``method`` with the encoded argument list ``body``
    (the first frame of :func:`encode_args`): ``[2, req_id, method, flags]`` and the body
    joined into one msgpack array, without decoding the body again."""
    return _pack((VERSION, req_id, method, flags, None))[:-1] + body  # (the nil placeholder replaced)


def request_frames(req_id: int, method: str, flags: int, body: Sequence[Any]) -> list[Any]:
    """The frames of a version-2 request: ``body`` is ``[args, *blobs]`` from
    :func:`encode_args` (or empty: no arguments)."""
    if not body:
        return [request_frame(req_id, method, flags)]
    return [request_frame(req_id, method, flags, body[0]), *body[1:]]


def encode_args(args: Sequence[Any], blob_positions: Sequence[int] = ()) -> list[Any]:
    """Encode an argument list as ``[args, *blobs]``.

    Arguments at ``blob_positions`` that are bytes-like and at least :data:`BLOB_MIN` long
    travel as their own frames.
    """
    if not blob_positions:
        return [_pack(list(args))]
    body = list(args)
    blobs: list[Any] = []
    for i in blob_positions:
        v = body[i] if i < len(body) else None
        if isinstance(v, (bytes, bytearray, memoryview)) and len(v) >= BLOB_MIN:
            body[i] = blob_ref(len(blobs))
            blobs.append(v)
    return [_pack(body), *blobs]


def split_request(req_id: int, frames: Sequence[Any], piece_bytes: int = PIECE_BYTES) -> list[list[Any]]:
    """The ZeroMQ messages that carry the request ``frames`` (from :func:`request_frames`),
    each a list of frames: ``[frames]`` itself when they total at most ``piece_bytes`` (the
    common case: one message, nothing added), else pieces of at most ``piece_bytes`` of
    payload, each ``[piece header, payload]`` (payloads are ``memoryview`` slices of the
    frames: nothing is copied). Send them in order, each as its own message."""
    total = 0
    for f in frames:
        total += len(f)
    if total <= piece_bytes:
        return [list(frames)]
    if piece_bytes < 1:
        raise ValueError(f"piece_bytes must be positive, got {piece_bytes}")
    messages: list[list[Any]] = []
    last = len(frames) - 1
    header = piece_header
    for k, frame in enumerate(frames):
        view = memoryview(frame).cast("B")
        size = len(view)
        start = 0
        while True:
            end = min(start + piece_bytes, size)
            flags = 0 if end < size else (LAST_PIECE | FRAME_END if k == last else FRAME_END)
            messages.append([header(req_id, len(messages), total, flags), view[start:end]])
            if end == size:
                break
            start = end
    return messages


def request_messages(req_id: int, method: str, flags: int, body: Sequence[Any],
                     piece_bytes: int = PIECE_BYTES) -> list[list[Any]]:
    """The ZeroMQ messages of a version-3 request: :func:`split_request` of
    :func:`request_frames` (what every client sends; see the module docstring)."""
    return split_request(req_id, request_frames(req_id, method, flags, body), piece_bytes)


def piece_header(req_id: int, index: int, total: int, flags: int) -> bytes:
    """The header frame of piece ``index`` of request ``req_id`` (``total`` bytes in all)."""
    return _PIECE_HEADER.pack(PIECE_MARK, req_id, index, total, flags)


def is_piece_header(frame: bytes | memoryview) -> bool:
    """Whether ``frame`` (the first after the identity) is a piece header."""
    return len(frame) == PIECE_HEADER_BYTES and frame[0] == PIECE_MARK


def unpack_piece_header(frame: bytes) -> tuple[int, int, int, int]:
    """``(request id, index, total, flags)`` of a piece header (see :func:`is_piece_header`)."""
    _, req_id, index, total, flags = _PIECE_HEADER.unpack(frame)
    return req_id, index, total, flags


def blob_ref(index: int) -> msgpack.ExtType:
    """The in-body reference to blob frame ``index``."""
    return _ExtType(BLOB, index.to_bytes(4, "big"))


def legacy_request(req_id: int, method: str, flags: int = 0, body: Sequence[Any] = ()) -> list[Any]:
    """A version-1 request ``[header, body?, blobs...]`` (what clients before issue 21 send;
    tests and benchmarks use it to check that the server still answers them)."""
    return [_pack([req_id, method, flags]), *body]


# ---------------------------------------------------------------------- requests (server side)
def unpack_request(frames: Sequence[bytes], first: int = 1) -> tuple[int, int, str, int, list[Any]]:
    """Decode the request ``frames[first:]`` into ``(version, id, method, flags, args)``.

    Raises :class:`ProtocolVersionError` for a version the server does not speak and
    :class:`ProtocolError` for anything malformed.
    """
    n = len(frames) - first
    if n < 1:
        raise ProtocolError("empty request")
    frame = frames[first]
    if frame[:1] == b"\x93":
        return _unpack_legacy(frames, first, n)
    try:
        if n == 1:
            m = _unpackb(frame, raw=False, strict_map_key=False, ext_hook=_no_blobs)
        else:
            m = _unpack_with_blobs(frame, frames[first + 1 :])
    except ProtocolError:
        raise
    except Exception as e:  # msgpack raises several unrelated classes
        raise ProtocolError(f"request is not valid msgpack: {type(e).__name__}: {e}") from None
    if (type(m) is list and len(m) == 5 and type(m[0]) is int and (m[0] == VERSION or m[0] == UNPIECED_VERSION)
            and type(m[1]) is int and type(m[2]) is str and type(m[3]) is int and type(m[4]) is list):
        return m[0], m[1], m[2], m[3], m[4]
    if type(m) is list and m and type(m[0]) is int and m[0] != VERSION and m[0] != UNPIECED_VERSION:
        raise _version_error(m[0])
    raise ProtocolError(f"a request must be msgpack [{VERSION}, int id, str method, int flags, [args]]")


def _version_error(version: int) -> ProtocolVersionError:
    return ProtocolVersionError(
        f"wire protocol version {version} is not supported: this server speaks version {VERSION} "
        f"(and answers versions {UNPIECED_VERSION} and {LEGACY_VERSION}); use a tstreams-embedded client of the "
        "same release")


def _unpack_legacy(frames: Sequence[bytes], first: int, n: int) -> tuple[int, int, str, int, list[Any]]:
    try:
        header = _unpackb(frames[first], raw=False)
    except Exception as e:
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
        return LEGACY_VERSION, req_id, method, flags, _EMPTY_ARGS
    try:
        args = _unpack_with_blobs(frames[first + 1], frames[first + 2 :])
    except ProtocolError:
        raise
    except Exception as e:
        raise ProtocolError(f"body is not valid msgpack: {type(e).__name__}: {e}") from None
    if type(args) is not list:
        raise ProtocolError("body must be a msgpack array of arguments")
    return LEGACY_VERSION, req_id, method, flags, args


def _unpack_with_blobs(data: bytes, blobs: Sequence[bytes]) -> Any:
    """Decode ``data``, resolving blob references against ``blobs`` (each used once)."""
    if not blobs:
        return _unpackb(data, raw=False, strict_map_key=False, ext_hook=_no_blobs)
    used: list[int] = []

    def hook(code: int, ref: bytes) -> Any:
        if code != BLOB or len(ref) != 4:
            raise ProtocolError(f"unknown msgpack extension type {code}")
        i = int.from_bytes(ref, "big")
        if i >= len(blobs):
            raise ProtocolError(f"blob reference {i} out of range ({len(blobs)} blob frames)")
        used.append(i)
        return blobs[i]

    value = _unpackb(data, raw=False, strict_map_key=False, ext_hook=hook)
    if len(used) != len(blobs) or len(set(used)) != len(used):
        raise ProtocolError(f"{len(blobs)} blob frames but {len(used)} references")
    return value


def _no_blobs(code: int, data: bytes) -> Any:
    raise ProtocolError(f"unexpected msgpack extension type {code} (no blob frames)")


def guess_header(frames: Sequence[bytes], first: int = 1) -> tuple[int, int, int]:
    """``(version, request id, flags)`` of a request ``frames[first:]`` that could not be
    decoded (or was not: too large, over budget), as far as its first bytes tell: the ID is
    ``-1`` and the flags ``0`` when unreadable, the version :data:`VERSION` unless the frame
    is a version-1 header. Reads at most a few hundred bytes of the frame."""
    if len(frames) <= first:
        return VERSION, -1, 0
    frame = frames[first]
    version = LEGACY_VERSION if frame[:1] == b"\x93" else VERSION
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=_HEAD_PREFIX * 4)
    unpacker.feed(frame[:_HEAD_PREFIX])
    fields: list[Any] = []
    try:
        size = unpacker.read_array_header()
        for _ in range(min(size, 4)):
            fields.append(unpacker.unpack())
    except Exception:  # noqa: BLE001, S110 - truncated or not msgpack: what was read is used
        pass
    if version == LEGACY_VERSION:  # [id, method, flags]
        rid, flags = (fields + [None] * 3)[0], (fields + [None] * 3)[2]
    else:  # [version, id, method, flags, args]
        rid, flags = (fields + [None] * 4)[1], (fields + [None] * 4)[3]
        if fields and fields[0] == UNPIECED_VERSION and type(fields[0]) is int:
            version = UNPIECED_VERSION
    return (version, rid if type(rid) is int else -1, flags if type(flags) is int else 0)


# ---------------------------------------------------------------------- replies
def reply_frames(version: int, req_id: int, flags: int, value: Any) -> list[bytes]:
    """The frames of a reply (after the identity) in the request's ``version`` (versions 2
    and 3 reply alike)."""
    if version != LEGACY_VERSION:
        return [_pack((req_id, flags, value))]
    return [_pack((req_id, flags)), _pack(value)]


def unpack_reply(frames: Sequence[bytes]) -> tuple[int, int, Any]:
    """Decode a version-2 reply (as the DEALER sees it) into ``(id, flags, value)``.

    A version-1 reply (from an older server, which cannot read this client's requests)
    raises :class:`ProtocolVersionError`; anything else malformed :class:`ProtocolError`."""
    if len(frames) != 1:
        if frames and frames[0][:1] == b"\x92":
            raise ProtocolVersionError(
                f"the server answered in wire protocol version {LEGACY_VERSION}: it is an older tstreams-embedded "
                f"that cannot read this client's version {VERSION}; upgrade the server (or use a client of its "
                "release)")
        raise ProtocolError(f"a reply is one frame, got {len(frames)}")
    try:
        m = _unpackb(frames[0], raw=False, strict_map_key=False, ext_hook=_no_blobs)
    except Exception as e:
        raise ProtocolError(f"reply is not valid msgpack: {type(e).__name__}") from None
    if type(m) is not list or len(m) != 3 or type(m[0]) is not int or type(m[1]) is not int:
        raise ProtocolError("a reply must be msgpack [int id, int flags, value]")
    return m[0], m[1], m[2]


def unpack_legacy_reply(frames: Sequence[bytes]) -> tuple[int, int, Any]:
    """Decode a version-1 reply ``[header, value]`` into ``(id, flags, value)``."""
    if len(frames) != 2:
        raise ProtocolError(f"a version-1 reply is two frames, got {len(frames)}")
    try:
        req_id, flags = _unpackb(frames[0], raw=False)
        value = _unpackb(frames[1], raw=False, strict_map_key=False)
    except Exception as e:
        raise ProtocolError(f"bad reply: {type(e).__name__}: {e}") from None
    return req_id, flags, value
