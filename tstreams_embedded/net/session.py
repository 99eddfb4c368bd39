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
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Running:
    """A generator request in progress."""

    session: Session
    req_id: int
    gen: Generator[Any, None, Any]
    parked: object | None = None  # the timeout handle while parked
    resume: Any = None  # the value the generator receives when resumed


@dataclass
class Session:
    identity: bytes
    last_seen: float = field(default_factory=time.monotonic)
    running: dict[int, Running] = field(default_factory=dict)
    closed: bool = False

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
        s = self._by_id.get(identity)
        if s is None:
            s = self._by_id[identity] = Session(identity, now)
        s.touch(now)
        return s

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
