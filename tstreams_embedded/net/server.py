"""The ZeroMQ ROUTER server on Tornado's IOLoop: the socket loop and request dispatch.

Tornado is used only to learn that the socket is readable: the socket's ``zmq.FD`` is
registered with ``IOLoop.add_handler``. Each wakeup then drains every queued message with
``NOBLOCK`` until ``EAGAIN`` (handling one message per callback was 4–6× slower). The
``zmq.FD`` is edge-triggered, so after any burst of sends the server re-checks
``zmq.EVENTS`` and drains again if input is pending; a drain that hits its per-wakeup cap
reschedules itself instead of waiting for an edge that will not come.

Each request is dispatched by its handler's route (:attr:`Handler.route`, see
:mod:`~tstreams_embedded.net.registry`) to one of:

* ``inline`` — called on the loop, replied at once;
* ``write`` / ``pool`` — handed to :class:`~tstreams_embedded.net.executors.Executors`;
* ``stream`` — started on the :class:`~tstreams_embedded.net.scheduler.GeneratorScheduler`;
* ``notify`` — called on the loop, never replied.

Replies leave in bursts through the :class:`~tstreams_embedded.net.outbox.Outbox`.

Guarantees:

* Every request gets exactly the responses of its handler kind, each echoing its request
  ID; a client may have any number of requests in flight, including several generators.
* Malformed messages get a ``ProtocolError`` reply (when their sender can be addressed)
  and never affect the server or stored data. Messages larger than ``max_msg_size`` bytes
  per frame are refused by ZeroMQ itself (``ZMQ_MAXMSGSIZE``; the peer is disconnected).
* Replying to a client that has gone never raises: ``ROUTER_MANDATORY`` is on so the
  server *learns* the peer is gone (and drops its session), and the error is absorbed.
* Writes (the ``write`` executor) run in arrival order — on one writer thread, or batched
  at the end of each drain on the loop when ``inline_writes`` (no fsync to wait for) — so
  pipelined writes of one client apply in the order sent. Reads run inline on the loop.
* :meth:`Server.stop` finishes requests in flight and sends their replies; requests that
  arrive while stopping are answered with ``NOT_EXECUTED`` so clients may retry them
  elsewhere.
* A request flagged ``NO_REPLY`` gets no response at all, not even an error; it is
  executed all the same (writes are applied). A generator request flagged ``NO_REPLY`` is
  not started (its responses would be its only effect).

Memory budgets (bytes, :class:`ServerOptions`; ZeroMQ's own bounds count messages only).
The server never stops reading its socket for a budget: while it does not read, ZeroMQ
queues ``rcvhwm`` whole messages per connection, however many connections there are (the
issue-19 measurements: 1.8 GiB for 16 clients). What ZeroMQ holds is bounded by keeping
every message small: since wire protocol 3 a request over 64 KiB travels in **pieces**
(:func:`~tstreams_embedded.net.framing.split_request`), each its own message, and
``max_msg_size`` (``ZMQ_MAXMSGSIZE``, and the server's limit on a whole message) is one
piece, so a connection can make ZeroMQ hold about ``(rcvhwm + 2) x max_msg_size`` (1.1 MiB
at the defaults) whatever its requests' sizes. What is over a budget is held back in the
server, counted, or refused:

* **pieces** (:mod:`~tstreams_embedded.net.assembly`): a request arriving in pieces counts
  the bytes received of it against ``max_server_bytes``, piece by piece, each piece with
  :data:`~tstreams_embedded.net.assembly.PIECE_OVERHEAD` more (not the size it announces:
  a few bytes announcing 16 MiB must not lock every other client out); one
  announcing more than ``max_request_bytes`` is refused
  :class:`~tstreams_embedded.errors.RequestTooLarge` at its first piece, one whose next
  piece the budget cannot take :class:`~tstreams_embedded.errors.ServerBusy` at that
  piece, its other pieces dropped uncopied and the answer sent when its last piece is in. One
  request per client is reassembled at a time; pieces out of order, duplicated, beyond
  the announced size, or interrupted by another request's pieces get a specific
  :class:`~tstreams_embedded.errors.ProtocolError`; a request without a piece for
  ``piece_timeout`` seconds is dropped and its buffers freed. Once whole, it is
  dispatched as if its frames had come in one message.
* **per request** (``max_request_bytes``, 16 MiB, all frames together): a whole message
  larger than ``max_msg_size`` is counted frame by frame while receiving; past the limit
  the rest of it is dropped uncopied and the request answered ``RequestTooLarge`` (a
  version-2 client, which cannot send pieces, ``ProtocolVersionError``). A larger frame is
  refused by ZeroMQ at its header, before any of it is held, and its sender disconnected.
* **per client** (``max_client_bytes``): requests handed to an executor and not yet
  answered, plus replies ZeroMQ has not yet written to the client's connection (tracked,
  see :mod:`~tstreams_embedded.net.outbox`). A client over budget — typically one that
  does not read its replies — is not served further: its next requests are held back,
  in order, and run once it is under budget again. One ROUTER socket cannot stop reading
  a single peer, so holding back is the back-pressure; only when the requests held back
  exceed the budget too are the newest answered
  :class:`~tstreams_embedded.errors.ServerBusy` (not executed).
* **write queue** (``max_write_queue_bytes``): write requests queued for the ordered writer
  and not yet answered. Over it, each client's next write (and whatever it sends after
  it) is held back, in order, until the writer catches up; the writer is shared, so this
  delays everyone's writes exactly as much as they would wait anyway.
* **all clients** (``max_server_bytes``): every client's requests running or held back,
  replies unsent, and the write queue once more (the engine's copy while it writes). A
  request (other than ``ping`` and notifications) that would pass it is answered
  :class:`~tstreams_embedded.errors.ServerBusy`, not executed; over it, requests larger
  than :data:`SMALL_REQUEST` are refused without being copied, so the loop keeps ahead of
  ZeroMQ. What ZeroMQ holds per connection comes on top: the message being received, and
  up to ``rcvhwm`` queued ones while the loop is busy, each at most ``max_msg_size``
  (docs/NETWORK.md, *Memory model*; ``rcvhwm`` is fixed: libzmq leaves connections
  stalled when it is changed on open ones). A peer that does not follow the protocol can
  still send one multipart message of very many frames, which ZeroMQ holds whole: no
  ZeroMQ option bounds the frames of a message.
* **replies** are paged by the read handlers (``max_reply_bytes``, see ``handlers.py``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import zmq
from tornado.ioloop import IOLoop, PeriodicCallback

from ..errors import (
    BindFailed,
    InvalidArgument,
    ProtocolError,
    ProtocolVersionError,
    RemoteError,
    RequestTooLarge,
    ServerBusy,
    TStreamsError,
)
from . import framing, zmqfast
from .assembly import HEAD_BYTES, PIECE_OVERHEAD, Assembly
from .commits import CommitWatch
from .endpoints import check_endpoints
from .executors import Call, Done, Executors
from .outbox import Outbox
from .registry import NOTIFY, STREAM, Handler, Registry
from .scheduler import GeneratorScheduler
from .session import Session, Sessions
from .stats import ServerStats

__all__ = ["DEFAULT_MAX_CLIENT_BYTES", "DEFAULT_MAX_MSG_SIZE", "DEFAULT_MAX_REPLY_BYTES",
           "DEFAULT_MAX_REQUEST_BYTES", "DEFAULT_MAX_SERVER_BYTES", "DEFAULT_MAX_WRITE_QUEUE_BYTES", "Server",
           "ServerOptions", "ServerStats"]

log = logging.getLogger(__name__)

MiB = 1024 * 1024
#: The largest request (all frames): 16 MiB, above the client's largest (an item of
#: ``max_item_size``, 10 MiB, in its chunk). A larger one is refused at its first piece.
DEFAULT_MAX_REQUEST_BYTES = 16 * MiB
#: The largest ZeroMQ frame, and message: a piece (wire protocol 3: larger requests travel in
#: pieces of 64 KiB), so that what ZeroMQ holds per connection is a few times this.
DEFAULT_MAX_MSG_SIZE = framing.MESSAGE_LIMIT
#: Messages ZeroMQ queues per connection while the loop is busy (ZMQ_RCVHWM): with
#: messages of at most :data:`DEFAULT_MAX_MSG_SIZE`, 32 connections hold at most 32 x
#: (16 + 2) x 64 KiB = 36 MiB inside ZeroMQ.
DEFAULT_RCVHWM = 16
#: Seconds a request arriving in pieces may wait for its next piece before it is dropped.
DEFAULT_PIECE_TIMEOUT = 10.0
DEFAULT_MAX_CLIENT_BYTES = 64 * MiB
DEFAULT_MAX_WRITE_QUEUE_BYTES = 32 * MiB
DEFAULT_MAX_SERVER_BYTES = 256 * MiB
DEFAULT_MAX_REPLY_BYTES = 16 * MiB
#: Per frame, counted on top of its bytes in the budgets (Python and ZeroMQ overhead).
FRAME_OVERHEAD = 128
#: Methods answered even over ``max_server_bytes``: they hold nothing (with notifications),
#: and an operator needs the counters most when the server is overloaded.
UNBUDGETED = frozenset({"ping", "server_stats"})
#: Over ``max_server_bytes``, requests up to this size are still received and dispatched
#: (pings and notifications are served; the rest are refused after decoding); larger ones
#: are refused ``ServerBusy`` without being copied.
SMALL_REQUEST = 4096
#: After dropping this many bytes of rejected requests, give freed heap back to the system.
TRIM_AFTER = 16 * MiB


def _malloc_trim() -> Callable[[], None]:
    """glibc's ``malloc_trim(0)``: frees the unused top and holes of every arena, where
    ZeroMQ's I/O thread allocated the frames of a rejected request (a no-op elsewhere)."""
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return lambda: None

    def run() -> None:
        trim(0)

    return run

#: How a request is run once decoded: ``route(handler, session, request id, flags, args, size)``.
Route = Callable[[Handler, Session, int, int, list[Any], int], None]


@dataclass
class ServerOptions:
    """Tunables of :class:`Server` (all have safe defaults)."""

    # ZMQ_MAXMSGSIZE (per frame) and the largest message, all frames (-1: max_request_bytes);
    # at least framing.MESSAGE_LIMIT, the size of a piece
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE
    max_frames: int = 4096  # frames per request, identity included
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES  # all frames of one request
    max_client_bytes: int = DEFAULT_MAX_CLIENT_BYTES  # one client's requests running + replies unsent
    max_write_queue_bytes: int = DEFAULT_MAX_WRITE_QUEUE_BYTES  # writes queued, all clients
    max_server_bytes: int = DEFAULT_MAX_SERVER_BYTES  # all clients: requests running or held back + replies unsent
    max_drain: int = 2048  # messages per wakeup before yielding to other callbacks
    session_timeout: float = 30.0  # seconds of client silence before its session is dropped
    pool_threads: int = 4
    hwm: int = 200_000  # SNDHWM, messages per client
    # RCVHWM, messages per client: ZeroMQ counts messages, not bytes; with every message at
    # most max_msg_size (pieces), a connection makes ZeroMQ hold at most about
    # (rcvhwm + 2) x max_msg_size while the loop is busy (docs/NETWORK.md, Memory model).
    rcvhwm: int = DEFAULT_RCVHWM
    piece_timeout: float = DEFAULT_PIECE_TIMEOUT  # seconds without the next piece of a request
    linger_ms: int = 2000
    # Run write batches on the loop itself, at the end of each drain, instead of on the
    # writer thread: right when writes never wait for the disk (durability="async"), as it
    # saves two thread hand-offs per burst. Never for durable (fsync) modes.
    inline_writes: bool = False
    curve_secret_key: bytes | None = None  # enables CURVE when set
    curve_public_key: bytes | None = None


class Server:
    """A ROUTER server dispatching to a :class:`Registry`.

    ``commit_watch(seen, timeout) -> generation`` (the engine's ``wait_for_commit``) feeds
    :class:`~tstreams_embedded.net.registry.WaitCommit`; without it, waits end only on
    their timeout. The server adds the methods ``cancel``, ``server_stats`` and ``ping``
    to the registry unless it has them.
    """

    def __init__(
        self,
        registry: Registry,
        bind: str | Sequence[str],
        options: ServerOptions | None = None,
        commit_watch: CommitWatch | None = None,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        self.registry = registry
        self.binds = check_endpoints(bind, bind=True)
        self.opts = options or ServerOptions()
        self.stats = ServerStats()
        self.endpoints: list[str] = []
        self._commit_watch = commit_watch
        self._ctx: zmq.Context[Any] = context or zmq.Context.instance()
        self._sock: zmq.Socket[Any] | None = None
        self._fd: int | None = None
        self._sessions = Sessions(self.opts.session_timeout)
        self._outbox = Outbox(self.stats, self._on_unroutable, self._check_events, self._sessions.find)
        # Made by start(): they need the loop.
        self._loop: IOLoop
        self._executors: Executors
        self._generators: GeneratorScheduler
        self._reaper: PeriodicCallback | None = None
        self._started = False
        self._drain_scheduled = False
        self._write_waiters: set[Session] = set()  # sessions holding back a write for the write queue
        self._requests_bytes = 0  # the sum of every session's ``requests``
        self._parked_bytes = 0  # the sum of every session's ``parked_bytes``
        self._assembling: set[Session] = set()  # sessions with a request arriving in pieces
        self._assembling_bytes = 0  # bytes reserved for them (their announced totals)
        mms, mrb = self.opts.max_msg_size, self.opts.max_request_bytes
        self._message_bytes = mrb if mms < 0 else min(mms, mrb)  # the largest whole message
        self._trackers: PeriodicCallback | None = None
        self._rejected_bytes = 0  # since the last malloc_trim
        self._trim = _malloc_trim()
        self._max_client_bytes = self.opts.max_client_bytes
        self._stopping = False
        self._stopped = threading.Event()
        self._now = time.monotonic()  # the time of the current drain
        self._routes: dict[str, Route] = {
            "inline": self._call_inline,
            "write": self._call_write,
            "pool": self._call_pooled,
            STREAM: self._start_stream,
            NOTIFY: self._notify,
        }
        self.use_registry(registry, commit_watch)

    def use_registry(self, registry: Registry, commit_watch: CommitWatch | None = None) -> None:
        """Serve ``registry`` (before :meth:`start`; e.g. once the engine it exposes is open,
        after :meth:`bind`), adding the built-in ``cancel``, ``server_stats`` and ``ping``."""
        self.registry = registry
        if commit_watch is not None:
            self._commit_watch = commit_watch
        if "cancel" not in registry:
            registry.add("cancel", self.cancel, kind=NOTIFY)
        if "server_stats" not in registry:
            registry.add("server_stats", lambda session: self.server_stats())
        if "ping" not in registry:
            registry.add("ping", lambda session: "pong")

    # ------------------------------------------------------------------ lifecycle
    def bind(self) -> None:
        """Make the socket and bind every endpoint, or :class:`BindFailed` (then nothing
        stays bound). :meth:`start` does it if it was not done; calling it first fails
        before anything else is made (``tstreams serve`` binds before it opens the engine)."""
        if self._sock is not None:
            return
        s = self._ctx.socket(zmq.ROUTER)
        s.setsockopt(zmq.ROUTER_MANDATORY, 1)
        s.setsockopt(zmq.MAXMSGSIZE, self.opts.max_msg_size)
        s.setsockopt(zmq.SNDHWM, self.opts.hwm)
        s.setsockopt(zmq.RCVHWM, self.opts.rcvhwm)
        s.setsockopt(zmq.LINGER, self.opts.linger_ms)
        if self.opts.curve_secret_key:
            s.curve_server = True
            s.curve_secretkey = self.opts.curve_secret_key
            s.curve_publickey = self.opts.curve_public_key
        for b in self.binds:
            try:
                s.bind(b)
            except zmq.ZMQError as exc:
                s.close(0)
                raise BindFailed(f"cannot listen on {b}: {zmq.strerror(exc.errno or 0)}") from None
            self.endpoints.append(s.getsockopt_string(zmq.LAST_ENDPOINT))
        self._sock = self._outbox.sock = s

    def start(self, loop: IOLoop | None = None) -> None:
        """Bind (unless :meth:`bind` did) and start serving on ``loop`` (default: the
        current thread's IOLoop)."""
        self._loop = loop or IOLoop.current()
        self.bind()
        s = self._sock
        assert s is not None
        self._executors = Executors(self._loop, self._on_done, self.opts.pool_threads,
                                    self.opts.inline_writes)
        self._generators = GeneratorScheduler(self._loop, self._outbox, self.stats, self._commit_watch)
        self._started = True
        fd = s.getsockopt(zmq.FD)
        assert isinstance(fd, int)
        self._fd = fd
        self._loop.add_handler(fd, self._on_readable, IOLoop.READ)
        every = min(self.opts.session_timeout, self.opts.piece_timeout) * 1000 / 4
        self._reaper = PeriodicCallback(self._reap, max(100.0, every))
        self._reaper.start()
        self._trackers = PeriodicCallback(self._poll_trackers, 10)
        self._trackers.start()
        self._generators.start()
        # Messages may already be queued (the edge fired before registration).
        self._schedule_drain()
        log.info("serving on %s (pid %d)", ", ".join(self.endpoints), os.getpid())

    def stop(self, timeout: float = 10.0, on_stopped: Callable[[], None] | None = None) -> None:
        """Graceful stop (call on the loop thread): answer new requests ``NOT_EXECUTED``, wait up
        to ``timeout`` seconds for requests in flight, send their replies, close the socket and
        call ``on_stopped``."""
        if self._stopping:
            return
        self._stopping = True
        if not self._started:
            if self._sock is not None:  # bound, never started
                self._sock.close(0)
                self._sock = self._outbox.sock = None
            self._stopped.set()
            if on_stopped is not None:
                on_stopped()
            return
        self._generators.stop()
        deadline = time.monotonic() + timeout
        with self._outbox.burst():
            for s in self._sessions.all():  # generators end now; clients may re-issue them elsewhere
                self._generators.end_session(s, notify=True)
                while s.parked:  # held-back requests: NOT_EXECUTED
                    frames, size = self._unpark(s)
                    self._dispatch(frames, size)

        def poll() -> None:
            self._drain()
            if self._executors.busy and time.monotonic() < deadline:
                self._loop.call_later(0.01, poll)
                return
            self._finish()
            if on_stopped is not None:
                on_stopped()

        poll()

    def _finish(self) -> None:
        self._drain()
        if self._reaper is not None:
            self._reaper.stop()
        if self._trackers is not None:
            self._trackers.stop()
        if self._fd is not None:
            self._loop.remove_handler(self._fd)
            self._fd = None
        self._executors.stop(5)
        if self._sock is not None:
            self._sock.close(self.opts.linger_ms)
            self._sock = self._outbox.sock = None
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    # ------------------------------------------------------------------ input
    def _on_readable(self, fd: int, events: int) -> None:
        self._drain()

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._loop.add_callback(self._drain)

    def _check_events(self) -> None:
        """After a burst of sends: they may have consumed the edge-triggered FD's edge."""
        sock = self._sock
        if sock is not None and zmqfast.events(sock) & zmq.POLLIN:
            self._schedule_drain()

    def _drain(self) -> None:
        """Receive and dispatch every queued message (up to ``max_drain``). Reading never
        stops for a budget: what ZeroMQ queues is not counted in bytes (see *Memory budgets*)."""
        self._drain_scheduled = False
        sock = self._sock
        if sock is None:
            return
        self.stats.wakeups += 1
        self._now = time.monotonic()
        recv = zmqfast.recv_request
        dispatch = self._dispatch
        n = 0
        pieces = 0
        limit = self.opts.max_drain
        max_bytes, max_frames = self._message_bytes, self.opts.max_frames
        executors = self._executors
        server_budget = self.opts.max_server_bytes
        over = self.held_bytes > server_budget
        with self._outbox.burst():
            try:
                while n < limit:
                    # over the budget, only small requests are copied (pings, small reads):
                    # the others are refused uncopied, so the loop keeps up with ZeroMQ
                    keep = SMALL_REQUEST if over else max_bytes
                    frames, size, count = recv(sock, keep, max_frames)
                    n += 1
                    if type(frames[-1]) is memoryview:  # a piece (zmqfast.recv_request)
                        pieces += 1
                        self._piece(frames, count)
                        continue
                    if size > max_bytes or count > max_frames:
                        self._too_large(frames, size, count)
                        continue
                    if size > keep:
                        self._busy(self._sessions.get(frames[0], self._now), frames, size)
                        continue
                    dispatch(frames, size + count * FRAME_OVERHEAD)
                    if size > SMALL_REQUEST:  # (small ones move the total little; dispatch checks it exactly)
                        over = self.held_bytes > server_budget
            except zmq.Again:
                pass
            self.stats.received += n - pieces
            self.stats.pieces += pieces
            executors.run_inline_writes()
        if n >= limit:
            self._schedule_drain()  # more may be queued; let timers and completions run first

    def _too_large(self, frames: list[bytes], size: int, count: int) -> None:
        self.stats.too_large += 1
        version, req_id, flags = framing.guess_header(frames)
        exc: TStreamsError
        if count > self.opts.max_frames:
            exc = RequestTooLarge(f"request of {count} frames (the limit is {self.opts.max_frames}) was not "
                                  "executed; send smaller requests")
        elif size > self.opts.max_request_bytes:
            exc = RequestTooLarge(f"request of more than {self.opts.max_request_bytes} bytes (the limit, all frames "
                                  "together) was not executed; send smaller requests")
        elif version < framing.VERSION:
            exc = ProtocolVersionError(
                f"a request of more than {self._message_bytes} bytes in one message was not executed: wire "
                f"protocol version {version} sends requests whole, this server takes larger ones only in pieces "
                f"(version {framing.VERSION}); upgrade the client to this release")
        else:
            exc = RequestTooLarge(f"a message of more than {self._message_bytes} bytes (the limit, --max-msg-size) "
                                  "was not executed: larger requests travel in pieces (framing.split_request)")
        self._error(frames[0], req_id, flags, exc, version=version)
        self._trimmed_after(size)

    def _trimmed_after(self, size: int) -> None:
        """Count ``size`` bytes freed by ZeroMQ's buffers (rejected requests, pieces); every
        :data:`TRIM_AFTER` bytes, give the freed heap back to the system: ZeroMQ allocates
        frames in its I/O thread's arena, where pieces held while a request is assembled and
        pieces freed at once interleave, and glibc returns such holes only on a trim."""
        self._rejected_bytes += size
        if self._rejected_bytes >= TRIM_AFTER:
            self._rejected_bytes = 0
            self._loop.add_callback(self._trim)  # after the frames are freed

    def _error(self, identity: bytes, req_id: int, flags: int, exc: BaseException, extra_flags: int = 0,
               version: int | None = None) -> None:
        """Reply the error ``exc`` unless the request asked ``NO_REPLY`` (then only count it),
        in wire ``version`` (default: that of the client's requests)."""
        if flags & framing.NO_REPLY:
            self.stats.errors += 1
        else:
            self._outbox.send_error(identity, req_id, exc, extra_flags, version)

    # ------------------------------------------------------------------ pieces
    def _piece(self, parts: list[Any], count: int) -> None:
        """Take one piece ``[identity, header, payload]`` of a request (wire protocol 3):
        reassemble it, counted against the budgets from its first piece on, and run the
        request once whole; answer what is wrong once the request ends."""
        identity = parts[0]
        session = self._sessions.get(identity, self._now)
        req_id, index, total, flags = framing.unpack_piece_header(parts[1])
        payload = parts[2]
        a = session.assembly
        if count != 3:
            self.stats.malformed += 1
            self._error(identity, req_id, 0, ProtocolError(f"piece {index} of request {req_id} is {count - 1} "
                                                           "frames: a piece is two (header, payload)"))
            return
        if index == 0 and (a is None or a.req_id != req_id):
            if a is not None:  # the pieces of one request are sent one after another
                a.fail(ProtocolError(f"request {a.req_id} was interrupted after {a.received} of its {a.total} "
                                     f"bytes by the pieces of request {req_id}: send a request's pieces one "
                                     "after another"))
                self._end_assembly(session, a)
            a = self._open_assembly(session, req_id, total, payload)
        elif a is None or a.req_id != req_id:
            self.stats.malformed += 1
            if session.stray_piece_of != req_id:  # answered once, not per piece
                session.stray_piece_of = req_id
                self._error(identity, req_id, 0, ProtocolError(
                    f"piece {index} of request {req_id} came without the pieces before it (its request is not "
                    "being assembled: out of order, or it ended)"))
            return
        a.add(index, total, flags, payload, self._now)
        if a.error is None:
            self._reserve(a, len(payload) + PIECE_OVERHEAD)
        if a.error is not None:
            self._trimmed_after(len(payload))  # (dropped uncopied)
        if a.error is not None and a.reserved:
            self._unreserve(a)
        if flags & framing.LAST_PIECE:
            self._end_assembly(session, a)

    def _open_assembly(self, session: Session, req_id: int, total: int, payload: Any) -> Assembly:
        opts = self.opts
        a = Assembly(req_id, total, bytes(payload[:HEAD_BYTES]), self._now, opts.max_frames)
        if total > opts.max_request_bytes:
            self.stats.too_large += 1
            a.fail(RequestTooLarge(f"request of {total} bytes (announced by its first piece) was not executed: "
                                   f"the limit is {opts.max_request_bytes} bytes, all frames together; send "
                                   "smaller requests"))
        session.assembly = a
        self._assembling.add(session)
        return a

    def _reserve(self, a: Assembly, size: int) -> None:
        """Count ``size`` bytes more of ``a`` as received (what it holds, not what it announced:
        a first piece of a few bytes announcing 16 MiB must not take 16 MiB of the budget from
        every other client), or fail it ``ServerBusy`` when the budget cannot take them."""
        opts = self.opts
        if self.held_bytes + size > opts.max_server_bytes:  # (while stopping too: pieces still arrive)
            self.stats.busy += 1
            a.fail(ServerBusy(f"request of {a.total} bytes not executed: the server holds {self.held_bytes} bytes "
                              f"for all clients (budget {opts.max_server_bytes}); send it again later"))
            return
        a.reserved += size
        self._assembling_bytes += size

    def _unreserve(self, a: Assembly) -> None:
        self._assembling_bytes -= a.reserved
        a.reserved = 0

    def _end_assembly(self, session: Session, a: Assembly) -> None:
        """The request ``a`` has ended (its last piece, interrupted or timed out): run it if
        whole, else answer its error."""
        session.assembly = None
        self._assembling.discard(session)
        self._unreserve(a)
        self._trimmed_after(a.received)  # its pieces are freed (joined into its frames)
        self.stats.received += 1
        if a.complete:
            frames = [session.identity, *a.frames]
            self._dispatch(frames, a.total + len(frames) * FRAME_OVERHEAD)
            return
        if a.error is None:  # (timed out or interrupted before its first error)
            a.fail(ProtocolError(f"request {a.req_id} ended after {a.received} of its {a.total} bytes"))
        assert a.error is not None
        if isinstance(a.error, ProtocolError):
            self.stats.malformed += 1
        version, _, flags = framing.guess_header([session.identity, a.head])
        self._error(session.identity, a.req_id, flags, a.error, version=version)

    def _forget_assembly(self, session: Session) -> None:
        a = session.assembly
        if a is not None:
            session.assembly = None
            self._assembling.discard(session)
            self._unreserve(a)

    def _reap_assemblies(self, now: float) -> None:
        limit = now - self.opts.piece_timeout
        for s in [s for s in self._assembling if s.assembly is not None and s.assembly.last_seen < limit]:
            a = s.assembly
            assert a is not None
            a.fail(ProtocolError(f"request {a.req_id} was abandoned: no piece for {self.opts.piece_timeout:g} s "
                                 f"after {a.received} of its {a.total} bytes"))
            self._end_assembly(s, a)

    # ------------------------------------------------------------------ budgets
    def _on_done(self, done: list[Done]) -> None:
        """Results of executor calls (on the loop): release their budgets and reply, in one
        burst, then resume the clients that were held back."""
        touched = []
        outbox = self._outbox
        send_value, send_error = outbox.send_value, outbox.send_error
        with outbox.burst():
            for call, ok, value in done:
                s = call.session
                s.requests -= call.size
                self._requests_bytes -= call.size
                if s.parked:
                    touched.append(s)
                if call.flags & framing.NO_REPLY:
                    if not ok:
                        self.stats.errors += 1
                elif ok:
                    send_value(s.identity, call.req_id, value, 0, s)
                else:
                    send_error(s.identity, call.req_id, value)
        self._resume(touched)

    def _poll_trackers(self) -> None:
        if self._outbox.tracking:
            self._resume([s for s in self._outbox.poll_trackers() if s.parked])

    def _resume(self, sessions: list[Session]) -> None:
        """Run the held-back requests of ``sessions`` now under budget, and of the sessions
        waiting for the write queue once it is under its budget (each client's in order)."""
        budget = self.opts.max_client_bytes
        executors = self._executors
        write_budget = self.opts.max_write_queue_bytes
        if self._write_waiters and executors.write_bytes <= write_budget:
            sessions = [*sessions, *self._write_waiters]
            self._write_waiters.clear()
        if sessions:
            with self._outbox.burst():
                for s in sessions:
                    while s.parked and s.in_flight <= budget and not s.closed:
                        if executors.write_bytes > write_budget:
                            self._write_waiters.add(s)
                            break
                        frames, size = self._unpark(s)
                        self._dispatch(frames, size, parked=True)
            if executors.inline_pending:
                self._schedule_drain()  # runs them (not here: each loop turn writes one batch)

    @property
    def held_bytes(self) -> int:
        """Bytes held for all clients: requests running or held back, replies unsent, and
        the writes queued once more (the engine copies a write batch into LMDB's dirty
        pages while it writes it)."""
        written = self._executors.write_bytes if self._started else 0
        return (self._requests_bytes + written + self._parked_bytes + self._outbox.reply_bytes
                + self._assembling_bytes)

    def _hold_back(self, session: Session, frames: list[bytes], size: int) -> None:
        """Keep a request to run later, in order, or answer it ``ServerBusy`` when that would
        put its client's held-back requests or the server's total over budget."""
        opts = self.opts
        if session.parked_bytes + size <= opts.max_client_bytes and self.held_bytes + size <= opts.max_server_bytes:
            session.parked.append((frames, size))
            session.parked_bytes += size
            self._parked_bytes += size
            self.stats.held_back += 1
            return
        self._busy(session, frames, size)

    def _busy(self, session: Session, frames: list[bytes], size: int) -> None:
        self.stats.busy += 1
        version, req_id, flags = framing.guess_header(frames)
        self._error(session.identity, req_id, flags, ServerBusy(
            f"request of {size} bytes not executed: this client has {session.in_flight} bytes in flight and "
            f"{session.parked_bytes} bytes of requests waiting (budget {self.opts.max_client_bytes}), the server "
            f"{self.held_bytes} bytes for all clients (budget {self.opts.max_server_bytes}); "
            "read the replies owed, then send it again"), version=version)

    def _unpark(self, session: Session) -> tuple[list[bytes], int]:
        frames, size = session.parked.popleft()
        session.parked_bytes -= size
        self._parked_bytes -= size
        return frames, size

    def _forget_parked(self, session: Session) -> None:
        self._parked_bytes -= session.parked_bytes
        session.parked.clear()
        session.parked_bytes = 0
        self._write_waiters.discard(session)

    def _reap(self) -> None:
        now = time.monotonic()
        if self._assembling:
            with self._outbox.burst():
                self._reap_assemblies(now)
        for s in self._sessions.expired(now):
            self._generators.end_session(s, notify=False)
            self._outbox.forget(s)
            self._forget_parked(s)
            self._forget_assembly(s)

    def _on_unroutable(self, identity: bytes) -> None:
        s = self._sessions.drop(identity)
        if s is not None:
            self._generators.end_session(s, notify=False)
            self._outbox.forget(s)
            self._forget_parked(s)
            self._forget_assembly(s)

    # ------------------------------------------------------------------ dispatch
    def _dispatch(self, frames: list[bytes], size: int = 0, parked: bool = False) -> None:
        """Run one request of ``size`` bytes (budget accounting included), or hold it back
        while its client is over budget."""
        identity = frames[0]
        session = self._sessions.get(identity, self._now)
        if not parked and not self._stopping:
            if session.parked or session.requests + session.replies > self._max_client_bytes:
                self._hold_back(session, frames, size)
                return
        try:
            session.version, req_id, method, flags, args = framing.unpack_request(frames)
        except ProtocolError as e:
            self.stats.malformed += 1
            version, req_id, flags = framing.guess_header(frames)
            self._error(identity, req_id, flags, e, version=version)
            return
        if self._stopping:
            self._error(identity, req_id, flags, RemoteError("server is shutting down; request not executed"),
                        framing.NOT_EXECUTED)
            return
        h = self.registry.get(method)
        if h is None:
            self.stats.malformed += 1
            self._error(identity, req_id, flags, ProtocolError(f"unknown method {method[:64]!r}"))
            return
        if not (h.min_args <= len(args) <= h.max_args):
            self._error(identity, req_id, flags, InvalidArgument(
                f"{method}() takes {h.arity_text()} arguments, got {len(args)}"))
            return
        if (not parked and not self._stopping and h.route != NOTIFY and method not in UNBUDGETED
                and self.held_bytes + size > self.opts.max_server_bytes):
            self._busy(session, frames, size)
            return
        if h.route == "write" and self._executors.write_bytes > self.opts.max_write_queue_bytes:
            # the writer is behind: this client's requests wait, in order, in the server
            self.stats.write_held += 1
            self._write_waiters.add(session)
            if parked:  # (taken off its queue by _resume: back to the front, still counted)
                session.parked.appendleft((frames, size))
                session.parked_bytes += size
                self._parked_bytes += size
            else:
                self._hold_back(session, frames, size)
            return
        self._routes[h.route](h, session, req_id, flags, args, size)

    def _call_inline(self, h: Handler, session: Session, req_id: int, flags: int, args: list[Any],
                     size: int) -> None:
        try:
            value = h.fn(session, *args)
        except Exception as e:
            self._error(session.identity, req_id, flags, e)
        else:
            if not flags & framing.NO_REPLY:
                self._outbox.send_value(session.identity, req_id, value, 0, session)

    def _call_write(self, h: Handler, session: Session, req_id: int, flags: int, args: list[Any],
                    size: int) -> None:
        session.requests += size
        self._requests_bytes += size
        self._executors.write(h, Call(session, req_id, flags, size), args)

    def _call_pooled(self, h: Handler, session: Session, req_id: int, flags: int, args: list[Any],
                     size: int) -> None:
        session.requests += size
        self._requests_bytes += size
        self._executors.pool(h, Call(session, req_id, flags, size), args)

    def _start_stream(self, h: Handler, session: Session, req_id: int, flags: int, args: list[Any],
                      size: int) -> None:
        if flags & framing.NO_REPLY:  # its responses would be its only effect
            return
        try:
            gen = h.fn(session, *args)
        except Exception as e:
            self._outbox.send_error(session.identity, req_id, e)
            return
        self._generators.run(session, req_id, gen)

    def _notify(self, h: Handler, session: Session, req_id: int, flags: int, args: list[Any],
                size: int) -> None:
        try:
            h.fn(session, *args)
        except Exception as e:
            self.stats.errors += 1
            log.debug("notify %s failed: %s", h.name, e)

    # ------------------------------------------------------------------ built-in methods
    def cancel(self, session: Session, req_id: int) -> bool:
        """End the generator request ``req_id`` of ``session`` (no further responses)."""
        return self._generators.cancel(session, req_id)

    def server_stats(self) -> dict[str, Any]:
        """The counters of :class:`ServerStats` and a few facts about this server."""
        st = self.stats
        return {
            "pid": os.getpid(),
            "endpoints": list(self.endpoints),
            "sessions": len(self._sessions),
            "received": st.received,
            "pieces": st.pieces,
            "replies": st.replies,
            "errors": st.errors,
            "malformed": st.malformed,
            "unroutable": st.unroutable,
            "dropped": st.dropped,
            "wakeups": st.wakeups,
            "running_generators": st.running_generators,
            "write_batches": self._executors.write_batches if self._started else 0,
            "write_calls": self._executors.write_calls if self._started else 0,
            "max_msg_size": self.opts.max_msg_size,
            "max_request_bytes": self.opts.max_request_bytes,
            "max_client_bytes": self.opts.max_client_bytes,
            "max_write_queue_bytes": self.opts.max_write_queue_bytes,
            "too_large": st.too_large,
            "held_back": st.held_back,
            "busy": st.busy,
            "write_held": st.write_held,
            "write_queue_bytes": self._executors.write_bytes if self._started else 0,
            "clients_bytes": sum(s.in_flight + s.parked_bytes for s in self._sessions.all()),
            "held_bytes": self.held_bytes,
            "assembling": len(self._assembling),
            "assembling_bytes": self._assembling_bytes,
            "rcvhwm": self.opts.rcvhwm,
            "max_server_bytes": self.opts.max_server_bytes,
        }
