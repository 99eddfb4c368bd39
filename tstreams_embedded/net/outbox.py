"""Replies leave the server in bursts.

Sending replies one by one between pieces of work makes ZeroMQ's I/O thread wake (and the
kernel write) once per reply; measured here: 24 µs per reply one at a time, 1.8 µs in
bursts of 100. So every loop callback that produces replies (a drain of the socket, the
results of the executors, a round of generator steps) runs inside :meth:`Outbox.burst`:
replies queue up and leave together when the callback ends.

Replying to a client that has gone never raises: the server's socket has
``ROUTER_MANDATORY`` on, so ZeroMQ reports ``EHOSTUNREACH``; the outbox counts it and tells
the server, which drops the client's session.

Reply bytes are counted against the client's budget (``Session.replies``) until they are
known to have left the process: every reply of at least :data:`TRACK_BYTES`, and the first
reply after :data:`TRACK_BYTES` of smaller ones, is sent as a tracked zero-copy frame
(``zmq.Frame(track=True)``); ZeroMQ releases it once written to the connection, and it
goes to each peer in order, so its release also covers the replies sent before it.
:meth:`Outbox.poll_trackers` releases what was sent. A client that does not read keeps its
replies counted, and the server stops running its requests (see ``server.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any

import zmq

from ..errors import error_to_wire
from . import framing, zmqfast
from .session import Session
from .stats import ServerStats

#: Replies of this size or more are tracked, and smaller ones once this many bytes of them
#: have been sent untracked to a client (tracking costs a few µs; per 256 KiB it is free).
TRACK_BYTES = 256 * 1024

log = logging.getLogger(__name__)
_pack = framing.pack
VERSION = framing.VERSION
LEGACY_VERSION = framing.LEGACY_VERSION


class Outbox:
    """The reply queue of a server socket.

    ``on_unroutable(identity)`` is called when a client turns out to be gone.
    ``after_burst()`` is called after each burst is sent: the socket's ``zmq.FD`` is
    edge-triggered and sending may consume its edge, so the server re-checks
    ``zmq.EVENTS`` there.
    """

    def __init__(self, stats: ServerStats, on_unroutable: Callable[[bytes], None],
                 after_burst: Callable[[], None],
                 session_of: Callable[[bytes], Session | None] = lambda identity: None) -> None:
        self.sock: zmq.Socket[Any] | None = None  # set by the server while it serves
        self._session_of = session_of
        #: Sessions with tracked replies not yet released (see :meth:`poll_trackers`).
        self.tracking: set[Session] = set()
        self._stats = stats
        self._on_unroutable = on_unroutable
        self._after_burst = after_burst
        # (identity, frames, session whose replies a tracked send must release, bytes it covers)
        self._queue: list[tuple[bytes, list[bytes], Session | None, int]] = []
        #: Reply bytes counted against clients (the sum of their ``Session.replies``).
        self.reply_bytes = 0
        self._depth = 0  # nesting of burst() blocks

    def burst(self) -> Outbox:
        """``with outbox.burst():`` holds the replies sent inside the block and sends them
        all when it ends (the outermost block, when bursts nest), then calls ``after_burst``."""
        return self

    def __enter__(self) -> None:
        self._depth += 1

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.flush()
            if exc_type is None:
                self._after_burst()

    def send(self, identity: bytes, frames: list[bytes], session: Session | None = None) -> None:
        """Queue a reply (sent at once outside a burst). Its bytes count against the
        client's budget from now on (a drain may queue many replies before they leave).
        ``session`` is the client's session when the caller has it (saves a lookup)."""
        s = session if session is not None and not session.closed else self._session_of(identity)
        self._queue_reply(identity, frames, s)

    def _queue_reply(self, identity: bytes, frames: list[bytes], s: Session | None) -> None:
        covered = 0
        if s is not None:
            s.untracked += len(frames[-1]) + len(frames[0]) if len(frames) > 1 else len(frames[0])
            if s.untracked >= TRACK_BYTES:
                covered, s.untracked = s.untracked, 0
                s.replies += covered
                self.reply_bytes += covered
        self._queue.append((identity, frames, s if covered else None, covered))
        if not self._depth:
            self.flush()

    def send_value(self, identity: bytes, req_id: int, value: Any, flags: int = 0,
                   session: Session | None = None) -> None:
        """Reply ``value``, in the wire version of the client's requests; an error reply
        instead when msgpack cannot carry it."""
        s = session if session is not None and not session.closed else self._session_of(identity)
        try:
            if s is None or s.version != LEGACY_VERSION:  # (versions 2 and 3 reply alike)
                frames = [_pack((req_id, flags, value))]
            else:
                frames = framing.reply_frames(s.version, req_id, flags, value)
        except Exception as e:  # a handler returned something msgpack cannot carry
            self.send_error(identity, req_id, e)
            return
        self._queue_reply(identity, frames, s)

    def send_error(self, identity: bytes, req_id: int, exc: BaseException, extra_flags: int = 0,
                   version: int | None = None) -> None:
        """Reply the error ``exc`` (flag ``ERROR``, plus ``extra_flags``) in wire ``version``
        (default: that of the client's requests)."""
        self._stats.errors += 1
        s = self._session_of(identity)
        if version is None:
            version = s.version if s is not None else VERSION
        self._queue_reply(identity, framing.reply_frames(version, req_id, framing.ERROR | extra_flags,
                                                         list(error_to_wire(exc))), s)

    def poll_trackers(self) -> list[Session]:
        """Release the reply bytes ZeroMQ has finished with; return the sessions that
        released some."""
        released = []
        for s in list(self.tracking):
            q = s.trackers
            n = 0
            while q and q[0][0].done:
                n += q.popleft()[1]
            if n:
                s.replies -= n
                self.reply_bytes -= n
                released.append(s)
            if not q:
                self.tracking.discard(s)
        return released

    def forget(self, s: Session) -> None:
        """A session was dropped: its replies are ZeroMQ's to discard."""
        self.tracking.discard(s)
        s.trackers.clear()
        self.reply_bytes -= s.replies
        s.replies = s.untracked = 0

    def flush(self) -> None:
        """Send every queued reply now (they are discarded when the socket is closed)."""
        out, self._queue = self._queue, []
        sock = self.sock
        if sock is None or not out:
            return
        send2, send3, sendm = zmqfast.send2, zmqfast.send3, zmqfast.send_multipart
        stats = self._stats
        sent = 0
        for identity, frames, s, covered in out:
            try:
                if s is not None:
                    tracked = zmq.Frame(frames[-1], copy=False, track=True)
                    sendm(sock, [identity, *frames[:-1], tracked])
                    if not s.closed:
                        s.trackers.append((tracked.tracker, covered))
                        self.tracking.add(s)
                    s = None
                    sent += 1
                    continue
                if len(frames) == 1:
                    send2(sock, identity, frames[0])
                elif len(frames) == 2:
                    send3(sock, identity, frames[0], frames[1])
                else:
                    sendm(sock, [identity, *frames])
                sent += 1
            except zmq.ZMQError as e:
                if e.errno == zmq.EHOSTUNREACH:  # the client is gone: forget it
                    stats.unroutable += 1
                    self._on_unroutable(identity)
                elif e.errno == zmq.EAGAIN:  # the client does not read (HWM reached)
                    stats.dropped += 1
                else:
                    stats.dropped += 1
                    log.warning("send failed: %s", e)
            finally:
                if s is not None and not s.closed:  # a tracked send that failed: nothing of it is queued
                    s.replies -= covered  # (a dropped session's replies were forgotten already)
                    self.reply_bytes -= covered
        stats.replies += sent
