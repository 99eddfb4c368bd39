"""The ZeroMQ ROUTER server on Tornado's IOLoop.

Loop design (measured in ``shared/reference/moebius-and-zeromq.md``): Tornado is used only
to learn that the socket is readable — the socket's ``zmq.FD`` is registered with
``IOLoop.add_handler``. Each wakeup then drains every queued message with ``NOBLOCK``
until ``EAGAIN`` (handling one message per callback was 4–6× slower). The ``zmq.FD`` is
edge-triggered, so after any send made outside the drain the server re-checks
``zmq.EVENTS`` and drains again if input is pending; a drain that hits its per-wakeup cap
reschedules itself instead of waiting for an edge that will not come.

Guarantees:

* Every request gets exactly the responses of its handler kind (see
  :mod:`~tstreams_embedded.net.registry`), each echoing its request ID; a client may have
  any number of requests in flight, including several generators.
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
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import msgpack
import zmq
from tornado.ioloop import IOLoop

from ..errors import InvalidArgument, ProtocolError, RemoteError, error_to_wire
from . import framing, zmqfast
from .executors import Done, WriteExecutor, execute
from .registry import CALL, NOTIFY, STREAM, Directive, Handler, Registry, Sleep, WaitCommit
from .session import Running, Session, Sessions

log = logging.getLogger(__name__)

# Reply flag (with ERROR): the request was not executed; the client may send it again.
NOT_EXECUTED = 4

DEFAULT_MAX_MSG_SIZE = 64 * 1024 * 1024


@dataclass
class ServerOptions:
    """Tunables of :class:`Server` (all have safe defaults)."""

    max_msg_size: int = DEFAULT_MAX_MSG_SIZE  # ZMQ_MAXMSGSIZE: per frame, bytes (-1 = unlimited)
    max_frames: int = 4096  # frames per request, identity included
    max_drain: int = 2048  # messages per wakeup before yielding to other callbacks
    session_timeout: float = 30.0  # seconds of client silence before its session is dropped
    pool_threads: int = 4
    hwm: int = 200_000
    linger_ms: int = 2000
    # Run write batches on the loop itself, at the end of each drain, instead of on the
    # writer thread: right when writes never wait for the disk (durability="async"), as it
    # saves two thread hand-offs per burst. Never for durable (fsync) modes.
    inline_writes: bool = False
    curve_secret_key: bytes | None = None  # enables CURVE when set
    curve_public_key: bytes | None = None


@dataclass
class ServerStats:
    received: int = 0
    replies: int = 0
    errors: int = 0
    malformed: int = 0
    unroutable: int = 0
    dropped: int = 0
    wakeups: int = 0
    running_generators: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Server:
    """A ROUTER server dispatching to a :class:`Registry`.

    ``commit_watch(seen, timeout) -> generation`` (the engine's ``wait_for_commit``) feeds
    :class:`WaitCommit`; without it, waits end only on their timeout.
    """

    def __init__(
        self,
        registry: Registry,
        bind: str | Sequence[str],
        options: ServerOptions | None = None,
        commit_watch: Callable[[int, float], int] | None = None,
        context: zmq.Context | None = None,
    ) -> None:
        self.registry = registry
        self.binds = [bind] if isinstance(bind, str) else list(bind)
        self.opts = options or ServerOptions()
        self.stats = ServerStats()
        self._commit_watch = commit_watch
        self._ctx = context or zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._loop: IOLoop | None = None
        self._fd: int | None = None
        self.endpoints: list[str] = []
        self._sessions = Sessions(self.opts.session_timeout)
        self._ready: deque[Running] = deque()
        self._run_scheduled = False
        self._drain_scheduled = False
        self._pending_pool = 0
        self._pending_write = 0
        self._done_lock = threading.Lock()
        self._done: list[Done] = []
        self._done_posted = False
        self._writer: WriteExecutor | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._generation = -1
        self._commit_waiters: dict[int, tuple[Running, int]] = {}  # id(running) -> (running, seen)
        self._watch_thread: threading.Thread | None = None
        self._watch_wanted = threading.Event()  # set while generators wait for a commit
        self._gen_posted = False
        self._stopping = False
        self._stopped = threading.Event()
        self._reaper = None
        self._now = time.monotonic()
        self._inline_jobs: list = []
        self._outbox: list[tuple[bytes, list]] = []
        self._batching = False  # inside a loop callback that flushes the outbox when done
        self._inline_batches = 0
        self._inline_calls = 0
        if "cancel" not in registry:
            registry.add("cancel", self.cancel, kind=NOTIFY)
        if "server_stats" not in registry:
            registry.add("server_stats", lambda session: self.server_stats())
        if "ping" not in registry:
            registry.add("ping", lambda session: "pong")

    # ------------------------------------------------------------------ lifecycle
    def start(self, loop: IOLoop | None = None) -> None:
        """Bind and start serving on ``loop`` (default: the current thread's IOLoop)."""
        self._loop = loop or IOLoop.current()
        s = self._ctx.socket(zmq.ROUTER)
        s.setsockopt(zmq.ROUTER_MANDATORY, 1)
        s.setsockopt(zmq.MAXMSGSIZE, self.opts.max_msg_size)
        s.setsockopt(zmq.SNDHWM, self.opts.hwm)
        s.setsockopt(zmq.RCVHWM, self.opts.hwm)
        s.setsockopt(zmq.LINGER, self.opts.linger_ms)
        if self.opts.curve_secret_key:
            s.curve_server = True
            s.curve_secretkey = self.opts.curve_secret_key
            s.curve_publickey = self.opts.curve_public_key
        for b in self.binds:
            s.bind(b)
            self.endpoints.append(s.getsockopt_string(zmq.LAST_ENDPOINT))
        self._sock = s
        self._writer = WriteExecutor(self._deliver_threadsafe)
        self._pool = ThreadPoolExecutor(self.opts.pool_threads, thread_name_prefix="tstreams-pool")
        self._fd = s.getsockopt(zmq.FD)
        self._loop.add_handler(self._fd, self._on_readable, IOLoop.READ)
        from tornado.ioloop import PeriodicCallback

        self._reaper = PeriodicCallback(self._reap, max(100.0, self.opts.session_timeout * 1000 / 4))
        self._reaper.start()
        if self._commit_watch is not None:
            self._watch_thread = threading.Thread(target=self._watch, name="tstreams-commit-watch", daemon=True)
            self._watch_thread.start()
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
        deadline = time.monotonic() + timeout
        for s in self._sessions.all():  # generators end now; clients may re-issue them elsewhere
            self._end_session(s, notify=True)

        def poll() -> None:
            self._drain()
            busy = self._pending_write or self._pending_pool or self._done
            if busy and time.monotonic() < deadline:
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
        if self._fd is not None:
            self._loop.remove_handler(self._fd)
            self._fd = None
        if self._writer is not None:
            self._writer.stop(5)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._flush_done()
        if self._sock is not None:
            self._sock.close(self.opts.linger_ms)
            self._sock = None
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

    def _drain(self) -> None:
        self._drain_scheduled = False
        sock = self._sock
        if sock is None:
            return
        self.stats.wakeups += 1
        self._now = time.monotonic()
        self._batching = True
        recv = zmqfast.recv_multipart
        dispatch = self._dispatch
        n = 0
        limit = self.opts.max_drain
        try:
            try:
                while n < limit:
                    frames = recv(sock)
                    n += 1
                    dispatch(frames)
            except zmq.Again:
                pass
            self.stats.received += n
            if self._inline_jobs:
                self._run_inline_writes()
        finally:
            self._batching = False
            self._flush_out()
        if n >= limit:
            self._schedule_drain()  # more may be queued; let timers and completions run first
        else:
            self._check_events()  # our sends may have spent the FD's edge

    def _run_inline_writes(self) -> None:
        jobs, self._inline_jobs = self._inline_jobs, []
        self._inline_batches += 1
        self._inline_calls += len(jobs)
        for identity, req_id, ok, value in execute(jobs):
            if ok:
                self._send_value(identity, req_id, value)
            else:
                self._send_error(identity, req_id, value)

    def _check_events(self) -> None:
        """After sending outside a drain: the edge-triggered FD may have been consumed."""
        sock = self._sock
        if sock is not None and sock.get(zmq.EVENTS) & zmq.POLLIN:
            self._schedule_drain()

    def _dispatch(self, frames: list[bytes]) -> None:
        identity = frames[0]
        try:
            if len(frames) > self.opts.max_frames:
                raise ProtocolError(f"too many frames ({len(frames)} > {self.opts.max_frames})")
            req_id, method, flags, args = framing.unpack_request(frames)
        except ProtocolError as e:
            self.stats.malformed += 1
            self._send_error(identity, _guess_id(frames), e)
            return
        session = self._sessions.get(identity, self._now)
        if self._stopping:
            self._send_error(identity, req_id, RemoteError("server is shutting down; request not executed"),
                             NOT_EXECUTED)
            return
        h = self.registry.get(method)
        if h is None:
            self.stats.malformed += 1
            self._send_error(identity, req_id, ProtocolError(f"unknown method {method[:64]!r}"))
            return
        if not (h.min_args <= len(args) <= h.max_args):
            self._send_error(identity, req_id, InvalidArgument(
                f"{method}() takes {_arity_text(h)} arguments, got {len(args)}"))
            return
        kind = h.kind
        if kind == CALL:
            ex = h.executor
            if ex == "inline":
                try:
                    value = h.fn(session, *args)
                except Exception as e:
                    self._send_error(identity, req_id, e)
                else:
                    if not flags & framing.NO_REPLY:
                        self._send_value(identity, req_id, value)
            elif ex == "write":
                if self.opts.inline_writes:
                    self._inline_jobs.append((h, identity, req_id, args))
                else:
                    with self._done_lock:
                        self._pending_write += 1
                    self._writer.put((h, identity, req_id, args))
            else:
                with self._done_lock:
                    self._pending_pool += 1
                self._pool.submit(self._run_pooled, h, session, identity, req_id, args)
        elif kind == STREAM:
            try:
                gen = h.fn(session, *args)
            except Exception as e:
                self._send_error(identity, req_id, e)
                return
            r = Running(session, req_id, gen)
            old = session.running.pop(req_id, None)
            if old is not None:
                self._close_running(old)
            session.running[req_id] = r
            self.stats.running_generators += 1
            self._make_ready(r, None)
        elif kind == NOTIFY:
            try:
                h.fn(session, *args)
            except Exception as e:
                self.stats.errors += 1
                log.debug("notify %s failed: %s", method, e)

    # ------------------------------------------------------------------ output
    def _send(self, identity: bytes, frames: list) -> None:
        """Queue a reply; it leaves in the burst at the end of the current loop callback.

        Sending replies one by one between pieces of work makes ZeroMQ's I/O thread wake
        (and the kernel write) once per reply; measured here: 24 µs per reply one at a time,
        1.8 µs in bursts of 100."""
        self._outbox.append((identity, frames))
        if not self._batching:
            self._flush_out()

    def _flush_out(self) -> None:
        out, self._outbox = self._outbox, []
        sock = self._sock
        if sock is None or not out:
            return
        send3, sendm = zmqfast.send3, zmqfast.send_multipart
        sent = 0
        for identity, frames in out:
            try:
                if len(frames) == 2:
                    send3(sock, identity, frames[0], frames[1])
                else:
                    sendm(sock, [identity, *frames])
                sent += 1
            except zmq.ZMQError as e:
                if e.errno == zmq.EHOSTUNREACH:  # the client is gone: forget it
                    self.stats.unroutable += 1
                    s = self._sessions.drop(identity)
                    if s is not None:
                        self._end_session(s, notify=False)
                elif e.errno == zmq.EAGAIN:  # the client does not read (HWM reached)
                    self.stats.dropped += 1
                else:
                    self.stats.dropped += 1
                    log.warning("send failed: %s", e)
        self.stats.replies += sent

    def _send_value(self, identity: bytes, req_id: int, value: Any, flags: int = 0) -> None:
        try:
            body = framing.pack(value)
        except Exception as e:  # a handler returned something msgpack cannot carry
            self._send_error(identity, req_id, e)
            return
        self._send(identity, [framing.pack_reply_header(req_id, flags), body])

    def _send_error(self, identity: bytes, req_id: int, exc: BaseException, extra_flags: int = 0) -> None:
        self.stats.errors += 1
        name, message = error_to_wire(exc)
        self._send(identity, [framing.pack_reply_header(req_id, framing.ERROR | extra_flags),
                              framing.pack([name, message])])

    # ------------------------------------------------------------------ executors
    def _run_pooled(self, h: Handler, session: Session, identity: bytes, req_id: int, args: Sequence) -> None:
        try:
            done = (identity, req_id, True, h.fn(session, *args))
        except BaseException as e:  # noqa: BLE001
            done = (identity, req_id, False, e)
        self._deliver_threadsafe([done], pooled=True)

    def _deliver_threadsafe(self, done: list[Done], pooled: bool = False) -> None:
        with self._done_lock:
            self._done.extend(done)
            if pooled:
                self._pending_pool -= len(done)  # guarded by the lock; read racily by stop()
            else:
                self._pending_write -= len(done)
            if self._done_posted:
                return
            self._done_posted = True
        self._loop.add_callback(self._flush_done)

    def _flush_done(self) -> None:
        with self._done_lock:
            done, self._done = self._done, []
            self._done_posted = False
        self._batching = True
        try:
            for identity, req_id, ok, value in done:
                if ok:
                    self._send_value(identity, req_id, value)
                else:
                    self._send_error(identity, req_id, value)
        finally:
            self._batching = False
            self._flush_out()
        self._check_events()

    # ------------------------------------------------------------------ generators
    def _make_ready(self, r: Running, value: Any) -> None:
        r.parked = None
        r.resume = value
        self._ready.append(r)
        if not self._run_scheduled:
            self._run_scheduled = True
            self._loop.add_callback(self._run_ready)

    def _run_ready(self) -> None:
        self._run_scheduled = False
        batch, self._ready = self._ready, deque()
        self._batching = True
        try:
            for r in batch:
                self._step(r)
        finally:
            self._batching = False
            self._flush_out()
        self._check_events()

    def _step(self, r: Running) -> None:
        s = r.session
        if s.closed or s.running.get(r.req_id) is not r:
            return
        try:
            v = r.gen.send(r.resume)
        except StopIteration as stop:
            self._finish_running(r)
            self._send_value(s.identity, r.req_id, stop.value)
            return
        except Exception as e:
            self._finish_running(r)
            self._send_error(s.identity, r.req_id, e)
            return
        if isinstance(v, Directive):
            self._park(r, v)
        else:
            self._send_value(s.identity, r.req_id, v, framing.MORE)
            self._make_ready(r, None)

    def _park(self, r: Running, d: Directive) -> None:
        if isinstance(d, Sleep):
            r.parked = self._loop.call_later(max(0.0, float(d.seconds)), self._make_ready, r, None)
        elif isinstance(d, WaitCommit):
            if self._commit_watch is not None and not self._watch_wanted.is_set():
                try:  # the watcher sleeps while nobody waits: read the current sequence now
                    self._generation = max(self._generation, self._commit_watch(-1, 0))
                except Exception:
                    pass
            if self._generation > d.seen:
                self._make_ready(r, self._generation)
                return
            key = id(r)
            self._commit_waiters[key] = (r, d.seen)
            self._watch_wanted.set()
            handle = self._loop.call_later(max(0.0, float(d.timeout)), self._commit_timeout, key)
            r.parked = handle
        else:
            self._make_ready(r, None)

    def _commit_timeout(self, key: int) -> None:
        item = self._commit_waiters.pop(key, None)
        if item is not None:
            self._make_ready(item[0], max(self._generation, 0))

    def _finish_running(self, r: Running) -> None:
        if r.session.running.get(r.req_id) is r:
            del r.session.running[r.req_id]
        self.stats.running_generators -= 1
        self._unpark(r)

    def _unpark(self, r: Running) -> None:
        self._commit_waiters.pop(id(r), None)
        if r.parked is not None:
            self._loop.remove_timeout(r.parked)
            r.parked = None

    def _close_running(self, r: Running) -> None:
        self._unpark(r)
        self.stats.running_generators -= 1
        try:
            r.gen.close()
        except Exception:  # a generator misbehaving on close must not hurt the loop
            log.debug("generator close failed", exc_info=True)

    def cancel(self, session: Session, req_id: int) -> bool:
        """End the generator request ``req_id`` of ``session`` (no further responses)."""
        r = session.running.pop(req_id, None)
        if r is None:
            return False
        self._close_running(r)
        return True

    def _end_session(self, s: Session, notify: bool) -> None:
        s.closed = True
        for r in list(s.running.values()):
            self._close_running(r)
            if notify:
                self._send_error(s.identity, r.req_id,
                                 RemoteError("server is shutting down; request not executed"), NOT_EXECUTED)
        s.running.clear()

    def _reap(self) -> None:
        for s in self._sessions.expired(time.monotonic()):
            self._end_session(s, notify=False)

    # ------------------------------------------------------------------ commits
    def _watch(self) -> None:
        """Commit watcher thread: runs only while some generator waits for a commit (so an
        ordinary write load pays nothing for it) and posts each new sequence to the loop."""
        seen = -1
        while not self._stopping:
            if not self._watch_wanted.wait(0.5):
                continue
            try:
                g = self._commit_watch(seen, 0.5)
            except Exception:  # engine closed or failing: stop watching
                log.debug("commit watch ended", exc_info=True)
                return
            if g != seen:
                seen = g
                self._loop.add_callback(self._on_commit, g)

    def _on_commit(self, g: int) -> None:
        self._generation = max(self._generation, g)
        if not self._commit_waiters:
            self._watch_wanted.clear()
            return
        woken = [k for k, (_, seen) in self._commit_waiters.items() if seen < g]
        for k in woken:
            r, _ = self._commit_waiters.pop(k)
            self._unpark(r)
            self._make_ready(r, g)
        if not self._commit_waiters:
            self._watch_wanted.clear()

    # ------------------------------------------------------------------ introspection
    def server_stats(self) -> dict[str, Any]:
        st = self.stats
        return {
            "pid": os.getpid(),
            "endpoints": list(self.endpoints),
            "sessions": len(self._sessions),
            "received": st.received,
            "replies": st.replies,
            "errors": st.errors,
            "malformed": st.malformed,
            "unroutable": st.unroutable,
            "dropped": st.dropped,
            "wakeups": st.wakeups,
            "running_generators": st.running_generators,
            "write_batches": (self._writer.batches if self._writer else 0) + self._inline_batches,
            "write_calls": (self._writer.calls if self._writer else 0) + self._inline_calls,
            "max_msg_size": self.opts.max_msg_size,
        }


def _guess_id(frames: Sequence[bytes]) -> int:
    """The request ID of a malformed request, when its header is readable (else -1)."""
    if len(frames) > 1:
        try:
            h = msgpack.unpackb(frames[1], raw=False)
            if type(h) is list and h and type(h[0]) is int:
                return h[0]
        except Exception:
            pass
    return -1


def _arity_text(h: Handler) -> str:
    if h.max_args >= 1 << 30:
        return f"at least {h.min_args}"
    if h.min_args == h.max_args:
        return str(h.min_args)
    return f"{h.min_args} to {h.max_args}"
