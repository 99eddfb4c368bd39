"""App: runs a topology on an engine (embedded or remote), exactly-once by default."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .. import errors
from ..engine.backend import StreamInfo
from ..engine.engine import Engine
from ..engine.validate import check_name
from .global_table import GlobalTables, global_namespace
from .joins import check_partition_counts
from .stores import ReadOnlyKeyValueStore, ReadOnlyWindowStore, namespace
from .task import Task
from .topology import Topology, internal_name

PROCESSING = ("exactly_once", "at_least_once")


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class App:
    """A stream-processing application: ``App(engine, application_id=..., topology=b.build())``.

    * One task per partition number of the input streams (sources with the same partition
      count are co-partitioned: task ``p`` reads partition ``p`` of each), run by
      ``num_threads`` threads.
    * ``processing="exactly_once"`` (default): each commit is one durable engine write of
      the task's output, store changes and input offsets. ``"at_least_once"``: the same
      single write, but not waited for on disk (an OS crash may lose the last commits,
      whose input is then processed again).
    * A task commits every ``commit_interval_ms``, every ``commit_records`` records or when
      ``commit_bytes`` of output are buffered, whichever comes first (at transaction
      boundaries), and whenever it runs out of input. Memory per task is bounded by that and
      by its stores' caches (at most 200,000 entries each, dropped after a commit).
    * A running app (``start()``) without input waits for the next commit: at once when it is
      made in this process or by a served engine's server, within ``poll_interval_ms`` when
      another process writes the same directory.
    * The application's offsets are stored under the consumer name ``application_id``;
      its stores under ``application_id/partition/store``; internal streams are named
      ``application_id-…``. Output streams that do not exist are created with the task
      count of partitions.
    """

    def __init__(self, engine: Engine, *, application_id: str, topology: Topology, num_threads: int = 1,
                 processing: str = "exactly_once", commit_interval_ms: int = 100, commit_records: int = 10_000,
                 commit_bytes: int = 8 << 20, poll_interval_ms: int = 10,
                 clock: Callable[[], int] | None = None) -> None:
        if not isinstance(engine, Engine):
            raise errors.InvalidArgument(f"engine must be a tstreams_embedded Engine, got {type(engine).__name__}")
        check_name(application_id, "application_id")
        if "/" in application_id:
            raise errors.InvalidArgument(f"application_id must not contain '/', got {application_id!r}")
        if not isinstance(topology, Topology):
            raise errors.InvalidArgument("topology must be the result of StreamsBuilder().build()")
        if processing not in PROCESSING:
            raise errors.InvalidArgument(f"processing must be one of {PROCESSING}, got {processing!r}")
        for value, what in ((num_threads, "num_threads"), (commit_interval_ms, "commit_interval_ms"),
                            (commit_records, "commit_records"), (commit_bytes, "commit_bytes"),
                            (poll_interval_ms, "poll_interval_ms")):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise errors.InvalidArgument(f"{what} must be a positive integer, got {value!r}")
        self.engine = engine
        self.application_id = application_id
        self.topology = topology
        self.num_threads = num_threads
        self.processing = processing
        self.durable = processing == "exactly_once"
        self.commit_interval = commit_interval_ms / 1000.0
        self.commit_records = commit_records
        self.commit_bytes = commit_bytes
        self.poll_interval = poll_interval_ms / 1000.0
        self.clock = clock if clock is not None else _wall_ms
        self.metrics: dict[str, int] = {}
        self._metrics_lock = threading.Lock()
        self.stream_info: dict[str, StreamInfo] = {}
        self.fused: set[str] = set()
        self.tasks: list[Task] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._prepared = False

    # -- set-up ----------------------------------------------------------------------------
    def resolve(self, stream: str) -> str:
        return internal_name(self.application_id, stream)

    def partitions_of(self, stream: str) -> int:
        return self.stream_info[stream].partitions

    def count(self, metric: str, n: int = 1) -> None:
        with self._metrics_lock:
            self.metrics[metric] = self.metrics.get(metric, 0) + n

    def _prepare(self) -> None:
        if self._prepared:
            return
        engine = self.engine
        topo = self.topology
        sinks = {self.resolve(s) for s in topo.sinks}
        internal = {self.resolve(s): n for s, n in topo.internal.items()}
        external = [self.resolve(s) for s in topo.sources if self.resolve(s) not in internal]
        counts = []
        for s in external:
            if engine.has_stream(s):
                self.stream_info[s] = engine.get_stream(s)
                counts.append(self.stream_info[s].partitions)
            elif s not in sinks:
                raise errors.StreamNotFound(f"input stream {s!r} of application {self.application_id!r} does not "
                                            "exist; create it first (engine.create_stream)")
        tasks = max(counts) if counts else 1
        for s in sorted(sinks | set(internal) | set(external)):
            if s not in self.stream_info:
                wanted = internal.get(s) or tasks
                if not engine.has_stream(s):
                    try:
                        engine.create_stream(s, partitions=wanted, description=f"streams app {self.application_id}")
                    except errors.StreamExists:
                        pass
                self.stream_info[s] = engine.get_stream(s)
        check_partition_counts(topo.copartition, self.resolve, self.stream_info)
        self.global_tables = GlobalTables(engine.backend, self.application_id, topo.global_tables, self.poll_interval)
        self.global_tables.catch_up()  # bootstrap: processing starts with the global tables complete
        if tasks == 1:
            self.fused = {s for s in internal if self.stream_info[s].partitions == 1}
        self.tasks = [Task(self, p) for p in range(tasks)]
        self._prepared = True

    # -- running ---------------------------------------------------------------------------
    def run(self, until_idle: bool = True) -> dict[str, int]:
        """Process until there is no more input (every task idle and committed), then
        return the metrics. ``until_idle=False`` runs until :meth:`stop` (from another thread)."""
        self._prepare()
        if not until_idle:
            self.start()
            for t in self._threads:
                t.join()
            self._raise()
            return dict(self.metrics)
        while True:
            self.global_tables.catch_up()
            if self.num_threads == 1 or len(self.tasks) == 1:
                processed = self._drain(self.tasks)
            else:
                counts = [0] * self.num_threads
                groups = [self.tasks[i::self.num_threads] for i in range(self.num_threads)]
                threads = [threading.Thread(target=self._drain_into, args=(groups[i], counts, i), daemon=True)
                           for i in range(self.num_threads)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                self._raise()
                processed = sum(counts)
            if processed == 0:
                return dict(self.metrics)

    def _drain_into(self, tasks: list[Task], counts: list[int], i: int) -> None:
        try:
            counts[i] = self._drain(tasks)
        except BaseException as exc:  # noqa: BLE001 - re-raised by run()
            self._error = exc

    def _drain(self, tasks: list[Task]) -> int:
        """Run ``tasks`` until none has input; commit them; records processed."""
        total = 0
        busy = True
        while busy:
            busy = False
            for task in tasks:
                n = task.step()
                task.punctuate_wall_clock()
                if n:
                    busy = True
                    total += n
                    self.count("records", n)
                    self._maybe_commit(task)
                elif task.dirty():
                    task.commit(self.durable)
        for task in tasks:
            if task.dirty():
                task.commit(self.durable)
        return total

    def _maybe_commit(self, task: Task) -> None:
        if task.records_since_commit >= self.commit_records or task.output_bytes >= self.commit_bytes or \
                time.monotonic() - task.last_commit >= self.commit_interval:
            task.commit(self.durable)

    def start(self) -> App:
        """Run in ``num_threads`` background threads until :meth:`stop`."""
        self._prepare()
        if self._threads:
            raise errors.InvalidArgument("the app is already running")
        self._stop.clear()
        self.global_tables.start()
        n = min(self.num_threads, len(self.tasks))
        for i in range(n):
            t = threading.Thread(target=self._loop, args=(self.tasks[i::n],), name=f"streams-{self.application_id}-{i}",
                                 daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def _loop(self, tasks: list[Task]) -> None:
        backend = self.engine.backend
        try:
            seen = 0
            while not self._stop.is_set():
                processed = 0
                for task in tasks:
                    n = task.step()
                    task.punctuate_wall_clock()
                    if n:
                        processed += n
                        self.count("records", n)
                        self._maybe_commit(task)
                    elif task.dirty():
                        task.commit(self.durable)
                if not processed:
                    seen = backend.wait_for_commit(seen, self.poll_interval)
            for task in tasks:
                if task.dirty():
                    task.commit(self.durable)
        except BaseException as exc:  # noqa: BLE001 - reported by stop() / run()
            self._error = exc
            self._stop.set()

    def stop(self) -> dict[str, int]:
        """Stop the threads after their current transaction, commit, and return the metrics."""
        self._stop.set()
        for t in self._threads:
            t.join()
        self._threads = []
        self.global_tables.stop()
        self._raise()
        return dict(self.metrics)

    def _raise(self) -> None:
        if self._error is not None:
            exc, self._error = self._error, None
            raise exc

    def close(self) -> None:
        """Stop (if running) and close the processors."""
        if self._threads:
            self.stop()
        for task in self.tasks:
            task.close()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries ---------------------------------------------------------------------------
    def store(self, name: str) -> ReadOnlyKeyValueStore | ReadOnlyWindowStore:
        """Committed state of store ``name`` across every task (key-value: ``get``, ``range``,
        ``all``; windowed: ``fetch``, ``fetch_all``, ``get``, ``all``)."""
        spec = self.topology.stores.get(name)
        if spec is None:
            raise errors.StoreNotFound(f"no store {name!r} in application {self.application_id!r}; "
                                       f"stores: {sorted(self.topology.stores)}")
        self._prepare()
        namespaces = [namespace(self.application_id, p, name) for p in range(len(self.tasks))]
        if any(g.store == name for g in self.topology.global_tables.values()):
            namespaces = [global_namespace(self.application_id, name)]
        backend = self.engine.backend
        if spec.windowed:
            return ReadOnlyWindowStore(backend, namespaces, spec.key_serde, spec.value_serde)
        return ReadOnlyKeyValueStore(backend, namespaces, spec.key_serde, spec.value_serde)

    def task_count(self) -> int:
        self._prepare()
        return len(self.tasks)

