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
