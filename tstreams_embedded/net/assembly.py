"""One request arriving in pieces (wire protocol 3, see :mod:`~tstreams_embedded.net.framing`).

An :class:`Assembly` checks each piece against the ones before it (its index follows, it
announces the same total, the bytes stay within it, the last one completes it) and keeps
the payloads until the request is whole; the server counts its bytes received against
the budgets, piece by piece. The first thing wrong makes it *failed*: its buffers are dropped
at once, later pieces of the same request are dropped uncopied, and the error is answered
once the request ends (its last piece, the next request's first piece, or the timeout).
"""

from __future__ import annotations

from typing import Any

from ..errors import ProtocolError, RequestTooLarge, TStreamsError
from .framing import FRAME_END, LAST_PIECE

#: Bytes of the first piece kept to answer a failed request (its request ID, flags, version).
HEAD_BYTES = 256
#: Bytes counted per piece on top of its payload while a request is assembled: the Python
#: and ZeroMQ objects that keep each piece (about 575 bytes measured), so that pieces of no
#: or a few bytes count for the memory they take (without it, 460 000 empty pieces of one
#: request held 264 MB with nothing counted). 1/64 of a full piece.
PIECE_OVERHEAD = 1024


class Assembly:
    """The pieces received of request ``req_id`` (``total`` bytes announced)."""

    __slots__ = ("req_id", "total", "head", "last_seen", "received", "next_index", "frames", "current",
                 "error", "reserved", "max_frames")

    def __init__(self, req_id: int, total: int, head: bytes, now: float, max_frames: int,
                 error: TStreamsError | None = None) -> None:
        self.req_id = req_id
        self.total = total
        self.head = head  # the first bytes of the request frame
        self.last_seen = now
        self.received = 0
        self.next_index = 0
        self.frames: list[bytes] = []  # the request's frames completed so far
        self.current: list[Any] = []  # payloads (memoryviews) of the frame being completed
        self.error = error
        self.reserved = 0  # bytes counted against the server's budgets (set by the server)
        self.max_frames = max_frames

    def add(self, index: int, total: int, flags: int, payload: Any, now: float) -> None:
        """Take piece ``index``; on anything wrong, fail (see :meth:`fail`)."""
        self.last_seen = now
        size = len(payload)
        if self.error is None:
            rid = self.req_id
            if index != self.next_index:
                what = "a duplicate" if index < self.next_index else "pieces before it are missing"
                self.fail(ProtocolError(f"piece {index} of request {rid} is out of order: piece {self.next_index} "
                                        f"was expected ({what})"))
            elif total != self.total:
                self.fail(ProtocolError(f"piece {index} of request {rid} announces {total} bytes, its first "
                                        f"piece {self.total}"))
            elif self.received + size > total:
                self.fail(ProtocolError(f"the pieces of request {rid} carry more than the {total} bytes announced"))
            elif flags & LAST_PIECE and (self.received + size != total or not flags & FRAME_END):
                self.fail(ProtocolError(f"request {rid} ended after {self.received + size} of the {total} bytes "
                                        "announced"))
            else:
                self.current.append(payload)
                if flags & FRAME_END:
                    if len(self.frames) + 2 > self.max_frames:  # (+ the identity)
                        self.fail(RequestTooLarge(f"request {rid} has more than {self.max_frames} frames; not "
                                                  "executed"))
                    else:
                        parts = self.current
                        self.frames.append(bytes(parts[0]) if len(parts) == 1 else b"".join(parts))
                        self.current = []
        self.next_index = index + 1
        self.received += size

    def fail(self, error: TStreamsError) -> None:
        """Keep the first error and drop what was received (later pieces are dropped too)."""
        if self.error is None:
            self.error = error
        self.frames = []
        self.current = []

    @property
    def complete(self) -> bool:
        """Whether every byte announced arrived, whole frames, without error."""
        return self.error is None and self.received == self.total and not self.current
