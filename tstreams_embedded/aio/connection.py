"""``AsyncConnection``: the client transport on an asyncio event loop (a ``zmq.asyncio`` DEALER).

The same wire protocol (:mod:`tstreams_embedded.net.framing`, version 3: a large request in pieces), socket options
(:func:`~tstreams_embedded.net.connection.open_dealer`: ``ZMQ_IMMEDIATE``, ZMTP heartbeats,
CURVE) and failure handling as the threaded :class:`~tstreams_embedded.net.connection.Connection`,
with no thread: one task receives the replies (after each wake-up it drains every queued
reply without awaiting again), one follows the socket monitor (handshakes, disconnections),
one sends the heartbeat pings and the backlog; the requests' deadlines are kept in a heap
served by one loop timer (armed for the earliest).

* **No server**: requests wait, unsent, until a handshake completes or their timeout
  passes (:class:`RemoteError` "not connected … was not sent").
* **Connection lost** with requests in flight: reads and long polls (``retry_safe``) are
  sent again after reconnection; writes fail with :class:`RemoteError` (outcome unknown).
* **Server stopping** (``NOT_EXECUTED``): the request is sent again on the next connection.
* **Closing** waits (at most ``CLOSE_DRAIN``) for the replies to writes already sent.

It is :class:`~tstreams_embedded.net.client.RemoteBackend`'s ``transport`` in
:func:`tstreams_embedded.aio.connect`: the backend's blocking calls (``call_frames``,
``wait``, ``pause``) suspend the calling greenlet (:func:`~.greenbridge.await_only`) instead
of a thread. Called from another thread (the sync API used beside the async one), a call
is handed to the loop and that thread waits for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import heapq
import itertools
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar, cast

import zmq
import zmq.asyncio

from ..engine.protocol.validate import check_interval
from ..errors import EngineClosed, ProtocolError, ProtocolVersionError, RemoteError, error_from_wire
from ..net import framing, zmqfast
from ..net.dealer import (
    HANDSHAKE_FAILURES,
    POLLIN,
    expired_message,
    lost_message,
    monitor_event,
    open_dealer,
)
from ..net.endpoints import check_endpoints
from ..net.future import Future
from .greenbridge import as_asyncio, await_only, await_reply, check_loop_call, in_loop_call

log = logging.getLogger(__name__)

T = TypeVar("T")

#: seconds between two attempts to send the backlog while the socket's queue is full
BACKLOG_RETRY = 0.01


class _Req:
    __slots__ = ("id", "method", "messages", "sent", "future", "timeout", "retry_safe", "on_item", "epoch",
                 "deadline")

    def __init__(self, rid: int, method: str, messages: list[list[Any]], future: Future, timeout: float,
                 retry_safe: bool, on_item: Callable[[Any], Any] | None) -> None:
        self.id = rid
        self.method = method
        self.messages = messages  # one message, or the pieces of a large request (framing.split_request)
        self.sent = 0  # messages of it sent on the current connection
        self.future = future
        self.timeout = timeout
        self.retry_safe = retry_safe
        self.on_item = on_item
        self.epoch = -1  # connection epoch it was sent on; -1 = not sent
        self.deadline = 0.0


class AsyncConnection:
    """A pipelined request/response channel on the running event loop (module docstring).

    Make it inside a coroutine (it binds to the running loop); ``curve`` is
    ``(server_public, client_public, client_secret)`` or None.
    """

    #: how long :meth:`close` waits for the replies to writes already sent (seconds)
    CLOSE_DRAIN = 10.0

    def __init__(self, endpoints: str | Sequence[str], timeout: float = 30.0, heartbeat: float = 2.0,
                 curve: tuple[bytes, bytes, bytes] | None = None, reconnect_ivl_ms: int = 100,
                 reconnect_ivl_max_ms: int = 1000, context: zmq.Context[Any] | None = None) -> None:
        eps = check_endpoints(endpoints, bind=False)
        check_interval(timeout, "timeout")
        check_interval(heartbeat, "heartbeat")
        self._loop = asyncio.get_running_loop()
        self._thread = threading.current_thread()
        self.endpoints = eps
        self.timeout = float(timeout)
        self.heartbeat = float(heartbeat)
        self._ids = itertools.count(1)
        self._pending: dict[int, _Req] = {}
        self._backlog: deque[_Req] = deque()  # registered, not sent (no connection, or a full queue)
        self._live: dict[str, int] = {}
        self._epoch = 0
        self._hold = False  # after NOT_EXECUTED: send nothing until a new connection
        self._closed = False
        self._draining = False
        self._last_rx = self._loop.time()
        self._last_failure = ""
        self._backlog_kick = asyncio.Event()
        self._flush_soon = False  # a _send_backlog is scheduled
        self._deadlines: list[tuple[float, int]] = []  # (deadline, request ID), a heap
        self._deadline_timer: asyncio.TimerHandle | None = None
        self.handshakes = 0
        self.disconnects = 0
        ctx = zmq.asyncio.Context.shadow(context if context is not None else zmq.Context.instance())
        sock, mon = open_dealer(ctx, eps, heartbeat, curve, reconnect_ivl_ms, reconnect_ivl_max_ms)
        self._sock = cast(zmq.asyncio.Socket, sock)  # (made by an asyncio context)
        self._mon = cast(zmq.asyncio.Socket, mon)
        self._tasks = [self._loop.create_task(job, name=f"tstreams-aio-{what}")
                       for what, job in (("receive", self._receive()), ("monitor", self._follow_monitor()),
                                         ("timers", self._tick()))]

    # ------------------------------------------------------------------ state
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connected(self) -> bool:
        return any(self._live.values())

    def _can_send(self) -> bool:
        return not self._hold and any(self._live.values())

    # ------------------------------------------------------------------ requests (on the loop)
    def request(self, method: str, body: Sequence[bytes] = (), timeout: float | None = None,
                retry_safe: bool = False, on_item: Callable[[Any], Any] | None = None) -> Future:
        """Send ``method`` with the encoded ``body`` frames; the future of its final reply
        (resolved by this loop). ``on_item`` gets each intermediate response of a generator
        method, on the loop."""
        if not self._on_loop():
            fut: Future = self._from_thread(self._request_now, method, body, timeout, retry_safe, on_item)
            return fut
        return self._request_now(method, body, timeout, retry_safe, on_item)

    def _request_now(self, method: str, body: Sequence[bytes], timeout: float | None, retry_safe: bool,
                     on_item: Callable[[Any], Any] | None) -> Future:
        if self._closed or self._draining:
            raise EngineClosed("the remote connection is closed")
        rid = next(self._ids)
        fut = Future()
        fut.request_id = rid
        r = _Req(rid, method, self._messages(rid, method, body), fut,
                 self.timeout if timeout is None else timeout, retry_safe, on_item)
        self._pending[rid] = r
        self._arm(r)
        self._backlog.append(r)
        if not self._flush_soon:  # every request made in this turn of the loop goes in one batch
            self._flush_soon = True
            self._loop.call_soon(self._send_backlog)
        return fut

    def notify(self, method: str, body: Sequence[bytes] = ()) -> None:
        """Send a fire-and-forget message (dropped if it cannot be sent now)."""
        if self._closed or not self._can_send():
            return
        self._try_send(framing.request_frames(0, method, 0, body))

    def cancel(self, future: Future) -> None:
        """End a generator request: the server closes it; no callback runs after this returns."""
        r = self._pending.pop(future.request_id, None)
        if r is None:
            return
        r.future.set_exception(EngineClosed("request cancelled"))
        self.notify("cancel", framing.encode_args([r.id]))

    async def reply(self, fut: Future, timeout: float) -> Any:
        """The value of ``fut`` (or its error), awaited; :class:`RemoteError` after ``timeout``."""
        try:
            return await asyncio.wait_for(asyncio.shield(as_asyncio(fut)), timeout)
        except asyncio.TimeoutError:
            raise RemoteError(f"no reply from {', '.join(self.endpoints)} within {timeout:g}s") from None

    async def call_async(self, method: str, body: Sequence[bytes], timeout: float | None = None,
                         retry_safe: bool = True) -> Any:
        """Send a request and await its reply value."""
        t = self.timeout if timeout is None else timeout
        return await self.reply(self.request(method, body, t, retry_safe), t + 5.0)

    # ------------------------------------------------------------------ the blocking interface (RemoteBackend's)
    def call(self, method: str, *args: Any, timeout: float | None = None, retry_safe: bool = True) -> Any:
        """A request with msgpack-encoded ``args``; its reply value (see :meth:`call_frames`)."""
        return self.call_frames(method, framing.encode_args(args), timeout, retry_safe)

    def call_frames(self, method: str, body: Sequence[bytes], timeout: float | None = None,
                    retry_safe: bool = True) -> Any:
        """A request and its reply, waited for by suspending the calling loop call (the
        request's own deadline, ``timeout``, ends the wait)."""
        if self._on_loop():
            check_loop_call()
            t = self.timeout if timeout is None else timeout
            return await_reply(self._request_now(method, body, t, retry_safe, None))
        return self._from_thread(self.call_async, method, body, timeout, retry_safe)

    def wait(self, fut: Future, timeout: float) -> Any:
        """The value of ``fut``, waited for by suspending the calling loop call (its
        request's deadline ends the wait)."""
        if self._on_loop():
            check_loop_call()
            return await_reply(fut)
        return self._from_thread(self.reply, fut, timeout)

    def pause(self, seconds: float) -> None:
        """A back-off between two attempts of a request (the calling loop call sleeps)."""
        self._block(lambda: asyncio.sleep(seconds))

    def _block(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        if self._on_loop():
            check_loop_call()  # InvalidArgument outside a loop call: never block the loop
            return await_only(make())
        value: T = self._from_thread(make)
        return value

    def _on_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def _from_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the loop from another thread and wait for it there (awaiting
        what it returns when that is awaitable)."""
        async def run() -> Any:
            value = fn(*args)
            return await value if isinstance(value, Awaitable) else value

        if self._loop.is_closed():
            raise EngineClosed("the event loop of this aio connection is closed")
        try:
            return asyncio.run_coroutine_threadsafe(run(), self._loop).result(self.timeout + 10.0)
        except concurrent.futures.TimeoutError:
            raise RemoteError(f"no reply from {', '.join(self.endpoints)} within {self.timeout:g}s "
                              "(is the event loop of this aio connection running?)") from None

    # ------------------------------------------------------------------ sending
    def _try_send(self, frames: list[Any], rearm: bool = True) -> bool:
        try:
            zmqfast.send_multipart(self._sock, frames)
        except zmq.Again:
            self._backlog_kick.set()
            return False
        if rearm:
            self._rearm()
        return True

    def _try_send_request(self, r: _Req) -> bool:
        """Send the messages of ``r`` not yet sent; whether all are (the rest stays for later,
        at the head of the backlog: a request's pieces go out one after another)."""
        messages = r.messages
        if len(messages) == 1:
            return self._try_send(messages[0], rearm=False)
        send_piece, sock = zmqfast.send_piece, self._sock
        try:
            while r.sent < len(messages):
                send_piece(sock, *messages[r.sent])
                r.sent += 1
        except zmq.Again:
            self._backlog_kick.set()
            return False
        return True

    def _messages(self, rid: int, method: str, body: Sequence[Any]) -> list[list[Any]]:
        """The ZeroMQ messages of a request: pieces when it is large (wire protocol 3), unless
        the DEALER has several endpoints (it round-robins messages among them, so pieces would
        reach different servers): there a request travels whole, as the threaded
        :class:`~tstreams_embedded.net.connection.Connection` sends it."""
        if len(self.endpoints) > 1:
            return [framing.request_frames(rid, method, 0, body)]
        return framing.request_messages(rid, method, 0, body)

    def _rearm(self) -> None:
        """A send may spend the edge of the socket's FD: reading EVENTS makes pyzmq look at
        it again, so that the receiving task learns of replies already queued."""
        self._sock.get(zmq.EVENTS)

    def _send_backlog(self) -> None:
        """Send the requests waiting, in order, while a connection is up and the socket
        takes them (the pings of :meth:`_tick` send the rest later)."""
        self._flush_soon = False
        if self._closed:
            return
        b = self._backlog
        sent = False
        while b and self._can_send():
            r = b[0]
            if r.sent == 0 and self._pending.get(r.id) is not r:  # (a request begun is finished)
                b.popleft()
                continue
            if not self._try_send_request(r):
                break
            sent = True
            b.popleft()
            r.epoch = self._epoch
        if sent:
            self._rearm()

    # ------------------------------------------------------------------ deadlines
    def _arm(self, r: _Req) -> None:
        """(Re)start ``r``'s deadline: ``timeout`` seconds from now."""
        r.deadline = self._loop.time() + r.timeout
        if len(self._deadlines) > 4 * len(self._pending) + 1024:  # drop the entries of answered requests
            self._deadlines = [(q.deadline, q.id) for q in self._pending.values() if q is not r]
            heapq.heapify(self._deadlines)
        heapq.heappush(self._deadlines, (r.deadline, r.id))
        if self._deadline_timer is None or r.deadline < self._deadline_timer.when():
            if self._deadline_timer is not None:
                self._deadline_timer.cancel()
            self._deadline_timer = self._loop.call_at(r.deadline, self._expire)

    def _expire(self) -> None:
        """Fail the requests whose deadline passed; arm the timer for the next deadline."""
        self._deadline_timer = None
        now = self._loop.time()
        dl = self._deadlines
        while dl and dl[0][0] <= now:
            deadline, rid = heapq.heappop(dl)
            r = self._pending.get(rid)
            if r is None or r.deadline != deadline:
                continue  # answered, or its deadline was moved
            del self._pending[rid]
            sent = r.epoch >= 0 or r.sent > 0  # (a request begun goes out whole: its pieces may arrive)
            r.future.set_exception(RemoteError(expired_message(self.endpoints, r.method, r.timeout, sent,
                                                               self._last_failure)))
        if dl and not self._closed:
            self._deadline_timer = self._loop.call_at(dl[0][0], self._expire)

    # ------------------------------------------------------------------ the tasks
    async def _receive(self) -> None:
        sock = self._sock
        recv = zmqfast.recv_multipart
        events = zmqfast.events
        try:
            while not self._closed:
                self._dispatch(await sock.recv_multipart())
                while events(sock) & POLLIN:  # every reply queued now, without awaiting again
                    self._dispatch(recv(sock))
        except (asyncio.CancelledError, zmq.ContextTerminated, zmq.ZMQError):
            return
        except Exception:  # pragma: no cover - a bug here must not hang callers forever
            log.exception("tstreams aio client receiver failed")
            self._fail_all(RemoteError("the connection's receiver failed; see the log"))

    def _dispatch(self, frames: list[bytes]) -> None:
        self._last_rx = self._loop.time()
        try:
            rid, flags, value = framing.unpack_reply(frames)
        except ProtocolVersionError as e:  # an older server: it cannot read any of our requests
            for sent in [q for q in self._pending.values() if q.epoch >= 0]:
                self._finish(sent, ProtocolVersionError(str(e)))
            return
        except ProtocolError as e:
            log.warning("malformed reply ignored: %s", e)
            return
        found = self._pending.get(rid)
        if found is None:
            return  # a reply to a request that already timed out or was cancelled
        r = found
        if flags & framing.ERROR:
            if flags & framing.NOT_EXECUTED:  # the server is stopping: send again on the next connection
                r.epoch = -1
                r.sent = 0
                self._backlog = deque(sorted([*self._backlog, r], key=lambda q: q.id))
                self._hold = True
                return
            try:
                name, message = value
                exc: BaseException = error_from_wire(str(name), str(message))
            except (TypeError, ValueError):
                exc = RemoteError(f"malformed error reply: {value!r:.200}")
            self._finish(r, exc)
        elif flags & framing.MORE:
            self._arm(r)
            if r.on_item is not None:
                try:
                    r.on_item(value)
                except Exception:
                    log.exception("stream callback failed")
        else:
            del self._pending[rid]
            r.future.set_result(value)

    def _finish(self, r: _Req, exc: BaseException) -> None:
        self._pending.pop(r.id, None)
        r.future.set_exception(exc)

    async def _follow_monitor(self) -> None:
        try:
            while not self._closed:
                event, endpoint = monitor_event(await self._mon.recv_multipart())
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self._live[endpoint] = self._live.get(endpoint, 0) + 1
                    self._epoch += 1
                    self.handshakes += 1
                    self._hold = False
                    self._last_failure = ""
                    self._last_rx = self._loop.time()
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
        except (asyncio.CancelledError, zmq.ContextTerminated, zmq.ZMQError):
            return

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
                self._finish(r, RemoteError(lost_message(endpoint, r.method)))
        for r in self._backlog:  # pieces sent on the lost connection: all again, from the first
            r.sent = 0
        if retry:
            self._backlog = deque(sorted([*self._backlog, *retry], key=lambda q: q.id))

    async def _tick(self) -> None:
        """Heartbeat pings while idle, and the backlog while the socket's queue was full."""
        try:
            while not self._closed:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._backlog_kick.wait(), self.heartbeat)
                if self._backlog_kick.is_set():
                    self._backlog_kick.clear()
                    await asyncio.sleep(BACKLOG_RETRY)
                if self._closed:
                    return
                self._send_backlog()
                if self._backlog:
                    self._backlog_kick.set()
                now = self._loop.time()
                if self._can_send() and now - self._last_rx >= self.heartbeat:
                    self._try_send([framing.request_frame(0, "ping", framing.NO_REPLY)])
        except (asyncio.CancelledError, zmq.ContextTerminated, zmq.ZMQError):
            return

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Refuse new requests; wait (at most :data:`CLOSE_DRAIN`) for the replies to writes
        already sent, so that a write racing the close reports its real outcome; then close
        the sockets. Reads and requests never sent fail with :class:`EngineClosed`; writes
        sent and still unanswered with :class:`RemoteError`. Outside a loop call (e.g. at
        garbage collection) it closes at once."""
        if self._closed or self._draining:
            return
        if self._on_loop() and not in_loop_call():
            self._shut()
            return
        self._block(self.aclose)

    async def aclose(self) -> None:
        """:meth:`close`, awaited."""
        if self._closed or self._draining:
            return
        self._draining = True
        writes = [r.future for r in self._pending.values() if r.epoch >= 0 and not r.retry_safe]
        if writes:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait([as_asyncio(f) for f in writes], timeout=min(self.CLOSE_DRAIN, self.timeout))
        self._shut()

    def _shut(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        self._fail_all(None)
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self._mon.close(0)
        self._sock.close()

    def _fail_all(self, error: BaseException | None) -> None:
        pending = list(self._pending.values())
        self._pending.clear()
        self._backlog.clear()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        for r in pending:
            if error is not None:
                r.future.set_exception(error)
            elif r.epoch >= 0 and not r.retry_safe:
                r.future.set_exception(RemoteError("the connection was closed before the reply came; the request "
                                                   "may or may not have been executed"))
            else:
                r.future.set_exception(EngineClosed("the remote connection is closed"))
