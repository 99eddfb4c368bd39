"""The client transport: one DEALER socket, pipelined requests, futures, reconnection.

Threads. A background I/O thread watches the connection (socket monitor, heartbeats,
request deadlines) and receives replies nobody else is waiting for. User threads send their
own requests under a mutex (ZeroMQ allows a socket to change threads with a full memory
barrier between uses), and a thread blocked in a synchronous call takes the *receiver
role* when it is free: it reads replies itself — dispatching other threads' replies to
their futures — until its own arrives. A single-threaded synchronous caller therefore pays
no thread hand-off at all (measured here: 126 µs round trip instead of 275 µs with a
hand-off in each direction); pipelined and multi-threaded callers are served by whichever
thread holds the role, usually the I/O thread, which drains every queued reply per wakeup.

The socket's ``zmq.FD`` is edge-triggered, so every holder of the socket re-checks
``zmq.EVENTS`` after using it and wakes the receiver (a pipe) if input is pending that
nobody will read: one rule, in :meth:`Connection._ensure_reader`.

Failure handling — what the caller sees:

* **No server** (never connected, or disconnected): requests wait, *unsent*, until a
  connection completes its handshake or their timeout passes; then they fail with
  :class:`RemoteError` "not connected". An unsent request was certainly not executed
  (``ZMQ_IMMEDIATE`` keeps ZeroMQ from queueing for a peer that is not there).
* **Connection lost** with requests in flight (the socket monitor reports it; ZMTP
  heartbeats detect a silent peer): requests marked ``retry_safe`` (reads, long polls) are
  sent again after reconnection; writes fail with :class:`RemoteError` stating that the
  outcome is unknown.
* **No reply within the timeout**: :class:`RemoteError` (outcome unknown for writes).
* **Server stopping** (it answers ``NOT_EXECUTED``): the request is held and sent again on
  the next connection — e.g. through HAProxy to another server — without the caller noticing.
* **Error replies** re-raise the server's exception class via ``error_from_wire``.
* **Closing the client** with requests in flight: writes already sent get their reply first
  (``close`` waits up to ``CLOSE_DRAIN``), so a write never raises ``EngineClosed`` after
  the server executed it; requests never sent, and reads, fail with ``EngineClosed``.

Reconnection is ZeroMQ's own (every ``reconnect_ivl``), so a restarted server is used again
transparently. After ``heartbeat`` seconds of silence the client sends a ``ping``, which
keeps the server-side session (and idle proxies) alive.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import zmq

from ..engine.protocol.validate import check_interval
from ..errors import EngineClosed, ProtocolError, ProtocolVersionError, RemoteError, error_from_wire
from . import framing, zmqfast
from .dealer import (
    HANDSHAKE_FAILURES,
    POLLIN,
    expired_message,
    lost_message,
    monitor_event,
    open_dealer,
)
from .endpoints import check_endpoints
from .future import Future

log = logging.getLogger(__name__)

class Transport(Protocol):
    """What :class:`~tstreams_embedded.net.client.RemoteBackend` needs of its connection:
    :class:`Connection` (threads) or :class:`tstreams_embedded.aio.connection.AsyncConnection`
    (an asyncio event loop)."""

    endpoints: list[str]

    @property
    def closed(self) -> bool: ...

    @property
    def connected(self) -> bool: ...

    def request(self, method: str, body: Sequence[bytes] = (), timeout: float | None = None,
                retry_safe: bool = False, on_item: Callable[[Any], Any] | None = None) -> Future: ...

    def call(self, method: str, *args: Any, timeout: float | None = None, retry_safe: bool = True) -> Any: ...

    def call_frames(self, method: str, body: Sequence[bytes], timeout: float | None = None,
                    retry_safe: bool = True) -> Any: ...

    def wait(self, fut: Future, timeout: float) -> Any: ...

    def cancel(self, future: Future) -> None: ...

    def pause(self, seconds: float) -> None: ...

    def close(self) -> None: ...


class _Req:
    __slots__ = ("id", "method", "messages", "sent", "future", "deadline", "retry_safe", "on_item", "epoch",
                 "timeout")

    def __init__(self, rid: int, method: str, messages: list[list[Any]], future: Future, timeout: float,
                 retry_safe: bool, on_item: Callable[[Any], Any] | None) -> None:
        self.id = rid
        self.method = method
        self.messages = messages  # one message, or the pieces of a large request (framing.split_request)
        self.sent = 0  # messages of it sent on the current connection
        self.future = future
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.retry_safe = retry_safe
        self.on_item = on_item
        self.epoch = -1  # connection epoch it was sent on; -1 = not sent


class Connection:
    """A pipelined request/response channel to one or more server endpoints.

    ``curve`` is ``(server_public, client_public, client_secret)`` (Z85 bytes) or None.
    Thread-safe.
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        timeout: float = 30.0,
        heartbeat: float = 2.0,
        curve: tuple[bytes, bytes, bytes] | None = None,
        reconnect_ivl_ms: int = 100,
        reconnect_ivl_max_ms: int = 1000,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        eps = check_endpoints(endpoints, bind=False)
        check_interval(timeout, "timeout")  # finite: nan, inf or 1e308 would wait forever
        check_interval(heartbeat, "heartbeat")
        self.endpoints = eps
        self.timeout = float(timeout)
        self.heartbeat = float(heartbeat)
        self._ctx = context or zmq.Context.instance()
        self._ids = itertools.count(1)
        self._io = threading.Lock()  # the socket and the request tables
        self._token = threading.Lock()  # the receiver role
        self._wake_pending = False  # a byte is in the wake pipe, or is about to be (see _drain_pipe)
        self._sends = 0  # messages sent (under _io)
        self._watching = False  # the I/O thread is blocked watching the socket's FD
        self._closed = False
        self._draining = False  # close() is waiting for the replies to writes in flight
        self._pending: dict[int, _Req] = {}
        self._backlog: deque[_Req] = deque()  # registered, not sent (no connection)
        self._deadlines: list[tuple[float, int]] = []
        self._live: dict[str, int] = {}
        self._epoch = 0
        self._hold = False  # after NOT_EXECUTED: send nothing until a new connection
        self._last_rx = time.monotonic()
        self._last_ping = 0.0
        self._last_failure = ""
        self.handshakes = 0
        self.disconnects = 0
        s, self._mon = open_dealer(self._ctx, eps, heartbeat, curve, reconnect_ivl_ms, reconnect_ivl_max_ms)
        self._sock = s
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._zfd: int = s.getsockopt(zmq.FD)  # type: ignore[assignment]  # (an int for zmq.FD)
        self._thread = threading.Thread(target=self._run, name="tstreams-client-io", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ user side
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connected(self) -> bool:
        return any(self._live.values())

    def request(self, method: str, body: Sequence[bytes] = (), timeout: float | None = None,
                retry_safe: bool = False, on_item: Callable[[Any], Any] | None = None,
                _will_receive: bool = False) -> Future:
        """Send ``method`` with the encoded ``body`` frames; return the future of its final reply.

        ``on_item`` receives each intermediate response of a generator method (on whichever
        thread is receiving; keep it short).
        """
        rid = next(self._ids)
        fut = Future()
        fut.request_id = rid
        r = _Req(rid, method, self._messages(rid, method, body), fut,
                 self.timeout if timeout is None else timeout, retry_safe, on_item)
        with self._io:
            if self._closed or self._draining:
                raise EngineClosed("the remote connection is closed")
            self._pending[rid] = r
            heapq.heappush(self._deadlines, (r.deadline, rid))
            if self._backlog or not self._can_send() or not self._try_send_request(r):
                self._backlog.append(r)
            else:
                r.epoch = self._epoch
            # A caller about to receive looks at the socket itself (see wait()).
            input_pending = not _will_receive and self._input_pending()
        if not _will_receive:
            self._ensure_reader(input_pending)
        return fut

    def notify(self, method: str, body: Sequence[bytes] = ()) -> None:
        """Send a fire-and-forget message: no reply, not tracked; if not connected it waits
        (at most ``timeout``) for a connection, then it is dropped."""
        fut = Future()
        fut.set_result(None)
        r = _Req(0, method, [framing.request_frames(0, method, 0, body)], fut, self.timeout, False, None)
        with self._io:
            if self._closed:
                raise EngineClosed("the remote connection is closed")
            if self._backlog or not self._can_send() or not self._try_send_request(r):
                self._backlog.append(r)
            input_pending = self._input_pending()
        self._ensure_reader(input_pending)

    def cancel(self, future: Future) -> None:
        """End a generator request: the server closes it; no callback runs after this returns."""
        with self._io:
            r = self._pending.pop(future.request_id, None)
        if r is None:
            return
        r.future.set_exception(EngineClosed("request cancelled"))
        if not self._closed:
            self.notify("cancel", framing.encode_args([r.id]))

    def call(self, method: str, *args: Any, timeout: float | None = None, retry_safe: bool = True) -> Any:
        """Blocking request with msgpack-encoded ``args``; return the reply value or raise its error."""
        return self.call_frames(method, framing.encode_args(args), timeout, retry_safe)

    def call_frames(self, method: str, body: Sequence[bytes], timeout: float | None = None,
                    retry_safe: bool = True) -> Any:
        """Blocking request with pre-encoded body frames."""
        t = self.timeout if timeout is None else timeout
        fut = self.request(method, body, t, retry_safe, _will_receive=True)
        return self.wait(fut, t + 5.0)

    def wait(self, fut: Future, timeout: float) -> Any:
        """Wait for ``fut`` (receiving replies on this thread when nobody else is); return its value."""
        deadline = time.monotonic() + timeout
        nudged = False
        while not fut.done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if self._token.acquire(False):
                try:
                    self._receive_until(fut, deadline)
                finally:
                    self._release_token()
            else:
                if not nudged:
                    nudged = True
                    self._ensure_reader(receiver_busy=True)
                fut.wait(min(remaining, 0.05))
        if not fut.done():
            raise RemoteError(f"no reply from {', '.join(self.endpoints)} within {timeout:g}s")
        return fut.result(0)

    def pause(self, seconds: float) -> None:
        """A back-off between two attempts of a request (this thread sleeps)."""
        time.sleep(seconds)

    #: how long :meth:`close` waits for the replies to writes already sent (seconds)
    CLOSE_DRAIN = 10.0

    def close(self) -> None:
        """Refuse new requests; wait (at most :data:`CLOSE_DRAIN`) for the replies to writes
        already sent, so that a write racing the close reports its real outcome (never
        :class:`EngineClosed` for a write the server executed: a caller would retry it and
        duplicate it); then stop the I/O thread and close the socket. Reads and requests never
        sent fail with :class:`EngineClosed`; writes sent and still unanswered with
        :class:`RemoteError` ("may or may not have been executed")."""
        with self._io:
            if self._closed or self._draining:
                return
            self._draining = True
            writes = [r.future for r in self._pending.values() if r.epoch >= 0 and not r.retry_safe]
        deadline = time.monotonic() + min(self.CLOSE_DRAIN, self.timeout)
        for fut in writes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                self.wait(fut, remaining)  # receives the replies if no other thread does
            except Exception:  # noqa: BLE001, S110 - its caller gets the outcome from the future
                pass
        with self._io:
            if self._closed:
                return
            self._closed = True
        self._wake(force=True)
        if self._thread is not threading.current_thread():
            self._thread.join(10)

    # ------------------------------------------------------------------ the edge-triggered FD
    def _input_pending(self) -> bool:
        """Whether a reply is queued on the socket (caller holds ``_io``). Reading
        ``zmq.EVENTS`` also processes ZeroMQ's pending commands, which re-arms the FD."""
        return bool(zmqfast.events(self._sock) & POLLIN)

    def _ensure_reader(self, input_pending: bool = False, receiver_busy: bool = False) -> None:
        """Make sure some thread will read the replies owed; call after any use of the
        socket outside :meth:`_recv_all` (and without holding ``_io``).

        The socket's ``zmq.FD`` is edge-triggered and any send may consume its edge, so a
        thread blocked on it may never learn of input that arrived meanwhile (pyzmq's
        ``ZMQStream._update_handler`` applies the same rule). Wake the receiver (or the I/O
        thread) through the pipe when:

        * ``input_pending``: the caller found input queued (:meth:`_input_pending`) after
          using the socket;
        * ``receiver_busy``: the caller sent while another thread holds the receiver role,
          which may be blocked on the FD whose edge the send consumed;
        * replies are owed and the I/O thread is not watching the socket.
        """
        if input_pending or receiver_busy or (self._pending and not self._watching):
            self._wake()

    # ------------------------------------------------------------------ receiving
    def _wake(self, force: bool = False) -> None:
        if force or not self._wake_pending:
            self._wake_pending = True
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

    def _drain_pipe(self) -> None:
        """Empty the wake pipe, then clear ``_wake_pending`` (only the receiver-role holder
        calls this, and it looks at the socket right after).

        The order matters. ``_wake`` skips the write while the flag is set, so the flag must
        never stay set with the pipe empty: clearing it *before* reading let a wake written
        in between be swallowed by the read, leaving the flag set and every later wake
        suppressed until a poll timed out (the heartbeat, 2 s). Cleared after the read, a
        wake skipped meanwhile was requested before the caller's following look at the
        socket, which therefore covers it.
        """
        try:
            while os.read(self._wake_r, 4096):
                pass
        except OSError:
            pass
        self._wake_pending = False

    def _receive_until(self, fut: Future, deadline: float) -> None:
        """Holding the receiver role: read replies until ``fut`` is resolved or the deadline."""
        fds = [self._zfd, self._wake_r]
        while True:
            if self._wake_pending:
                self._drain_pipe()
            with self._io:
                if self._closed:
                    return
                self._recv_all()
            if fut.done():
                return
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                return
            with self._io:  # requests past their deadline fail now, not at the I/O thread's next tick
                self._expire(now)
                nearest = self._deadlines[0][0] - now if self._deadlines else remaining
            if fut.done():
                return
            select.select(fds, [], [], max(0.0, min(remaining, self.heartbeat, nearest + 0.001)))

    def _release_token(self, wake: bool = True) -> None:
        self._token.release()
        if wake:  # replies still owed to others: make sure the I/O thread watches the socket
            self._ensure_reader()

    def _recv_all(self) -> None:
        """Read every queued reply (caller holds ``_io``). Checks ``zmq.EVENTS`` rather than
        waiting for ``zmq.Again``: building that exception costs more than the check, and
        the check also re-arms the edge-triggered FD."""
        recv = zmqfast.recv_multipart
        sock = self._sock
        pending = self._pending
        events = zmqfast.events
        requeued = False
        try:
            while events(sock) & POLLIN:
                frames = recv(sock)
                self._last_rx = time.monotonic()
                try:
                    rid, flags, value = framing.unpack_reply(frames)
                except ProtocolVersionError as e:  # an older server: it cannot read any of our requests
                    self._fail_sent(e)
                    continue
                except ProtocolError as e:
                    log.warning("malformed reply ignored: %s", e)
                    continue
                r = pending.get(rid)
                if r is None:
                    continue  # a reply to a request that already timed out or failed over
                if flags & framing.ERROR:
                    if flags & framing.NOT_EXECUTED:  # the server is stopping: send again on the next connection
                        r.epoch = -1
                        r.sent = 0
                        self._backlog.append(r)
                        requeued = True
                        self._hold = True
                        continue
                    del pending[rid]
                    try:
                        name, message = value
                        exc = error_from_wire(str(name), str(message))
                    except (TypeError, ValueError):
                        exc = RemoteError(f"malformed error reply: {value!r:.200}")
                    r.future.set_exception(exc)
                elif flags & framing.MORE:
                    r.deadline = time.monotonic() + r.timeout
                    heapq.heappush(self._deadlines, (r.deadline, rid))
                    if r.on_item is not None:
                        try:
                            r.on_item(value)
                        except Exception:
                            log.exception("stream callback failed")
                else:
                    del pending[rid]
                    r.future.set_result(value)
        except zmq.Again:
            pass
        finally:
            if requeued:  # re-send in the original order
                self._backlog = deque(sorted(self._backlog, key=lambda q: q.id))

    def _fail_sent(self, exc: Exception) -> None:
        """Fail every request sent and not yet answered with ``exc`` (caller holds ``_io``)."""
        for rid, r in list(self._pending.items()):
            if r.epoch >= 0:
                del self._pending[rid]
                r.future.set_exception(type(exc)(str(exc)))

    # ------------------------------------------------------------------ sending (caller holds _io)
    def _can_send(self) -> bool:
        return not self._hold and any(self._live.values())

    def _try_send(self, frames: list[Any]) -> bool:
        try:
            zmqfast.send_multipart(self._sock, frames)
            self._sends += 1
            return True
        except zmq.Again:
            return False

    def _try_send_request(self, r: _Req) -> bool:
        """Send the messages of ``r`` not yet sent; whether all are (the rest stays for later,
        at the head of the backlog: a request's pieces go out one after another)."""
        messages = r.messages
        if len(messages) == 1:
            return self._try_send(messages[0])
        send_piece, sock = zmqfast.send_piece, self._sock
        try:
            while r.sent < len(messages):
                send_piece(sock, *messages[r.sent])
                r.sent += 1
                self._sends += 1
        except zmq.Again:
            return False
        return True

    def _messages(self, rid: int, method: str, body: Sequence[Any]) -> list[list[Any]]:
        """The ZeroMQ messages of a request: pieces when it is large (wire protocol 3), unless
        the DEALER has several endpoints: it round-robins messages among them, so a request's
        pieces would reach different servers; there a request travels whole (and one over
        the server's message size is refused, see ``RemoteBackend.check_request_size``)."""
        if len(self.endpoints) > 1:
            return [framing.request_frames(rid, method, 0, body)]
        return framing.request_messages(rid, method, 0, body)

    def _send_backlog(self) -> None:
        if not self._backlog or not self._can_send():
            return
        b = self._backlog
        now = time.monotonic()
        while b:
            r = b[0]
            if r.id == 0:  # a notification: send unless stale
                if r.deadline < now:
                    b.popleft()
                    continue
            elif r.sent == 0 and self._pending.get(r.id) is not r:  # (a request begun is finished)
                b.popleft()
                continue
            if not self._try_send_request(r):
                return
            b.popleft()
            r.epoch = self._epoch

    # ------------------------------------------------------------------ I/O thread
    def _run(self) -> None:
        # The I/O thread watches the socket's FD only while someone's replies need reading and
        # no user thread is receiving; otherwise it would wake for every reply a synchronous
        # caller reads itself.
        with_fd = zmq.Poller()
        without_fd = zmq.Poller()
        for p in (with_fd, without_fd):
            p.register(self._mon, zmq.POLLIN)
            p.register(self._wake_r, zmq.POLLIN)
        with_fd.register(self._zfd, zmq.POLLIN)
        try:
            while not self._closed:
                watch = bool(self._pending) and not self._token.locked()
                self._watching = watch
                events = dict((with_fd if watch else without_fd).poll(self._poll_timeout_ms()))
                self._watching = False
                with self._io:
                    if self._closed:
                        break
                    sends = self._sends
                    if self._mon in events:
                        self._on_monitor()
                    self._send_backlog()
                    self._timers()
                    sent = self._sends != sends
                # Receive (after our own sends, which may have spent the FD's edge). If a user
                # thread is receiving, wait for it briefly instead of spinning on the pipe.
                if self._token.acquire(True, 0.05):
                    try:
                        self._drain_pipe()
                        with self._io:
                            if not self._closed:
                                self._recv_all()
                    finally:
                        self._token.release()
                elif sent:  # our sends (backlog, ping) while a user thread holds the receiver role
                    self._ensure_reader(receiver_busy=True)
        except Exception:  # pragma: no cover - a bug here must not hang callers forever
            log.exception("tstreams client I/O thread failed")
        finally:
            self._shutdown()

    def _poll_timeout_ms(self) -> int:
        t = self.heartbeat
        if self._deadlines:
            t = min(t, self._deadlines[0][0] - time.monotonic())
        if self._backlog and self._can_send():
            t = min(t, 0.01)
        return max(0, int(t * 1000) + 1)

    def _on_monitor(self) -> None:
        while True:
            try:
                msg = self._mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            event, endpoint = monitor_event(msg)
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._live[endpoint] = self._live.get(endpoint, 0) + 1
                self._epoch += 1
                self.handshakes += 1
                self._hold = False
                self._last_failure = ""
                self._last_rx = time.monotonic()
                self._send_backlog()
            elif event == zmq.EVENT_DISCONNECTED:
                if self._live.get(endpoint, 0) > 0:
                    self._live[endpoint] -= 1
                    self.disconnects += 1
                    self._connection_lost(endpoint)
            elif event == zmq.EVENT_MONITOR_STOPPED:
                return
            else:
                why = HANDSHAKE_FAILURES.get(event, "protocol error")
                self._last_failure = f" (last handshake with {endpoint} failed: {why})"

    def _connection_lost(self, endpoint: str) -> None:
        """Requests sent on the lost connection: reads go again, writes fail (outcome unknown)."""
        epoch = self._epoch
        self._epoch += 1
        retry = []
        for r in list(self._pending.values()):
            if r.epoch < 0 or r.epoch > epoch:
                continue
            if r.retry_safe:
                r.epoch = -1
                retry.append(r)
            else:
                del self._pending[r.id]
                r.future.set_exception(RemoteError(lost_message(endpoint, r.method)))
        for r in self._backlog:  # pieces sent on the lost connection: all again, from the first
            r.sent = 0
        if retry:
            self._backlog = deque(sorted([*self._backlog, *retry], key=lambda q: q.id))

    def _timers(self) -> None:
        now = time.monotonic()
        self._expire(now)
        if (self._can_send() and now - self._last_rx >= self.heartbeat
                and now - self._last_ping >= self.heartbeat):
            self._last_ping = now
            self._try_send([framing.request_frame(0, "ping", framing.NO_REPLY)])

    def _expire(self, now: float) -> None:
        """Fail the requests whose deadline passed (caller holds ``_io``)."""
        dl = self._deadlines
        while dl and dl[0][0] <= now:
            deadline, rid = heapq.heappop(dl)
            r = self._pending.get(rid)
            if r is None or r.deadline != deadline:
                continue
            del self._pending[rid]
            sent = r.epoch >= 0 or r.sent > 0  # (a request begun goes out whole: its pieces may arrive)
            r.future.set_exception(RemoteError(expired_message(self.endpoints, r.method, r.timeout, sent,
                                                               self._last_failure)))
        if len(dl) > 4 * len(self._pending) + 1024:  # drop stale heap entries
            self._deadlines = [(r.deadline, r.id) for r in self._pending.values()]
            heapq.heapify(self._deadlines)

    def _shutdown(self) -> None:
        with self._io:
            self._closed = True
            err = EngineClosed("the remote connection is closed")
            sent = RemoteError("the connection was closed before the reply came; the request may or may not have "
                               "been executed")
            pending = list(self._pending.values())
            self._pending.clear()
            self._backlog.clear()
            try:
                self._sock.disable_monitor()
            except zmq.ZMQError:
                pass
            self._mon.close(0)
            self._sock.close()
        for r in pending:
            r.future.set_exception(sent if r.epoch >= 0 and not r.retry_safe else err)  # a read: no harm done
        with self._token:  # nobody is receiving any more
            for fd in (self._wake_r, self._wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
