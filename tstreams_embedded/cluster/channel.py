"""A follower's requests to the leader over its replication link (:class:`.transport.PeerLink`),
matched to their replies by request id (``rid``); replies to older requests are dropped."""

from __future__ import annotations

from collections.abc import Callable

from .messages import Request, Wire, pack, reply_rid, unpack
from .runtime import REAL, Event
from .transport import PeerLink


class Channel:
    """Requests over one link (see the module docstring). ``next_rid`` numbers them (shared
    with the link's other requests, so that ids never repeat on it)."""

    def __init__(self, link: PeerLink, next_rid: Callable[[], int], stop: Event,
                 monotonic: Callable[[], float] = REAL.monotonic) -> None:
        self.link = link
        self.monotonic = monotonic
        self.next_rid = next_rid
        self.stop = stop

    def send(self, req: Request) -> int:
        """Send ``req`` under a new request id; return that id (for :meth:`wait`)."""
        rid = self.next_rid()
        self.link.send(pack(req._replace(rid=rid).to_wire()))
        return rid

    def wait(self, rid: int, timeout: float) -> Wire | None:
        """The raw reply to request ``rid`` (the caller decodes it with the reply record it
        expects, :mod:`.messages`), or None after ``timeout`` seconds (or at stop)."""
        deadline = self.monotonic() + timeout
        while not self.stop.is_set():
            remaining = deadline - self.monotonic()
            if remaining <= 0:
                return None
            raw = self.link.receive(min(remaining, 0.2))
            if raw is not None:
                got = unpack(raw)
                if isinstance(got, dict) and reply_rid(got) == rid:
                    return got
        return None

    def ask(self, req: Request, timeout: float) -> Wire | None:
        """Send ``req`` and wait for its reply."""
        return self.wait(self.send(req), timeout)
