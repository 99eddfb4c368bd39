"""Per-client state on the server.

A session is keyed by the ZeroMQ routing identity of a client connection. It records when
the client was last heard from and which generator requests it has running. A session
that stays silent for longer than the session timeout (clients send heartbeats well within
it), or whose identity ZeroMQ reports as gone, is dropped and its generators are closed.

Sessions hold **no** engine state: a client's open transactions live in the engine and
are kept alive only by the client's own keep-alive writes, so a client that disappears
keeps nothing alive forever — its transactions expire on their TTL.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from .assembly import Assembly


@dataclass
class Running:
    """A generator request in progress."""

    session: Session
    req_id: int
    gen: Generator[Any, None, Any]
    parked: object | None = None  # the timeout handle while parked
    resume: Any = None  # the value the generator receives when resumed


@dataclass(eq=False)  # identity semantics: sessions are kept in sets
class Session:
    identity: bytes
    last_seen: float = field(default_factory=time.monotonic)
    running: dict[int, Running] = field(default_factory=dict)
    closed: bool = False
    #: The wire protocol version of its requests, in which it is answered (see ``framing``).
    version: int = 3
    # Memory accounting (bytes; see server.py "Memory budgets"):
    requests: int = 0  # requests handed to an executor and not yet answered
    replies: int = 0  # replies handed to ZeroMQ and not yet known to have left the process
    untracked: int = 0  # the part of ``replies`` sent since the last tracked reply
    trackers: deque[tuple[Any, int]] = field(default_factory=deque)  # (zmq.MessageTracker, bytes it covers)
    parked: deque[tuple[list[bytes], int]] = field(default_factory=deque)  # requests held back (frames, size)
    parked_bytes: int = 0
    #: The request arriving in pieces, if any (see ``assembly``; one at a time per client).
    assembly: Assembly | None = None
    stray_piece_of: int = -1  # the request of the last piece answered as stray (answered once)

    @property
    def in_flight(self) -> int:
        """Bytes this client holds in the server: requests being run and replies unsent."""
        return self.requests + self.replies

    def touch(self, now: float) -> None:
        self.last_seen = now


class Sessions:
    """The session table."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._by_id: dict[bytes, Session] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, identity: bytes, now: float) -> Session:
        """The session of ``identity`` (made if new), marked as heard from at ``now``."""
        s = self._by_id.get(identity)
        if s is None:
            s = self._by_id[identity] = Session(identity, now)
        else:
            s.last_seen = now
        return s

    def find(self, identity: bytes) -> Session | None:
        """The session of ``identity``, if any (no side effect)."""
        return self._by_id.get(identity)

    def drop(self, identity: bytes) -> Session | None:
        s = self._by_id.pop(identity, None)
        if s is not None:
            s.closed = True
        return s

    def expired(self, now: float) -> list[Session]:
        """Remove and return the sessions silent for longer than the timeout."""
        limit = now - self.timeout
        gone = [s for s in self._by_id.values() if s.last_seen < limit]
        for s in gone:
            self.drop(s.identity)
        return gone

    def all(self) -> list[Session]:
        return list(self._by_id.values())
