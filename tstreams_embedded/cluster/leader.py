"""What only a leader has, for one epoch (hashicorp/raft's ``leaderState``).

:class:`LeaderState` is built when a node starts leading an epoch (:mod:`.election`) and
dropped when it steps down; nothing of it survives into the next epoch, so no leader-only
field needs resetting by hand. It holds the followers' match indexes (what each one holds,
learnt from its fetches), the fetches parked until there is something new for them, the
membership change under way, the nodes with a ZooKeeper session, the lease, and when each
follower was last heard from (:meth:`LeaderState.lost_quorum`: CheckQuorum).

:func:`commit_candidate` is the commitment rule: the highest index held by the required
number of nodes (the leader counts up to its *durable* index).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .messages import Fetch
from .runtime import REAL, Event

TRACKED_APPENDS = 4096  # appends timed at once (beyond, the oldest timings are dropped)


@dataclass
class LeaderState:
    """One epoch's leadership (see the module docstring)."""

    epoch: int
    #: index of this leadership's first entry (an empty one: it commits everything before it)
    start_index: int
    #: monotonic time until which this node surely still leads (renewed from ZooKeeper)
    lease_until: float
    #: monotonic time of the last append (an idle leader appends a clock tick)
    last_append: float
    #: monotonic time this leadership started
    last_started: float = 0.0
    #: follower -> the last index it holds (from its latest fetch)
    match: dict[str, int] = field(default_factory=dict)
    #: follower connection -> (its fetch with nothing new yet, the time it must be answered by)
    parked: dict[bytes, tuple[Fetch, float]] = field(default_factory=dict)
    #: (index, size) of this leader's membership entry not yet applied
    pending_members: tuple[int, int] | None = None
    #: nodes with a ZooKeeper session (None until first read)
    live_nodes: set[str] | None = None
    #: node id -> the ZooKeeper session that owns it: a fetch counts only from that session
    owners: dict[str, str] = field(default_factory=dict)
    #: follower -> monotonic time of its last request in this epoch (CheckQuorum)
    heard: dict[str, float] = field(default_factory=dict)
    #: log index -> monotonic time of its append here (for the "replication" step timer;
    #: pruned once every follower acknowledged it, bounded by :data:`TRACKED_APPENDS`)
    appended_at: dict[int, float] = field(default_factory=dict)
    #: log index -> monotonic time the commit index moved to it (for "commit_to_applied")
    committed_at: dict[int, float] = field(default_factory=dict)
    #: monotonic time the commit index last moved (a commit-only fetch reply waits for entries)
    commit_moved_at: float = 0.0
    #: set when this leadership ends (the node passes its runtime's event)
    ended: Event = field(default_factory=REAL.event)

    def lost_quorum(self, now: float, timeout: float, quorum: int) -> bool:
        """CheckQuorum (Raft §6.2, etcd's ``checkQuorum``): whether fewer than ``quorum`` nodes
        (this leader included) were heard from within the last ``timeout`` seconds, once this
        leadership is that old. Such a leader cannot commit, and must let a majority elect
        another one."""
        if now - self.last_started < timeout:
            return False
        heard = 1 + sum(1 for at in self.heard.values() if now - at < timeout)
        return heard < quorum


def note_acknowledged(state: LeaderState, before: int, now_holds: int, now: float) -> list[float]:
    """A follower's match index moved from ``before`` to ``now_holds``: the seconds from the
    append of each timed entry it newly holds to now (its replication round trip); drops the
    timings every follower has acknowledged, and the oldest beyond :data:`TRACKED_APPENDS`."""
    times = state.appended_at
    if not times:
        return []
    seconds = [now - times[ix] for ix in range(before + 1, now_holds + 1) if ix in times]
    done = min(state.match.values()) if state.match else 0
    for ix in [ix for ix in times if ix <= done]:
        del times[ix]
    while len(times) > TRACKED_APPENDS:
        del times[next(iter(times))]
    return seconds


def commit_candidate(durable_index: int, match: dict[str, int], nodes: int, required: int) -> int:
    """The highest index held by ``required`` of ``nodes`` nodes: this leader up to
    ``durable_index`` and each follower up to its ``match``; 0 if none."""
    positions = sorted([durable_index, *match.values()], reverse=True)
    positions += [0] * max(0, nodes - len(positions))
    return positions[required - 1] if 0 < required <= len(positions) else 0
