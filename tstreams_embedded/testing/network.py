"""An in-memory network between cluster nodes in one process: :class:`MemoryNetwork`, and
per node a :class:`MemoryTransport` (a :class:`tstreams_embedded.cluster.transport.Transport`).

Endpoints are ``mem://<name>``. Every frame travels from one node to another, so a test
can cut any set of links in either direction (:meth:`MemoryNetwork.partition`,
:meth:`~MemoryNetwork.isolate`, :meth:`~MemoryNetwork.heal`) and make the network lose,
delay, duplicate and reorder frames (:meth:`MemoryNetwork.set_faults`), all drawn from one
seeded random generator. Its waits and clock are a :class:`~tstreams_embedded.cluster.runtime.Runtime`'s
(real threads by default; the deterministic simulation passes its own).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass

from .. import errors
from ..cluster.runtime import REAL, Event, Runtime

PREFIX = "mem://"


@dataclass
class Faults:
    """Per-frame fault probabilities and the delay range (seconds)."""

    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    delay: tuple[float, float] = (0.0, 0.0)


class _Inbox:
    """Frames waiting for one receiver: ``(deliver_at, sender, body)``."""

    def __init__(self, network: MemoryNetwork) -> None:
        self.network = network
        self.frames: list[tuple[float, bytes, bytes]] = []

    def take(self, timeout: float, wake: Event | None = None) -> list[tuple[bytes, bytes]]:
        """The frames due, waiting up to ``timeout`` for one (or for ``wake``)."""
        cv = self.network.cv
        clock = self.network.runtime.monotonic
        deadline = clock() + timeout
        with cv:
            while True:
                now = clock()
                due = [f for f in self.frames if f[0] <= now]
                if due:
                    self.frames = [f for f in self.frames if f[0] > now]
                    return [(sender, body) for _, sender, body in due]
                if wake is not None and wake.is_set():
                    wake.clear()
                    return []
                remaining = deadline - now
                if remaining <= 0:
                    return []
                pending = [f[0] - now for f in self.frames]
                cv.wait(min([remaining, *pending]))


class MemoryNetwork:
    """The links between the nodes of one test (see the module docstring). Thread-safe."""

    def __init__(self, seed: int = 0, runtime: Runtime = REAL) -> None:
        self.runtime = runtime
        self.cv = runtime.condition()
        self.random = random.Random(seed)
        self.faults = Faults()
        self.cut: set[tuple[str, str]] = set()  # (from, to) node names whose frames are lost
        self.lose_next: dict[tuple[str, str], int] = {}  # (from, to) -> how many of the next frames are lost
        self.servers: dict[str, _Inbox] = {}
        self.links: dict[bytes, tuple[str, _Inbox]] = {}  # link id -> (owner node, reply inbox)
        self._ids = itertools.count(1)
        self.sent = 0
        self.dropped = 0

    def transport(self, name: str) -> MemoryTransport:
        return MemoryTransport(self, name)

    # -------------------------------------------------------------- faults
    def partition(self, side_a: Iterable[str], side_b: Iterable[str], both_ways: bool = True) -> None:
        """Cut every link from a node of ``side_a`` to one of ``side_b`` (and back)."""
        a, b = list(side_a), list(side_b)
        with self.cv:
            for x in a:
                for y in b:
                    self.cut.add((x, y))
                    if both_ways:
                        self.cut.add((y, x))

    def isolate(self, name: str, others: Iterable[str]) -> None:
        self.partition([name], others)

    def drop_next(self, sender: str, receiver: str, count: int = 1) -> None:
        """Lose the next ``count`` frames from ``sender`` to ``receiver`` (a scripted loss)."""
        with self.cv:
            self.lose_next[(sender, receiver)] = self.lose_next.get((sender, receiver), 0) + count

    def heal(self) -> None:
        with self.cv:
            self.cut.clear()
            self.faults = Faults()
            self.cv.notify_all()

    def set_faults(self, faults: Faults) -> None:
        with self.cv:
            self.faults = faults

    # -------------------------------------------------------------- delivery
    def deliver(self, sender: str, receiver: str, inbox: _Inbox, frame_from: bytes, body: bytes) -> None:
        with self.cv:
            self.sent += 1
            f = self.faults
            scripted = self.lose_next.get((sender, receiver), 0)
            if scripted:
                self.lose_next[(sender, receiver)] = scripted - 1
            if scripted or (sender, receiver) in self.cut or self.random.random() < f.drop:
                self.dropped += 1
                return
            copies = 2 if self.random.random() < f.duplicate else 1
            for _ in range(copies):
                at = self.runtime.monotonic() + (self.random.uniform(*f.delay) if f.delay[1] > 0 else 0.0)
                item = (at, frame_from, body)
                if inbox.frames and self.random.random() < f.reorder:
                    inbox.frames.insert(self.random.randrange(len(inbox.frames)), item)
                else:
                    inbox.frames.append(item)
            self.cv.notify_all()


class MemoryServer:
    """A node's replication endpoint on a :class:`MemoryNetwork`."""

    def __init__(self, network: MemoryNetwork, name: str) -> None:
        self.network = network
        self.name = name
        self.inbox = _Inbox(network)
        self._wake = network.runtime.event()

    @property
    def endpoint(self) -> str:
        return PREFIX + self.name

    def poll(self, timeout: float) -> list[tuple[bytes, bytes]]:
        return self.inbox.take(timeout, self._wake)

    def reply(self, peer: bytes, body: bytes) -> None:
        with self.network.cv:
            owner = self.network.links.get(peer)
        if owner is not None:
            self.network.deliver(self.name, owner[0], owner[1], b"", body)

    def wake(self) -> None:
        with self.network.cv:
            self._wake.set()
            self.network.cv.notify_all()

    def watch(self, fd: int) -> None:
        pass  # the replication loop polls at least every 50 ms

    def unwatch(self, fd: int) -> None:
        pass

    def close(self) -> None:
        with self.network.cv:
            if self.network.servers.get(self.name) is self.inbox:
                del self.network.servers[self.name]


class MemoryLink:
    """A link from one node to another's :class:`MemoryServer`."""

    def __init__(self, network: MemoryNetwork, owner: str, target: str) -> None:
        self.network = network
        self.owner = owner
        self.target = target
        self.inbox = _Inbox(network)
        with network.cv:
            self.id = b"link-%d" % next(network._ids)
            network.links[self.id] = (owner, self.inbox)

    def send(self, body: bytes) -> None:
        with self.network.cv:
            server = self.network.servers.get(self.target)
        if server is not None:
            self.network.deliver(self.owner, self.target, server, self.id, body)

    def receive(self, timeout: float) -> bytes | None:
        got = self.inbox.take(timeout)
        if not got:
            return None
        first, *rest = got
        if rest:  # put the others back, in order
            with self.network.cv:
                now = self.network.runtime.monotonic()
                self.inbox.frames[:0] = [(now, s, b) for s, b in rest]
        return first[1]

    def close(self) -> None:
        with self.network.cv:
            self.network.links.pop(self.id, None)


class MemoryTransport:
    """One node's :class:`~tstreams_embedded.cluster.transport.Transport` on a network."""

    def __init__(self, network: MemoryNetwork, name: str) -> None:
        self.network = network
        self.name = name

    def listen(self, bind: str) -> MemoryServer:
        name = bind[len(PREFIX):] if bind.startswith(PREFIX) else self.name
        with self.network.cv:
            if name in self.network.servers:
                raise errors.BindFailed(f"cannot listen for replication on {bind}: address in use")
            server = MemoryServer(self.network, name)
            self.network.servers[name] = server.inbox
        return server

    def connect(self, endpoint: str) -> MemoryLink:
        return MemoryLink(self.network, self.name, endpoint[len(PREFIX):])
