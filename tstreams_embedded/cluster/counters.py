"""What a cluster node measures as it runs, for ``/metrics`` (:mod:`.metrics`).

Most of a node's metrics are read from its state when Prometheus scrapes (roles, epochs,
log positions, counters the node keeps anyway). Two are distributions and must be observed
as events happen: the size of each log entry (client writes grouped into one replicated
append: the cluster's commit group) and the time a write waited to be acknowledged. They
are prometheus-client histograms, created unregistered here and registered in the node's
own registry by :func:`.metrics.node_registry`.
"""

from __future__ import annotations

from prometheus_client import Histogram

GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class NodeCounters:
    """The histograms a :class:`~.node.Node` observes (thread-safe, as prometheus-client's are)."""

    def __init__(self) -> None:
        self.group_size = Histogram("tstreams_cluster_group_size", "client writes per replicated log entry",
                                    buckets=GROUP_BUCKETS, registry=None)
        self.ack_seconds = Histogram("tstreams_cluster_ack_seconds",
                                     "leader: from a write's log append to its acknowledgement (committed and applied)",
                                     buckets=ACK_BUCKETS, registry=None)
        self.steps = StepTimes()


#: The steps of a replicated commit that :class:`StepTimes` accumulates (see docs/CLUSTER.md,
#: "Where a commit's time goes").
STEPS = (
    "leader_append",      # leader: write the entry into its log (no fsync)
    "leader_log_sync",    # leader: fsync its log
    "replication",        # leader: from its append to a follower's acknowledgement (round trip + its fsync)
    "follower_append",    # follower: write fetched entries into its log (no fsync)
    "follower_log_sync",  # follower: fsync its log
    "commit_to_applied",  # leader: from the commit index moving to the entry applied here
    "apply",              # any node: apply one committed entry to the engine
    "ack",                # leader: from the append to the client's answer (= ack_seconds)
)


class StepTimes:
    """Seconds spent in each step of a replicated commit (:data:`STEPS`), as running
    totals and counts: cheap enough to keep always on, read by ``/metrics``
    (``tstreams_cluster_step_seconds_total{step}``, ``tstreams_cluster_steps_total{step}``)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(STEPS, 0.0)
        self.counts = dict.fromkeys(STEPS, 0)

    def observe(self, step: str, seconds: float, count: int = 1) -> None:
        """Add ``seconds`` spent on ``count`` occurrences of ``step``."""
        self.seconds[step] += seconds
        self.counts[step] += count

    def mean(self, step: str) -> float:
        """Mean seconds per occurrence of ``step`` (0.0 if none)."""
        n = self.counts[step]
        return self.seconds[step] / n if n else 0.0
