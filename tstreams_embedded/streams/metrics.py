"""Prometheus metrics of an application instance (``prometheus-client``, one registry per app).

Counters and histograms are updated as the tasks run; gauges that need reads (store sizes,
lag) are computed when scraped, by :class:`_StateCollector`. Every name starts with
``tstreams_streams_``; every family has an ``app`` label (the application id), and the
families of tasks a ``partition`` label (the task; ``global`` for a global table's store and
for the records without a key its updater drops).

==================================================  =========================================
metric                                              meaning
==================================================  =========================================
``records_processed_total{app,partition}``          input records processed
``records_out_total{app,partition}``                records written by the task's commits
``commits_total{app,partition}``                    commits (one engine write each)
``commit_latency_seconds{app,partition}``           histogram: the commit's engine write
``process_latency_seconds{app,partition}``          histogram: processing one input transaction
``end_to_end_latency_seconds{app,partition}``       histogram: input transaction commit → processed
``punctuations_total{app,partition,kind}``          punctuator calls (``stream_time``/``wall_clock``)
``dropped_records_total{app,partition,reason}``     records dropped, by :data:`DROP_REASONS`
``late_records_dropped_total{app,partition}``       records for closed windows (= reason ``late``)
``skipped_records_total{app,partition}``            records with a null key (= reason ``null_key``)
``dedup_expired_total{app,partition}``              duplicates dedup let through: their key's TTL had
                                                    expired in stream time (out-of-order input)
``fenced_commits_total{app,partition}``             commits refused because the task moved
``rebalances_total{app}``                           assignment changes seen by this instance
``assigned_partitions{app}``                        tasks this instance runs now
``members{app}``                                    live instances of the application
``store_entries{app,store,partition}``              entries of each store (counted up to a cap)
``store_entries_capped{app,store,partition}``       1 when the cap stopped that count
``lag_ms{app,stream,partition}``                    newest input transaction − oldest unprocessed
``lag_records{app,stream,partition}``               input records not yet committed
``stream_time_lag_ms{app,partition}``               wall clock − the task's stream time
``input_expired_unread_total{app,stream,partition}`` input items the stream's TTL deleted
                                                    before the app read them (TTL deletes by
                                                    age, whoever has or has not read)
==================================================  =========================================

**Bounded scrape.** ``store_entries`` counts at most :data:`STORE_SCAN` entries per store and
:data:`STORE_SCAN_BUDGET` in all per scrape (reads of whole pages of the store); a count that
was stopped is a lower bound and its ``store_entries_capped`` is 1. The lag gauges count at
most :data:`LAG_SCAN` input transactions per partition.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .. import errors
from ..ids import ID_MULTIPLIER
from .appview import AppView
from .global_table import global_namespace
from .stores import namespace, pages

PREFIX = "tstreams_streams"
#: lag counts at most this many input transactions per partition per scrape
LAG_SCAN = 10_000
#: ``store_entries`` counts at most this many entries per store, and this many in all per scrape
STORE_SCAN = 10_000
STORE_SCAN_BUDGET = 100_000
#: the :meth:`App.count` counters that count dropped records, and their ``reason`` label
DROP_REASONS = {"late_dropped": "late", "dedup_dropped": "dedup", "skipped_null_key": "null_key",
                "join_no_match": "join_no_match"}
GLOBAL = "global"


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
        self.app_id = app.application_id
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        task = ["app", "partition"]
        self.records = Counter(f"{PREFIX}_records_processed", "Input records processed", task, registry=r)
        self.records_out = Counter(f"{PREFIX}_records_out", "Records written by commits", task, registry=r)
        self.commits = Counter(f"{PREFIX}_commits", "Commits (one engine write each)", task, registry=r)
        self.commit_latency = Histogram(f"{PREFIX}_commit_latency_seconds", "Duration of a commit's engine write",
                                        task, registry=r)
        self.process_latency = Histogram(f"{PREFIX}_process_latency_seconds",
                                         "Processing one input transaction", task, registry=r)
        self.end_to_end = Histogram(f"{PREFIX}_end_to_end_latency_seconds",
                                    "From an input transaction's commit to its processing", task, registry=r)
        self.punctuations = Counter(f"{PREFIX}_punctuations", "Punctuator calls", [*task, "kind"], registry=r)
        self.dropped = Counter(f"{PREFIX}_dropped_records", "Records dropped (reason: late, dedup, null_key, "
                               "join_no_match)", [*task, "reason"], registry=r)
        self.late = Counter(f"{PREFIX}_late_records_dropped", "Records for closed windows (dropped)", task,
                            registry=r)
        self.skipped = Counter(f"{PREFIX}_skipped_records", "Records dropped for a null key", task, registry=r)
        self.dedup_expired = Counter(f"{PREFIX}_dedup_expired", "Duplicates dedup let through: their key's TTL "
                                     "had expired in stream time", task, registry=r)
        self.fenced = Counter(f"{PREFIX}_fenced_commits", "Commits refused because the task moved", task,
                              registry=r)
        self.rebalances = Counter(f"{PREFIX}_rebalances", "Assignment changes seen by this instance", ["app"],
                                  registry=r).labels(self.app_id)
        self.assigned = Gauge(f"{PREFIX}_assigned_partitions", "Tasks this instance runs", ["app"],
                              registry=r).labels(self.app_id)
        self.members = Gauge(f"{PREFIX}_members", "Live instances of the application", ["app"],
                             registry=r).labels(self.app_id)
        r.register(_StateCollector(app))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class TaskMetrics:
    """The metric children of one task (labels resolved once)."""

    def __init__(self, metrics: AppMetrics, partition: int) -> None:
        labels = (metrics.app_id, str(partition))
        self.records = metrics.records.labels(*labels)
        self._punctuations = metrics.punctuations
        self._labels = labels
        self._out = metrics.records_out.labels(*labels)
        self._commits = metrics.commits.labels(*labels)
        self._commit_latency = metrics.commit_latency.labels(*labels)
        self._fenced = metrics.fenced.labels(*labels)
        self.process = metrics.process_latency.labels(*labels).observe
        self.end_to_end = metrics.end_to_end.labels(*labels).observe
        self.count = DropCounter(metrics, str(partition)).count

    def punctuated(self, kind: str) -> None:
        self._punctuations.labels(*self._labels, kind).inc()

    def committed(self, seconds: float, records_out: int) -> None:
        self._commits.inc()
        self._commit_latency.observe(seconds)
        if records_out:
            self._out.inc(records_out)

    def fenced(self) -> None:
        self._fenced.inc()


class DropCounter:
    """The dropped records of one task (or, partition :data:`GLOBAL`, of the global tables'
    updaters) in ``dropped_records_total`` and in the late/skipped families; a reason's
    series appears with its first drop."""

    def __init__(self, metrics: AppMetrics, partition: str) -> None:
        self._metrics = metrics
        self._labels = (metrics.app_id, partition)
        self._children: dict[str, list[Counter]] = {}

    def count(self, metric: str, n: int = 1) -> None:
        """Count ``n`` of an :meth:`App.count` counter (only those of dropped records, and
        ``dedup_expired``, have Prometheus metrics)."""
        children = self._children.get(metric)
        if children is None:
            m, labels = self._metrics, self._labels
            reason = DROP_REASONS.get(metric)
            if metric == "dedup_expired":
                children = [m.dedup_expired.labels(*labels)]
            elif reason is None:
                return
            else:
                children = [m.dropped.labels(*labels, reason)]
                if reason == "late":
                    children.append(m.late.labels(*labels))
                elif reason == "null_key":
                    children.append(m.skipped.labels(*labels))
            self._children[metric] = children
        for child in children:
            child.inc(n)


def _expired_unread(app: ObservedApp) -> CounterMetricFamily:
    """Per input stream and partition, the items that TTL compaction deleted before the app
    (the consumer named after its application id) read them (see ``engine/storage/expiry.py``)."""
    a = app.application_id
    family = CounterMetricFamily(f"{PREFIX}_input_expired_unread", "Input items the stream's TTL deleted before "
                                 "the app read them", labels=["app", "stream", "partition"])
    backend = app.engine.backend
    for stream in sorted(set(app.topology.stream_names(a)[0])):
        try:
            consumers = backend.list_consumers(stream)
        except errors.StreamNotFound:
            continue
        for c in consumers:
            if c.name == a:
                for partition, n in sorted(c.expired_unread.items()):
                    family.add_metric([a, stream, str(partition)], n)
    return family


class _StateCollector(Collector):
    """Gauges read at scrape time: store sizes, input lag, stream-time lag."""

    def __init__(self, app: ObservedApp) -> None:
        self.app = app

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        app = self.app
        a = app.application_id
        backend = app.engine.backend
        sizes = GaugeMetricFamily(f"{PREFIX}_store_entries", f"Entries of each store, counted up to {STORE_SCAN} per "
                                  f"store and {STORE_SCAN_BUDGET} per scrape: a lower bound where "
                                  f"{PREFIX}_store_entries_capped is 1", labels=["app", "store", "partition"])
        capped = GaugeMetricFamily(f"{PREFIX}_store_entries_capped", "1 when the count of store_entries stopped at "
                                   "its cap (the store holds more)", labels=["app", "store", "partition"])
        lag = GaugeMetricFamily(f"{PREFIX}_lag_ms", "Newest input transaction time minus the oldest unprocessed one",
                                labels=["app", "stream", "partition"])
        lag_records = GaugeMetricFamily(f"{PREFIX}_lag_records", "Input records not yet committed (at most "
                                        f"{LAG_SCAN} transactions counted)", labels=["app", "stream", "partition"])
        stream_lag = GaugeMetricFamily(f"{PREFIX}_stream_time_lag_ms", "Wall clock minus the task's stream time",
                                       labels=["app", "partition"])
        now = int(time.time() * 1000)
        budget = STORE_SCAN_BUDGET
        global_stores = {spec.store for spec in app.topology.global_tables.values()}
        counted = [(name, GLOBAL, global_namespace(a, name)) for name in sorted(global_stores)]
        tasks = app.running_tasks()
        for task in tasks:
            p = str(task.partition)
            counted.extend((name, p, namespace(a, task.partition, name))
                           for name in app.topology.stores if name not in global_stores)
        for name, p, ns in counted:
            cap = min(STORE_SCAN, budget)
            n = sum(1 for _ in islice(pages(backend, ns, None, None), cap + 1)) if cap else 1
            budget -= min(n, cap)
            sizes.add_metric([a, name, p], min(n, cap))
            capped.add_metric([a, name, p], int(n > cap))
        for task in tasks:
            p = str(task.partition)
            for r in task.readers:
                entries = backend.scan_index(r.stream, r.partition, r.committed, max_txns=LAG_SCAN).entries
                behind = (entries[-1][0] - entries[0][0]) // ID_MULTIPLIER if entries else 0
                lag.add_metric([a, r.stream, p], behind)
                lag_records.add_metric([a, r.stream, p], sum(n for _, n in entries))
            t = task.stream_time()
            if t is not None:
                stream_lag.add_metric([a, p], max(0, now - t))
        return [sizes, capped, lag, lag_records, stream_lag, _expired_unread(app)]
