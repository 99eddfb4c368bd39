"""The peer transport between cluster nodes, behind a small interface.

A node listens on its replication endpoint (:class:`ReplicationServer`: requests in,
replies out, addressed by the peer's opaque identity) and opens links to other nodes'
endpoints (:class:`PeerLink`: requests out, replies in). Both carry opaque byte frames
(the messages of :mod:`.messages`); neither blocks for long, and a frame may be lost (the
protocol retries). :class:`ZmqTransport` is the production transport (a ZeroMQ ROUTER per
node, a DEALER per link, CURVE when the cluster has keys);
:mod:`tstreams_embedded.testing.network` ships an in-memory one that partitions, drops,
delays, duplicates and reorders.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import zmq

from .. import errors
from ..net.auth import PeerKeys, secure_replication_client, secure_replication_server

#: Bytes of the largest request the replication port accepts: requests (hello, fetch, a
#: snapshot chunk request) are small maps of numbers and names; a larger frame is dropped by
#: ZeroMQ together with its connection (the bulk data flows the other way, in replies).
REPL_MAX_REQUEST_BYTES = 64 << 10
REPL_RCVHWM = 64  # requests queued per peer connection (x REPL_MAX_REQUEST_BYTES: 4 MiB at most)
#: Replies queued per peer connection: a follower has one fetch (a reply of at most about
#: 8 MiB, ReplicatedLog.read) or a few snapshot chunks (snapshot.CHUNK_BYTES) outstanding;
#: a reply beyond this is dropped and the follower asks again after its timeout.
REPL_SNDHWM = 8


class ReplicationServer(Protocol):
    """A node's replication endpoint (used by one thread, except :meth:`wake`)."""

    @property
    def endpoint(self) -> str:
        """The address peers connect to."""

    def poll(self, timeout: float) -> list[tuple[bytes, bytes]]:
        """The ``(peer, request)`` frames received, waiting up to ``timeout`` seconds for the
        first (less if :meth:`wake` is called or a watched descriptor becomes readable);
        :class:`~tstreams_embedded.errors.EngineClosed` once the endpoint is closed (the
        serving loop ends on it)."""

    def reply(self, peer: bytes, body: bytes) -> None:
        """Queue a reply to ``peer``; dropped (never blocks) if its queue is full or it left."""

    def wake(self) -> None:
        """Make a waiting :meth:`poll` return now (any thread)."""

    def watch(self, fd: int) -> None:
        """Also return from :meth:`poll` when ``fd`` becomes readable."""

    def unwatch(self, fd: int) -> None: ...

    def close(self) -> None: ...


class PeerLink(Protocol):
    """Requests to one other node's :class:`ReplicationServer` (one thread)."""

    def send(self, body: bytes) -> None: ...

    def receive(self, timeout: float) -> bytes | None:
        """The next reply, or None after ``timeout`` seconds."""

    def close(self) -> None: ...


class Transport(Protocol):
    def listen(self, bind: str) -> ReplicationServer:
        """Listen on ``bind`` (:class:`~tstreams_embedded.errors.BindFailed` if it cannot)."""

    def connect(self, endpoint: str) -> PeerLink: ...


class ZmqServer:
    """:class:`ReplicationServer` on a ZeroMQ ROUTER."""

    def __init__(self, ctx: zmq.Context[Any], bind: str, peer_keys: PeerKeys | None) -> None:
        self._router = ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.setsockopt(zmq.MAXMSGSIZE, REPL_MAX_REQUEST_BYTES)
        self._router.setsockopt(zmq.RCVHWM, REPL_RCVHWM)
        self._router.setsockopt(zmq.SNDHWM, REPL_SNDHWM)
        if peer_keys is not None:
            secure_replication_server(self._router, peer_keys)
        try:
            self._router.bind(bind)
        except zmq.ZMQError as exc:
            self._router.close(0)
            reason = zmq.strerror(exc.errno or 0)
            raise errors.BindFailed(f"cannot listen for replication on {bind}: {reason}") from None
        self._endpoint: str = self._router.getsockopt_string(zmq.LAST_ENDPOINT)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poller = zmq.Poller()
        self._poller.register(self._router, zmq.POLLIN)
        self._poller.register(self._wake_r, zmq.POLLIN)

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def poll(self, timeout: float) -> list[tuple[bytes, bytes]]:
        if self._router.closed:
            raise errors.EngineClosed(f"the replication endpoint {self._endpoint} is closed")
        try:
            return self._receive(timeout)
        except (zmq.ZMQError, OSError) as exc:  # closed by another thread meanwhile (ENOTSOCK, EBADF)
            raise errors.EngineClosed(f"the replication endpoint {self._endpoint} is closed: {exc}") from None

    def _receive(self, timeout: float) -> list[tuple[bytes, bytes]]:
        events = dict(self._poller.poll(int(timeout * 1000)))
        if self._wake_r in events:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except OSError:
                pass
        out: list[tuple[bytes, bytes]] = []
        if self._router in events:
            while True:
                try:
                    frames = self._router.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if len(frames) == 2:
                    out.append((frames[0], frames[1]))
        return out

    def reply(self, peer: bytes, body: bytes) -> None:
        try:
            self._router.send_multipart([peer, body], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def watch(self, fd: int) -> None:
        self._poller.register(fd, zmq.POLLIN)

    def unwatch(self, fd: int) -> None:
        try:
            self._poller.unregister(fd)
        except KeyError:
            pass

    def close(self) -> None:
        self._router.close(0)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)


class ZmqLink:
    """:class:`PeerLink` on a ZeroMQ DEALER."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, peer_keys: PeerKeys | None) -> None:
        self._sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        if peer_keys is not None:
            secure_replication_client(self._sock, peer_keys)
        self._sock.connect(endpoint)

    def send(self, body: bytes) -> None:
        self._sock.send(body)

    def receive(self, timeout: float) -> bytes | None:
        if self._sock.poll(int(timeout * 1000) + 1):
            return self._sock.recv()
        return None

    def close(self) -> None:
        self._sock.close(0)


class ZmqTransport:
    """:class:`Transport` over ZeroMQ (CURVE on every socket when ``peer_keys`` is given)."""

    def __init__(self, context: zmq.Context[Any] | None = None, peer_keys: PeerKeys | None = None) -> None:
        self.ctx = context or zmq.Context.instance()
        self.peer_keys = peer_keys

    def listen(self, bind: str) -> ZmqServer:
        return ZmqServer(self.ctx, bind, self.peer_keys)

    def connect(self, endpoint: str) -> ZmqLink:
        return ZmqLink(self.ctx, endpoint, self.peer_keys)
