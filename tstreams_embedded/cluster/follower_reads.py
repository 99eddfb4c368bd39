"""Follower reads: a follower serves consumer reads from its applied state, to the clients
that ask for it (``ts.connect("zk://…", read_from="follower")``).

* **Opt-in per connection.** A client calls ``read_from_follower`` once on its connection
  (its server session); only then does a follower answer the :data:`READ_METHODS` on it.
  Any other client still gets :class:`~tstreams_embedded.errors.NotLeader` from a
  follower, so a client that follows the leader can never read stale data by mistake (a
  deposed leader that became a follower refuses it too). A session the server dropped
  (the client reconnected) has to opt in again: the client does so when it meets
  ``NotLeader``.
* **Never uncommitted.** A follower applies committed entries only, so its state never
  holds a write that could be lost. Reads run on :class:`~..engine.stateview.StateTimeReader`:
  judged at the applied entry's time and never writing (no local invalidation).
* **Bounded staleness.** A follower answers only while it follows a known leader, had an
  answer to a fetch from it within ``max_contact_age`` seconds (``min(2, session/2)``), is
  not diverged, and has applied to within :data:`MAX_APPLY_LAG` entries of its commit
  index. Otherwise it answers ``NotLeader`` and the client reads elsewhere. A fetch answer
  carries the leader's commit index, so a follower read reflects every write acknowledged
  before about ``max_contact_age`` + the follower's apply delay ago (typically a few
  milliseconds on a healthy cluster; the leader parks fetches for at most 0.25 s). It does
  not see a client's own latest writes at once (no read-your-writes), and an open
  transaction that expired by wall-clock time still blocks a follower's readers until the
  next entry is applied (idle cluster).
* **Writes** always go to the leader.
"""

from __future__ import annotations

import weakref
from typing import Any

from .. import errors
from ..engine.storage.state_time_reads import StateTimeReader
from ..net.session import Session
from .node import Node

#: The client-port methods a follower serves to sessions that opted in.
READ_METHODS = frozenset({"get_stream", "list_streams", "fetch", "scan_index", "get_transaction",
                          "transactions_range", "last_transaction", "last_txn_id", "get_offsets", "get_marker",
                          "wait_for_commit"})
MAX_APPLY_LAG = 1000


class FollowerReads:
    """Which sessions asked for follower reads, and whether this node may serve them now."""

    def __init__(self, node: Node, max_contact_age: float | None = None) -> None:
        self.node = node
        self.max_contact_age = (min(2.0, node.session_timeout / 2) if max_contact_age is None
                                else float(max_contact_age))
        self.reader = StateTimeReader(node.core, node.clock)
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()

    def opt_in(self, session: Session) -> dict[str, Any]:
        """``read_from_follower``: this session accepts follower reads; returns the node's info."""
        self._sessions.add(session)
        return {**self.node.info(), "max_contact_age": self.max_contact_age}

    def opted_in(self, session: Session) -> bool:
        return session in self._sessions

    def check(self) -> None:
        """Raise :class:`NotLeader` unless this follower may serve reads now."""
        node = self.node
        leader = node.leader_info
        why = None
        if node.role != "follower" or node.diverged:
            why = f"it is {'diverged' if node.diverged else node.role}"
        elif not leader or int(leader.get("epoch", 0)) < node.known_epoch:
            why = "it follows no current leader"
        elif node.timer.monotonic() - node.last_contact > self.max_contact_age:
            why = f"it has not heard from the leader for over {self.max_contact_age:g} s"
        elif node.log.commit_index - node.applied > MAX_APPLY_LAG:
            why = f"it is more than {MAX_APPLY_LAG} entries behind its commit index"
        if why is not None:
            raise errors.NotLeader(f"node {node.node_id} cannot serve follower reads: {why}; {node.leader_hint()}")
