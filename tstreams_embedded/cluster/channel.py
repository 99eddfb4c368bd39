"""A follower's requests to the leader over its replication socket (a ZeroMQ DEALER),
matched to their replies by request id (``rid``); replies to older requests are dropped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from .messages import Request, Wire, pack, reply_rid, unpack


class Channel:
    """Requests over one DEALER socket (see the module docstring). ``next_rid`` numbers
    them (shared with the socket's other requests, so that ids never repeat on it)."""

    def __init__(self, sock: zmq.Socket[Any], next_rid: Callable[[], int], stop: threading.Event) -> None:
        self.sock = sock
        self.next_rid = next_rid
        self.stop = stop

    def send(self, req: Request) -> int:
        """Send ``req`` under a new request id; return that id (for :meth:`wait`)."""
        rid = self.next_rid()
        self.sock.send(pack(req._replace(rid=rid).to_wire()))
        return rid

    def wait(self, rid: int, timeout: float) -> Wire | None:
        """The raw reply to request ``rid`` (the caller decodes it with the reply record it
        expects, :mod:`.messages`), or None after ``timeout`` seconds (or at stop)."""
        deadline = time.monotonic() + timeout
        while not self.stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if self.sock.poll(int(min(remaining, 0.2) * 1000) + 1):
                got = unpack(self.sock.recv())
                if isinstance(got, dict) and reply_rid(got) == rid:
                    return got
        return None

    def ask(self, req: Request, timeout: float) -> Wire | None:
        """Send ``req`` and wait for its reply."""
        return self.wait(self.send(req), timeout)
