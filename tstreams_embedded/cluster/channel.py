"""A follower's requests to the leader over its replication socket (a ZeroMQ DEALER),
matched to their replies by request id (``rid``); replies to older requests are dropped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, cast

import msgpack
import zmq


def pack(value: Any) -> bytes:
    return cast(bytes, msgpack.packb(value, use_bin_type=True))


def unpack(raw: bytes | memoryview) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


class Channel:
    """Requests over one DEALER socket (see the module docstring). ``next_rid`` numbers
    them (shared with the socket's other requests, so that ids never repeat on it)."""

    def __init__(self, sock: zmq.Socket[Any], next_rid: Callable[[], int], stop: threading.Event) -> None:
        self.sock = sock
        self.next_rid = next_rid
        self.stop = stop

    def send(self, req: dict[str, Any]) -> int:
        """Send ``req``; return its request id (for :meth:`wait`)."""
        rid = self.next_rid()
        self.sock.send(pack({**req, "rid": rid}))
        return rid

    def wait(self, rid: int, timeout: float) -> dict[str, Any] | None:
        """The reply to request ``rid``, or None after ``timeout`` seconds (or at stop)."""
        deadline = time.monotonic() + timeout
        while not self.stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if self.sock.poll(int(min(remaining, 0.2) * 1000) + 1):
                got: dict[str, Any] = unpack(self.sock.recv())
                if got.get("rid") == rid:
                    return got
        return None

    def ask(self, req: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Send ``req`` and wait for its reply."""
        return self.wait(self.send(req), timeout)
