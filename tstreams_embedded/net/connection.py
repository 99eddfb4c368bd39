"""The client transport: one DEALER socket owned by a background I/O thread.

User threads never touch the socket. :meth:`Connection.request` puts the encoded request
on a queue, wakes the I/O thread through a pipe (only when it may be asleep), and returns
a :class:`~.future.Future`; any number of requests may be in flight (pipelining), and
replies are matched to futures by request ID.

Failure handling — what the caller sees:

* **No server** (never connected, or disconnected): requests wait, *unsent*, until a
  connection completes its handshake or their timeout passes; then they fail with
  :class:`RemoteError` "not connected". An unsent request was certainly not executed.
  ``ZMQ_IMMEDIATE`` keeps ZeroMQ itself from queueing them for a dead peer.
* **Connection lost** with requests in flight (ZeroMQ's socket monitor reports it; ZMTP
  heartbeats detect a silent peer): requests marked ``retry_safe`` (reads, long polls) are
  sent again after reconnection; writes fail with :class:`RemoteError` stating that the
  outcome is unknown.
* **No reply within the timeout**: :class:`RemoteError` (outcome unknown for writes).
* **Server stopping** (it answers ``NOT_EXECUTED``): the request is held and sent again on
  the next connection — e.g. through HAProxy to another server — without the caller noticing.
* **Error replies** re-raise the server's exception class via ``error_from_wire``.

Reconnection is ZeroMQ's own (every ``reconnect_ivl``), so a restarted server is used again
transparently. The I/O thread sends a ``ping`` after ``heartbeat`` seconds of silence, which
keeps the server-side session (and idle proxies) alive.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import zmq
from zmq.utils.monitor import parse_monitor_message

from ..errors import EngineClosed, InvalidArgument, ProtocolError, RemoteError, error_from_wire
from . import framing
from .future import Future

log = logging.getLogger(__name__)

NOT_EXECUTED = 4  # mirrors server.NOT_EXECUTED (kept here so the client needs no server import)

_MONITOR_EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_MONITOR_STOPPED
)


class _Req:
    __slots__ = ("id", "method", "frames", "future", "deadline", "retry_safe", "on_item", "epoch", "timeout",
                 "cancels")

    def __init__(self, rid: int, method: str, frames: list, future: Future, timeout: float,
                 retry_safe: bool, on_item: Callable[[Any], Any] | None) -> None:
        self.id = rid
        self.method = method
        self.frames = frames
        self.future = future
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.retry_safe = retry_safe
        self.on_item = on_item
        self.epoch = -1  # connection epoch it was sent on; -1 = not sent
        self.cancels = 0  # for a "cancel" notification: the request it ends


class Connection:
    """A pipelined request/response channel to one or more server endpoints.

    ``curve`` is ``(server_public, client_public, client_secret)`` (Z85 bytes) or None.
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        timeout: float = 30.0,
        heartbeat: float = 2.0,
        curve: tuple[bytes, bytes, bytes] | None = None,
        reconnect_ivl_ms: int = 100,
        reconnect_ivl_max_ms: int = 1000,
        context: zmq.Context | None = None,
    ) -> None:
        eps = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        if not eps or not all(isinstance(e, str) and "://" in e for e in eps):
            raise InvalidArgument(f"endpoint must be a ZeroMQ address like 'tcp://host:port', got {endpoints!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InvalidArgument(f"timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(heartbeat, bool) or not isinstance(heartbeat, (int, float)) or heartbeat <= 0:
            raise InvalidArgument(f"heartbeat must be a positive number of seconds, got {heartbeat!r}")
        self.endpoints = eps
        self.timeout = float(timeout)
        self.heartbeat = float(heartbeat)
        self._ctx = context or zmq.Context.instance()
        self._ids = itertools.count(1)
        self._outq: deque[_Req] = deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._wake_pending = False
        self._closed = False
        self._stop = False
        self._pending: dict[int, _Req] = {}
        self._backlog: deque[_Req] = deque()  # registered, not sent (no connection)
        self._deadlines: list[tuple[float, int]] = []
        self._live: dict[str, int] = {}
        self._epoch = 0
        self._hold_epoch: int | None = None  # after NOT_EXECUTED: send nothing until a new connection
        self._last_rx = time.monotonic()
        self._last_ping = 0.0
        self._last_failure = ""
        self.reconnects = 0
        self.disconnects = 0
        s = self._ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.IMMEDIATE, 1)
        s.setsockopt(zmq.LINGER, 200)
        s.setsockopt(zmq.SNDHWM, 1_000_000)
        s.setsockopt(zmq.RCVHWM, 1_000_000)
        s.setsockopt(zmq.RECONNECT_IVL, reconnect_ivl_ms)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, reconnect_ivl_max_ms)
        hb_ms = max(100, int(heartbeat * 1000))
        s.setsockopt(zmq.HEARTBEAT_IVL, hb_ms)
        s.setsockopt(zmq.HEARTBEAT_TIMEOUT, hb_ms * 3)
        s.setsockopt(zmq.HEARTBEAT_TTL, hb_ms * 3)
        if curve is not None:
            server_pub, client_pub, client_sec = curve
            s.curve_serverkey = server_pub
            s.curve_publickey = client_pub
            s.curve_secretkey = client_sec
        self._mon = s.get_monitor_socket(_MONITOR_EVENTS)
        for e in eps:
            s.connect(e)
        self._sock = s
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
                retry_safe: bool = False, on_item: Callable[[Any], Any] | None = None) -> Future:
        """Send ``method`` with the encoded ``body`` frames; return the future of its final reply.

        ``on_item`` receives each intermediate response of a generator method (on the I/O thread).
        """
        if self._closed:
            raise EngineClosed("the remote connection is closed")
        rid = next(self._ids)
        fut = Future()
        fut.request_id = rid
        frames = [framing.pack_request_header(rid, method, 0), *body]
        self._outq.append(_Req(rid, method, frames, fut, self.timeout if timeout is None else timeout,
                               retry_safe, on_item))
        self._wake()
        return fut

    def notify(self, method: str, body: Sequence[bytes] = ()) -> None:
        """Send a fire-and-forget message (no reply expected, nothing tracked)."""
        fut = self.request(method, body, timeout=self.timeout)
        fut.set_result(None)  # resolved now; the I/O thread sends it and forgets it

    def cancel(self, future: Future) -> None:
        """End a generator request: the server closes it and its callbacks stop."""
        if self._closed or future.done():
            return
        rid = future.request_id
        fut = Future()
        fut.set_result(None)
        r = _Req(0, "cancel", [framing.pack_request_header(0, "cancel", 0), framing.pack([rid])], fut,
                 self.timeout, False, None)
        r.cancels = rid
        self._outq.append(r)
        self._wake()

    def _wake(self) -> None:
        if not self._wake_pending:
            self._wake_pending = True
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

    def call(self, method: str, *args: Any, timeout: float | None = None, retry_safe: bool = True) -> Any:
        """Blocking request with msgpack-encoded ``args``; return the reply value or raise its error."""
        t = self.timeout if timeout is None else timeout
        fut = self.request(method, framing.encode_args(args), t, retry_safe)
        return fut.result(t + 5.0)

    def close(self) -> None:
        """Fail requests in flight with :class:`EngineClosed`, stop the I/O thread, close the socket."""
        if self._closed:
            return
        self._closed = True
        self._stop = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if self._thread is not threading.current_thread():
            self._thread.join(10)
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    # ------------------------------------------------------------------ I/O thread
    def _run(self) -> None:
        sock, mon = self._sock, self._mon
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(mon, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        try:
            while not self._stop:
                events = dict(poller.poll(self._poll_timeout_ms()))
                if self._wake_r in events:
                    self._wake_pending = False
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except OSError:
                        pass
                if mon in events:
                    self._on_monitor()
                self._take_new()
                if sock in events:
                    self._recv_all()
                self._send_backlog()
                self._timers()
        except Exception:  # pragma: no cover - a bug here must not hang callers forever
            log.exception("tstreams client I/O thread failed")
        finally:
            self._shutdown()

    def _poll_timeout_ms(self) -> int:
        t = self.heartbeat
        if self._deadlines:
            t = min(t, self._deadlines[0][0] - time.monotonic())
        if self._backlog and self.connected and self._hold_epoch is None:
            t = min(t, 0.01)
        return max(0, int(t * 1000) + 1)

    def _take_new(self) -> None:
        q = self._outq
        while q:
            r = q.popleft()
            if r.future.done():  # a notify: send once, do not track
                if r.cancels:
                    c = self._pending.pop(r.cancels, None)
                    if c is not None:
                        c.future.set_exception(EngineClosed("request cancelled"))
                if not self._backlog and self._can_send():
                    self._try_send(r.frames)
                continue
            self._pending[r.id] = r
            heapq.heappush(self._deadlines, (r.deadline, r.id))
            if self._backlog or not self._can_send() or not self._try_send(r.frames):
                self._backlog.append(r)
            else:
                r.epoch = self._epoch

    def _can_send(self) -> bool:
        return self._hold_epoch is None and any(self._live.values())

    def _try_send(self, frames: list) -> bool:
        try:
            self._sock.send_multipart(frames, zmq.NOBLOCK, copy=len(frames[-1]) < 65536)
            return True
        except zmq.Again:
            return False

    def _send_backlog(self) -> None:
        if not self._backlog or not self._can_send():
            return
        b = self._backlog
        while b:
            r = b[0]
            if r.id not in self._pending:
                b.popleft()
                continue
            if not self._try_send(r.frames):
                return
            b.popleft()
            r.epoch = self._epoch

    def _recv_all(self) -> None:
        recv = self._sock.recv_multipart
        pending = self._pending
        try:
            while True:
                frames = recv(zmq.NOBLOCK)
                self._last_rx = time.monotonic()
                try:
                    rid, flags, value = framing.unpack_reply(frames)
                except ProtocolError as e:
                    log.warning("malformed reply ignored: %s", e)
                    continue
                r = pending.get(rid)
                if r is None:
                    continue  # a reply to a request that already timed out or failed over
                if flags & framing.ERROR:
                    if flags & NOT_EXECUTED:
                        # The server is stopping: send it again on the next connection.
                        r.epoch = -1
                        self._backlog.appendleft(r)
                        self._hold_epoch = self._epoch
                        continue
                    del pending[rid]
                    try:
                        name, message = value
                        exc = error_from_wire(str(name), str(message))
                    except (TypeError, ValueError):
                        exc = RemoteError(f"malformed error reply: {value!r}")
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

    def _on_monitor(self) -> None:
        while True:
            try:
                msg = self._mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            ev = parse_monitor_message(msg)
            event, endpoint = ev["event"], ev["endpoint"]
            if isinstance(endpoint, bytes):
                endpoint = endpoint.decode("utf-8", "replace")
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._live[endpoint] = self._live.get(endpoint, 0) + 1
                self._epoch += 1
                self.reconnects += 1
                self._hold_epoch = None
                self._last_failure = ""
                self._last_rx = time.monotonic()
            elif event == zmq.EVENT_DISCONNECTED:
                if self._live.get(endpoint, 0) > 0:
                    self._live[endpoint] -= 1
                    self.disconnects += 1
                    self._connection_lost(endpoint)
            elif event == zmq.EVENT_MONITOR_STOPPED:
                return
            else:
                why = "authentication refused" if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH else "protocol error"
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
                r.future.set_exception(RemoteError(
                    f"connection to {endpoint} lost while {r.method} was in flight; "
                    "it may or may not have been executed"))
        if retry:
            retry.sort(key=lambda r: r.id)
            self._backlog.extendleft(reversed(retry))

    def _timers(self) -> None:
        now = time.monotonic()
        dl = self._deadlines
        while dl and dl[0][0] <= now:
            deadline, rid = heapq.heappop(dl)
            r = self._pending.get(rid)
            if r is None or r.deadline != deadline:
                continue
            del self._pending[rid]
            if r.epoch < 0:
                msg = (f"not connected to {', '.join(self.endpoints)}: no server answered within "
                       f"{r.timeout:g}s; {r.method} was not sent{self._last_failure}")
            else:
                msg = (f"no reply to {r.method} from {', '.join(self.endpoints)} within {r.timeout:g}s; "
                       "the request may or may not have been executed")
            r.future.set_exception(RemoteError(msg))
        if len(dl) > 4 * len(self._pending) + 1024:  # drop stale heap entries
            self._deadlines = [(r.deadline, r.id) for r in self._pending.values()]
            heapq.heapify(self._deadlines)
        if (self.connected and now - self._last_rx >= self.heartbeat and now - self._last_ping >= self.heartbeat
                and self._hold_epoch is None):
            self._last_ping = now
            self._try_send([framing.pack_request_header(0, "ping", framing.NO_REPLY)])

    def _shutdown(self) -> None:
        err = EngineClosed("the remote connection is closed")
        for r in list(self._pending.values()):
            r.future.set_exception(err)
        self._pending.clear()
        self._backlog.clear()
        while self._outq:
            self._outq.popleft().future.set_exception(err)
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self._mon.close(0)
        self._sock.close()
