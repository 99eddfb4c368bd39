"""Prometheus metrics of a cluster node (``/metrics`` on ``--http``).

The node's registry holds the single-node collectors (:mod:`tstreams_embedded.net.metrics`:
engine counters, partition heads, consumer lag, server counters), :class:`NodeCollector`
(role, epochs, elections, log positions, commits, log syncs, replication lag per follower,
the ZooKeeper session state, snapshots sent and installed, the step timers of a replicated
commit, all read from the node on each scrape) and the two histograms the node observes as it
runs (:class:`~.counters.NodeCounters`: log-entry group sizes, acknowledgement latency).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..engine.operator.overview import OverviewLimits
from ..net.metrics import engine_registry
from ..net.stats import ServerStats
from .coordinator import SessionState
from .counters import STEPS
from .node import Node

ROLES = ("leader", "candidate", "follower")


class NodeCollector(Collector):
    """A cluster node's state, read on every scrape."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        node = self.node
        role = GaugeMetricFamily("tstreams_cluster_role", "1 for this node's current role", labels=["role"])
        for r in ROLES:
            role.add_metric([r], int(node.role == r))
        yield role
        yield GaugeMetricFamily("tstreams_cluster_serving", "1 while this node leads and serves (lease valid)",
                                value=int(node.serving()))
        yield GaugeMetricFamily("tstreams_cluster_diverged", "1 if this node's state diverged (needs a re-sync)",
                                value=int(node.diverged))
        yield GaugeMetricFamily("tstreams_cluster_epoch", "the epoch this node leads, or the newest it knows",
                                value=node.epoch or node.known_epoch)
        yield GaugeMetricFamily("tstreams_cluster_nodes", "configured cluster size", value=node.nodes)
        yield CounterMetricFamily("tstreams_cluster_elections",
                                  "elections this node ran as candidate (epochs it took, won or not)",
                                  value=node.elections)
        yield CounterMetricFamily("tstreams_cluster_commits", "leader: times the commit index advanced",
                                  value=node.commits)
        yield CounterMetricFamily("tstreams_cluster_log_syncs", "synced writes of the replicated log",
                                  value=node.log.syncs)
        last, commit, applied = node.log.last_index, node.log.commit_index, node.applied
        yield GaugeMetricFamily("tstreams_cluster_log_last_index", "index of the last log entry", value=last)
        yield GaugeMetricFamily("tstreams_cluster_commit_index", "index of the last committed entry", value=commit)
        yield GaugeMetricFamily("tstreams_cluster_applied_index", "index of the last applied entry", value=applied)
        yield GaugeMetricFamily("tstreams_cluster_apply_lag_entries", "committed entries not yet applied here",
                                value=max(0, commit - applied))
        lag = GaugeMetricFamily("tstreams_cluster_replication_lag_entries",
                                "leader: log entries a follower has not acknowledged yet", labels=["follower"])
        if node.leading:
            for follower, match in sorted(dict(node.match).items()):
                lag.add_metric([follower], max(0, last - match))
        yield lag
        session = GaugeMetricFamily("tstreams_cluster_zookeeper_session",
                                    "1 for the current state of this node's ZooKeeper session "
                                    "(connected, suspended: connection lost, lost: session expired)",
                                    labels=["state"])
        for state in SessionState:
            session.add_metric([state.value], int(node.session_state is state))
        yield session
        yield from step_metrics(node)
        yield from snapshot_metrics(node)


def step_metrics(node: Node) -> Iterator[Metric]:
    """Where a replicated commit's time goes (:class:`~.counters.StepTimes`)."""
    steps = node.counters.steps
    seconds = CounterMetricFamily("tstreams_cluster_step_seconds", "seconds spent in each step of a replicated commit",
                                  labels=["step"])
    counts = CounterMetricFamily("tstreams_cluster_steps", "occurrences of each step of a replicated commit",
                                 labels=["step"])
    for step in STEPS:
        seconds.add_metric([step], steps.seconds[step])
        counts.add_metric([step], steps.counts[step])
    yield seconds
    yield counts


def snapshot_metrics(node: Node) -> Iterator[Metric]:
    """Snapshot progress: sent (as leader) and installed (as follower) by this process."""
    yield CounterMetricFamily("tstreams_cluster_snapshots_sent", "snapshot transfers this node began as leader",
                              value=node.snapshot_server.started)
    yield CounterMetricFamily("tstreams_cluster_snapshot_sent_bytes", "bytes of snapshot chunks this node sent",
                              value=node.snapshot_server.bytes_sent)
    yield CounterMetricFamily("tstreams_cluster_snapshots_installed", "snapshots this node received and installed",
                              value=node.snapshots_installed)
    yield CounterMetricFamily("tstreams_cluster_snapshot_received_bytes",
                              "bytes of the snapshots this node received and installed",
                              value=node.snapshot_bytes_received)
    yield GaugeMetricFamily("tstreams_cluster_last_snapshot_index",
                            "log index of the last snapshot this node installed (0: none)",
                            value=node.last_snapshot.get("index", 0))


def node_registry(node: Node, server_stats: ServerStats | None = None,
                  limits: OverviewLimits = OverviewLimits()) -> CollectorRegistry:
    """A fresh registry with everything a cluster node reports."""
    registry = engine_registry(node.core, server_stats, limits)
    registry.register(NodeCollector(node))
    registry.register(node.counters.group_size)
    registry.register(node.counters.ack_seconds)
    return registry
