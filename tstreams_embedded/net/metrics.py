"""Prometheus metrics of a server process (``/metrics`` on ``--http``), via prometheus-client.

Each process builds its own :class:`~prometheus_client.CollectorRegistry` (never the global
one, so that several engines in one process, as in tests, do not mix) and fills it with
*custom collectors*: every value is read from the engine or the server when Prometheus
scrapes, nothing is updated on the request path.

* :class:`EngineCollector`: the engine's commit, request and fsync counters, the number of
  streams, and per stream the partition heads and the consumers' lag, from a bounded
  :func:`~tstreams_embedded.engine.operator.overview.stream_overview` (its limits bound the scrape's
  cost and the number of series);
* :class:`ServerCollector`: the ZeroMQ server's counters (:class:`~.stats.ServerStats`);
* :class:`MetricsHandler`: the Tornado handler that renders a registry.

The cluster adds its own collector on top (:mod:`tstreams_embedded.cluster.metrics`).
Needs ``prometheus-client`` (``pip install tstreams-embedded[metrics]``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from tornado.ioloop import IOLoop
from tornado.web import RequestHandler

from .. import errors
from ..engine.operator.overview import Overview, OverviewLimits, stream_overview
from ..engine.storage.core import Core
from ..ids import txn_millis
from .stats import ServerStats

#: ServerStats fields that are levels, not counts.
_GAUGES = frozenset({"running_generators"})


class EngineCollector(Collector):
    """The engine's counters and its bounded stream overview, read on every scrape."""

    def __init__(self, core: Core, limits: OverviewLimits = OverviewLimits()) -> None:
        self.core = core
        self.limits = limits

    def collect(self) -> Iterator[Metric]:
        core = self.core
        if core.closed:
            return
        c = core.committer
        yield CounterMetricFamily("tstreams_engine_commits", "LMDB write transactions committed", value=c.commits)
        yield CounterMetricFamily("tstreams_engine_requests", "write requests committed (sum of commit group sizes)",
                                  value=c.batches)
        yield CounterMetricFamily("tstreams_engine_fsyncs", "fsyncs of the state environment", value=c.fsyncs)
        yield CounterMetricFamily("tstreams_engine_fsync_seconds",
                                  "seconds spent in fsyncs of the state environment (rate over fsyncs: latency)",
                                  value=c.fsync_seconds)
        try:
            usage = core.store.usage()
        except errors.TStreamsError:
            return
        yield GaugeMetricFamily("tstreams_engine_map_used_bytes", "pages of the LMDB map in use (up to the highest)",
                                value=usage.used_bytes)
        yield GaugeMetricFamily("tstreams_engine_map_size_bytes", "the LMDB map's current size", value=usage.map_bytes)
        yield GaugeMetricFamily("tstreams_engine_map_limit_bytes", "max_map_size: the map never grows past it",
                                value=usage.max_map_bytes)
        yield GaugeMetricFamily("tstreams_engine_disk_bytes", "blocks data.mdb occupies on disk",
                                value=usage.disk_bytes)
        try:
            ov = stream_overview(core.store, self.limits)
        except errors.EngineClosed:
            return
        yield from overview_metrics(ov)


def overview_metrics(ov: Overview) -> Iterable[Metric]:
    """The metric families of one stream overview."""
    # Transaction IDs are 64-bit integers, which a float sample cannot hold exactly: the
    # metrics carry the time an ID stands for (exact to the millisecond), and counts.
    heads = GaugeMetricFamily("tstreams_partition_head_timestamp_seconds",
                              "time of the newest allocated transaction ID of a partition (Unix seconds; 0: none)",
                              labels=["stream", "partition"])
    offsets = GaugeMetricFamily("tstreams_consumer_offset_timestamp_seconds",
                                "time of a consumer's checkpointed transaction ID (Unix seconds)",
                                labels=["stream", "consumer", "partition"])
    lag_txns = GaugeMetricFamily("tstreams_consumer_lag_transactions",
                                 "checkpointed transactions after a consumer's offset (counted up to a cap)",
                                 labels=["stream", "consumer", "partition"])
    lag_s = GaugeMetricFamily("tstreams_consumer_lag_seconds",
                              "time between a consumer's offset and its partition's head (from the IDs)",
                              labels=["stream", "consumer", "partition"])
    expired = CounterMetricFamily("tstreams_consumer_expired_unread_items",
                                  "items the stream's TTL deleted before the consumer read them (issue 19: "
                                  "TTL deletes by age, whoever has or has not read)",
                                  labels=["stream", "consumer", "partition"])
    for s in ov.streams:
        for p, head in enumerate(s.heads):
            heads.add_metric([s.name, str(p)], id_seconds(head))
        for c in s.consumers:
            labels = [s.name, c.consumer, str(c.partition)]
            offsets.add_metric(labels, id_seconds(c.offset))
            lag_s.add_metric(labels, c.lag_seconds)
            expired.add_metric(labels, c.expired_unread)
            if c.lag_txns is not None:
                lag_txns.add_metric(labels, c.lag_txns)
    yield GaugeMetricFamily("tstreams_streams_listed", "streams listed in these metrics", value=len(ov.streams))
    yield GaugeMetricFamily("tstreams_overview_truncated",
                            "1 if streams, partitions or consumers were left out (limits)", value=int(ov.truncated))
    yield heads
    yield offsets
    yield lag_txns
    yield lag_s
    yield expired


def id_seconds(txn_id: int) -> float:
    """The time a transaction ID stands for, in Unix seconds (exact to the millisecond)."""
    return txn_millis(txn_id) / 1000.0


class ServerCollector(Collector):
    """The counters of the ZeroMQ server (:class:`ServerStats`), read on every scrape."""

    def __init__(self, stats: ServerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        for f in dataclasses.fields(self.stats):
            value = getattr(self.stats, f.name)
            if f.name in _GAUGES:
                yield GaugeMetricFamily(f"tstreams_server_{f.name}", f"server: {f.name.replace('_', ' ')}",
                                        value=value)
            else:
                yield CounterMetricFamily(f"tstreams_server_{f.name}", f"server: {f.name.replace('_', ' ')}",
                                          value=value)


def engine_registry(core: Core, server_stats: ServerStats | None = None,
                    limits: OverviewLimits = OverviewLimits()) -> CollectorRegistry:
    """A fresh registry with the engine's (and the server's) collectors."""
    registry = CollectorRegistry()
    registry.register(EngineCollector(core, limits))
    if server_stats is not None:
        registry.register(ServerCollector(server_stats))
    return registry


class MetricsHandler(RequestHandler):
    """``GET /metrics``: the registry in Prometheus' text format."""

    def initialize(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    async def get(self) -> None:
        # off the event loop: the ZeroMQ server shares it, and a scrape reads the store
        body = await IOLoop.current().run_in_executor(None, generate_latest, self.registry)
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(body)


def metrics_route(registry: CollectorRegistry) -> tuple[str, type[RequestHandler], dict[str, Any]]:
    """The Tornado route of ``/metrics`` for ``registry``."""
    return (r"/metrics", MetricsHandler, {"registry": registry})
