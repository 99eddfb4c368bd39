"""Prometheus metrics of an application instance (``prometheus-client``, one registry per app).

Counters and histograms are updated as the tasks run; gauges that need reads (store sizes,
lag) are computed when scraped, by :class:`_StateCollector`. Every name starts with
``tstreams_streams_``; ``partition`` labels name the task.

==============================================  =============================================
metric                                          meaning
==============================================  =============================================
``records_processed_total{partition}``          input records processed
``records_out_total{partition}``                records written by the task's commits
``commits_total{partition}``                    commits (one engine write each)
``commit_latency_seconds{partition}``           histogram: the commit's engine write
``process_latency_seconds{partition}``          histogram: processing one input transaction
``end_to_end_latency_seconds``                  histogram: input transaction commit → processed
``punctuations_total{kind}``                    punctuator calls (``stream_time``/``wall_clock``)
``late_records_dropped_total``                  records for closed windows
``skipped_records_total``                       records dropped for a null key
``fenced_commits_total``                        commits refused because the task moved
``rebalances_total``                            assignment changes seen by this instance
``assigned_partitions``                         tasks this instance runs now
``members``                                     live instances of the application
``store_entries{store,partition}``              entries of each store of each task (a scan)
``lag_ms{stream,partition}``                    newest input transaction − oldest unprocessed
``lag_records{stream,partition}``               input records not yet committed
``stream_time_lag_ms{partition}``               wall clock − the task's stream time
==============================================  =============================================
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..ids import ID_MULTIPLIER
from .appview import AppView
from .stores import namespace, pages

PREFIX = "tstreams_streams"
#: counters that :meth:`App.count` names, and the metric each one increments
#: lag counts at most this many input transactions per partition per scrape
LAG_SCAN = 10_000
_NAMED = {"late_dropped": "late", "skipped_null_key": "skipped"}


class ObservedReader(Protocol):
    """A source partition of a task, as the lag gauges read it (``task.SourceReader``)."""

    @property
    def stream(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def committed(self) -> int:
        """The last input transaction committed."""


class ObservedTask(Protocol):
    """A running task, as the gauges read it (``task.Task``)."""

    @property
    def partition(self) -> int: ...

    @property
    def readers(self) -> Sequence[ObservedReader]: ...

    def stream_time(self) -> int | None: ...


class ObservedApp(AppView, Protocol):
    """An app instance, as the gauges read it (:class:`~.app.App` is one)."""

    def running_tasks(self) -> Sequence[ObservedTask]: ...


class AppMetrics:
    """The metrics of one app instance (``app.prometheus``); ``exposition()`` is the text
    format a Prometheus server scrapes."""

    def __init__(self, app: ObservedApp) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.records = Counter(f"{PREFIX}_records_processed", "Input records processed", ["partition"], registry=r)
        self.records_out = Counter(f"{PREFIX}_records_out", "Records written by commits", ["partition"], registry=r)
        self.commits = Counter(f"{PREFIX}_commits", "Commits (one engine write each)", ["partition"], registry=r)
        self.commit_latency = Histogram(f"{PREFIX}_commit_latency_seconds", "Duration of a commit's engine write",
                                        ["partition"], registry=r)
        self.process_latency = Histogram(f"{PREFIX}_process_latency_seconds",
                                         "Processing one input transaction", ["partition"], registry=r)
        self.end_to_end = Histogram(f"{PREFIX}_end_to_end_latency_seconds",
                                    "From an input transaction's commit to its processing", registry=r)
        self.punctuations = Counter(f"{PREFIX}_punctuations", "Punctuator calls", ["kind"], registry=r)
        self.late = Counter(f"{PREFIX}_late_records_dropped", "Records for closed windows", registry=r)
        self.skipped = Counter(f"{PREFIX}_skipped_records", "Records dropped for a null key", registry=r)
        self.fenced = Counter(f"{PREFIX}_fenced_commits", "Commits refused because the task moved", registry=r)
        self.rebalances = Counter(f"{PREFIX}_rebalances", "Assignment changes seen by this instance", registry=r)
        self.assigned = Gauge(f"{PREFIX}_assigned_partitions", "Tasks this instance runs", registry=r)
        self.members = Gauge(f"{PREFIX}_members", "Live instances of the application", registry=r)
        r.register(_StateCollector(app))

    def named(self, metric: str, n: int) -> None:
        """Count ``n`` of an :meth:`App.count` counter that has a Prometheus metric."""
        attr = _NAMED.get(metric)
        if attr is not None:
            counter: Counter = getattr(self, attr)
            counter.inc(n)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class TaskMetrics:
    """The metric children of one task (labels resolved once)."""

    def __init__(self, metrics: AppMetrics, partition: int) -> None:
        p = str(partition)
        self.records = metrics.records.labels(p)
        self.punctuations = metrics.punctuations
        self._out = metrics.records_out.labels(p)
        self._commits = metrics.commits.labels(p)
        self._commit_latency = metrics.commit_latency.labels(p)
        self.process = metrics.process_latency.labels(p).observe
        self.end_to_end = metrics.end_to_end.observe

    def committed(self, seconds: float, records_out: int) -> None:
        self._commits.inc()
        self._commit_latency.observe(seconds)
        if records_out:
            self._out.inc(records_out)


class _StateCollector(Collector):
    """Gauges read at scrape time: store sizes, input lag, stream-time lag."""

    def __init__(self, app: ObservedApp) -> None:
        self.app = app

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        app = self.app
        backend = app.engine.backend
        sizes = GaugeMetricFamily(f"{PREFIX}_store_entries", "Entries of each store of each task",
                                  labels=["store", "partition"])
        lag = GaugeMetricFamily(f"{PREFIX}_lag_ms", "Newest input transaction time minus the oldest unprocessed one",
                                labels=["stream", "partition"])
        lag_records = GaugeMetricFamily(f"{PREFIX}_lag_records", "Input records not yet committed (at most "
                                        f"{LAG_SCAN} transactions counted)", labels=["stream", "partition"])
        stream_lag = GaugeMetricFamily(f"{PREFIX}_stream_time_lag_ms", "Wall clock minus the task's stream time",
                                       labels=["partition"])
        now = int(time.time() * 1000)
        for task in app.running_tasks():
            p = str(task.partition)
            for name in app.topology.stores:
                n = sum(1 for _ in pages(backend, namespace(app.application_id, task.partition, name), None, None))
                sizes.add_metric([name, p], n)
            for r in task.readers:
                entries = backend.scan_index(r.stream, r.partition, r.committed, max_txns=LAG_SCAN).entries
                behind = (entries[-1][0] - entries[0][0]) // ID_MULTIPLIER if entries else 0
                lag.add_metric([r.stream, p], behind)
                lag_records.add_metric([r.stream, p], sum(n for _, n in entries))
            t = task.stream_time()
            if t is not None:
                stream_lag.add_metric([p], max(0, now - t))
        return [sizes, lag, lag_records, stream_lag]
