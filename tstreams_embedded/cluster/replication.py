"""A node's replication endpoint: answers candidates' hellos, and (leading) followers'
fetches and snapshot requests.

* :class:`~.messages.Hello` (any node): a candidate that bumped the epoch asks for this
  node's log position; answering it makes this node refuse every older epoch. An epoch
  newer than this node knows is believed only if ZooKeeper's epoch has reached it, so a
  forged message cannot make the nodes refuse every real election.
* :class:`~.messages.Fetch` (leader): the follower acknowledges what it holds (its match
  index), and gets the entries after it, parked up to :data:`FETCH_PARK` seconds when there
  is nothing new (a new commit index alone waits :data:`COMMIT_LINGER` for entries to ride
  with); or ``TRUNCATE`` (its log diverges), ``SNAPSHOT`` (the leader's log was
  trimmed past it), ``FENCED`` (it knows a newer epoch: this leader steps down).
* Snapshot requests go to the :class:`~.snapshot.SnapshotServer`.

One thread (:meth:`ReplicationService.run`) serves it all; parked fetches belong to the
epoch's :class:`~.leader.LeaderState` and are answered ``NOT_LEADER`` once it ends.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from .. import errors
from .leader import LeaderState, note_acknowledged
from .messages import (
    ErrorReply,
    Fetch,
    FetchReply,
    Hello,
    HelloReply,
    Reply,
    ReplyStatus,
    Request,
    SnapshotChunk,
    SnapshotHead,
    decode_request,
    pack,
)

if TYPE_CHECKING:
    from ..engine.storage.core import Core
    from .applier import Applier
    from .coordinator import Coordinator
    from .counters import NodeCounters
    from .log import ReplicatedLog
    from .runtime import Event
    from .snapshot import SnapshotServer
    from .timesource import TimeSource
    from .transport import ReplicationServer

log = logging.getLogger(__name__)

FETCH_PARK = 0.25  # seconds a fetch with nothing new waits on the leader
MAX_PARKED = 256  # parked fetches (at most one per peer connection); beyond, a fetch is answered at once
#: seconds a parked fetch waits for entries to carry a new commit index before it is answered
#: with the commit index alone (piggybacking: under load every reply brings entries and
#: the commit index together, one message instead of two)
COMMIT_LINGER = 0.02
EPOCH_CHECK_TIMEOUT = 2.0  # seconds to read P/epoch when a peer names a newer epoch


class ReplicationNode(Protocol):
    """What :class:`ReplicationService` uses of its node: :class:`~.node.Node` is one (a protocol,
    so that this module need not import the node's)."""

    applier: Applier
    coordinator: Coordinator
    core: Core
    counters: NodeCounters
    known_epoch: int
    leader_state: LeaderState | None
    log: ReplicatedLog
    server: ReplicationServer
    snapshot_server: SnapshotServer
    stopping: Event
    timer: TimeSource

    def advance_commit(self) -> None: ...

    def step_down(self, why: str) -> None: ...


class ReplicationService:
    """``node``'s replication endpoint (see the module docstring)."""

    def __init__(self, node: ReplicationNode) -> None:
        self.node = node
        self.epoch_refusals = 0  # hello/fetch epochs refused because ZooKeeper never reached them
        self.foreign_fetches = 0  # fetches from a session that does not own the node id they name
        self._served: LeaderState | None = None  # the leadership whose parked fetches this loop holds

    def run(self) -> None:
        n = self.node
        server = n.server
        n.snapshot_server.attach(server)
        while not n.stopping.is_set():
            try:
                received = server.poll(0.05)
            except errors.EngineClosed:  # the endpoint was closed under us (stopping)
                return
            n.snapshot_server.serve()
            for ident, body in received:
                try:
                    request = decode_request(body)
                except errors.ProtocolError as exc:
                    self.send(ident, ErrorReply(str(exc)))
                    continue
                try:
                    self.on_request(ident, request)
                except Exception:  # noqa: BLE001 - last resort of the serving thread: log it, serve the next
                    log.exception("replication request failed")
            self.answer_parked()

    def send(self, ident: bytes, reply: Reply) -> None:
        self.node.server.reply(ident, pack(reply.to_wire()))

    def on_request(self, ident: bytes, req: Request) -> None:
        n = self.node
        if isinstance(req, Hello):
            self.on_hello(ident, req)
        elif isinstance(req, Fetch):
            self.on_fetch(ident, req)
        elif isinstance(req, SnapshotChunk):  # see snapshot.SnapshotServer
            state = n.leader_state
            if state is not None:
                state.heard[req.node] = n.timer.monotonic()
            n.snapshot_server.chunk(ident, req)
        else:
            state = n.leader_state
            if state is not None:
                state.heard[req.node] = n.timer.monotonic()
            if state is None:
                self.send(ident, SnapshotHead(req.rid, ReplyStatus.NOT_LEADER))
                return
            applied = n.applier.applied
            n.snapshot_server.begin(ident, req, state.epoch, n.core.store, n.applier.cdb,
                                    n.log.epoch_at(applied), n.log.now_at(applied))

    def on_hello(self, ident: bytes, req: Hello) -> None:
        n = self.node
        epoch = req.epoch
        if epoch > n.known_epoch and not self.epoch_reached(epoch, f"a hello from {req.node!r}"):
            self.send(ident, HelloReply(False, n.known_epoch, rid=req.rid))
            return
        with n.log.lock:
            if epoch < n.known_epoch:
                self.send(ident, HelloReply(False, n.known_epoch, rid=req.rid))
                return
            n.known_epoch = epoch
            last_epoch, last_index = n.log.position()
            if n.log.failed is not None:  # what it wrote after the last good fsync may be lost: not held
                last_index = n.log.durable_index
                last_epoch = n.log.epoch_at(last_index) or 0
        state = n.leader_state
        if state is not None and state.epoch < epoch:
            n.step_down(f"{req.node} runs for epoch {epoch}")
        self.send(ident, HelloReply(True, 0, last_epoch, last_index, rid=req.rid))

    def on_fetch(self, ident: bytes, req: Fetch) -> None:
        n = self.node
        rid = req.rid
        state = n.leader_state
        if state is None:
            self.send(ident, FetchReply(rid, ReplyStatus.NOT_LEADER))
            return
        if req.known > state.epoch:
            if not self.epoch_reached(req.known, f"a fetch from {req.node!r}"):
                return  # a forged epoch: no answer (the follower, if real, asks again)
            self.send(ident, FetchReply(rid, ReplyStatus.FENCED))
            n.step_down(f"{req.node} knows epoch {req.known}")
            return
        if state.owners.get(req.node) != req.session:
            # not from the process that owns this node id (a duplicate --node-id, or a
            # session this leader has not seen yet): never counted as that node's ack
            self.foreign_fetches += 1
            if self.foreign_fetches & (self.foreign_fetches - 1) == 0:  # bounded logging
                log.warning("ignored a fetch as %r from ZooKeeper session %r, which does not own that node id "
                            "(%d such fetches so far)", req.node, req.session, self.foreign_fetches)
            self.send(ident, FetchReply(rid, ReplyStatus.NOT_LEADER))
            return
        state.heard[req.node] = n.timer.monotonic()  # (CheckQuorum)
        lg = n.log
        prev = req.from_index - 1
        if prev < lg.base_index:  # trimmed: only a snapshot can bring this follower up to date
            state.match.pop(req.node, None)
            self.send(ident, FetchReply(rid, ReplyStatus.SNAPSHOT, state.epoch, first=lg.first_index))
            return
        if prev > lg.last_index or lg.epoch_at(prev) != req.last_epoch:
            bound = lg.last_index if prev > lg.last_index else prev - 1
            to = max(0, min(bound, lg.end_of_epoch(req.last_epoch)))
            self.send(ident, FetchReply(rid, ReplyStatus.TRUNCATE, state.epoch, to=to))
            return
        before = state.match.get(req.node, prev)
        state.match[req.node] = prev
        if prev > before:
            for seconds in note_acknowledged(state, before, prev, n.timer.monotonic()):
                n.counters.steps.observe("replication", seconds)
        n.snapshot_server.fetched(req.node)
        n.advance_commit()
        self.take_parked(state)
        state.parked.pop(ident, None)  # a newer fetch from the same peer replaces its parked one
        if not self.reply_fetch(state, ident, req, force=len(state.parked) >= MAX_PARKED):
            state.parked[ident] = (req, n.timer.monotonic() + FETCH_PARK)

    def epoch_reached(self, epoch: int, what: str) -> bool:
        """Whether ZooKeeper's epoch has reached ``epoch`` (named by ``what``, a peer's
        message): a real candidate bumps it before it says hello, so a larger one is forged
        (or from another cluster) and is ignored. Unknown (ZooKeeper unreachable): False."""
        try:
            current = self.node.coordinator.read_epoch(fresh=True, timeout=EPOCH_CHECK_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: believe nothing new
            log.debug("cannot check epoch %d of %s: %s", epoch, what, exc)
            return False
        if epoch <= current:
            return True
        self.epoch_refusals += 1
        if self.epoch_refusals & (self.epoch_refusals - 1) == 0:  # 1st, 2nd, 4th, 8th…: bounded logging
            log.warning("ignored %s naming epoch %d: ZooKeeper's epoch is %d (%d such messages so far)",
                        what, epoch, current, self.epoch_refusals)
        return False

    def reply_fetch(self, state: LeaderState, ident: bytes, req: Fetch, force: bool = False) -> bool:
        lg = self.node.log
        start = req.from_index
        entries = lg.read(start) if start <= lg.last_index else []
        commit = lg.commit_index
        if not entries and not force and (commit <= req.commit
                                          or self.node.timer.monotonic() - state.commit_moved_at < COMMIT_LINGER):
            return False  # nothing new, or only a commit index that the next entries can carry
        self.send(ident, FetchReply(req.rid, ReplyStatus.OK, state.epoch, commit, [e.to_wire() for e in entries]))
        return True

    def take_parked(self, state: LeaderState | None) -> None:
        """Serve ``state``'s parked fetches from now on; those of an ended leadership are
        answered ``NOT_LEADER`` (their followers ask the new leader at once)."""
        old = self._served
        if old is state:
            return
        if old is not None:
            for ident, (req, _) in list(old.parked.items()):
                self.send(ident, FetchReply(req.rid, ReplyStatus.NOT_LEADER))
            old.parked.clear()
        self._served = state

    def answer_parked(self) -> None:
        state = self.node.leader_state
        self.take_parked(state)
        if state is None or not state.parked:
            return
        now = self.node.timer.monotonic()
        for ident, (req, deadline) in list(state.parked.items()):
            if self.reply_fetch(state, ident, req, force=now >= deadline):
                del state.parked[ident]
