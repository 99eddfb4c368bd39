"""App: runs a topology on an engine (embedded or remote), exactly-once by default."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import errors
from ..engine.api.engine import Engine
from ..engine.protocol.backend import StreamInfo
from ..engine.storage.core import Core
from .app_config import DEFAULT_TURN_RECORDS, AppConfig, Processing
from .app_members import Membership
from .global_table import GlobalTableMetrics, GlobalTables, global_namespace
from .joins import check_partition_counts
from .key_owners import KeyQueryMetadata, query_metadata_for_key
from .key_owners import advertised_host as advertised_host_of
from .mapped_pages import MappedPages
from .metrics import GLOBAL, AppMetrics, DropCounter
from .record_errors import RecordErrorPolicy, RecordErrors, dead_letter_stream_of
from .stores import DEFAULT_CACHE_BYTES, ReadOnlyKeyValueStore, ReadOnlyWindowStore, namespace
from .task import Task
from .topology import StoreSpec, Topology, internal_name
from .turns import default_slack_ms

if TYPE_CHECKING:
    from .queries import QueryServer


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
      boundaries), whenever it runs out of input, and at the end of its turn if it wrote to a
      stream the application reads back (below). The interval is measured on ``clock``
      (the app's wall clock, which a test may inject). Memory per task is bounded by that and
      by its stores' caches: ``store_cache_bytes`` (default 32 MiB) per store of each task,
      what the cached entries take in memory (:mod:`.store_cache`; a task whose changes fill
      a cache commits).
    * **Order across tasks, and backlogs** (:mod:`.turns`). A worker thread runs its tasks in
      *turns*, merging them by event time: the task whose next record has the smallest
      timestamp goes next, and keeps its turn while its next transaction's first record is
      at most ``turn_slack_ms`` later than the next record of every other task of the
      thread, up to ``turn_records`` records (whole transactions: a transaction is never
      split). A task that wrote to a stream the application reads back (a repartition or
      ``through`` stream) commits at the end of its turn, so the tasks downstream read the
      records in the order of their timestamps, give or take ``turn_slack_ms``, however far
      behind the app is: catching up on a backlog (a restart after a crash, an app started
      on old input) gives the results of running live. ``turn_slack_ms`` defaults to half
      the smallest grace (windows, stream–stream joins) or TTL (dedup) of the topology
      (none: no time bound); 0 merges exactly, at the cost of a commit each time the tasks'
      timelines cross. Not kept in order: records within one input transaction, a turn cut
      at ``turn_records``, and records of different threads (``num_threads``) or
      instances, which are not synchronized with each other.
    * A running app (``start()``) without input waits for the next commit: at once when it is
      made in this process, by a served engine's server, or by another process writing the
      same directory (inotify, :mod:`tstreams_embedded.engine.storage.commit_waker`; without it,
      within ``poll_interval_ms``, which is also the wall-clock punctuators' granularity).
    * The application's offsets are stored under the consumer name ``application_id``;
      its stores under ``application_id/partition/store``; internal streams are named
      ``application_id-…``. Output and internal streams that do not exist are created with
      the task count of partitions (an internal stream: its ``repartition(partitions=)``)
      and the engine's default TTL, one day; create them beforehand to choose otherwise.
    * Scale-out (:mod:`.app_members`): instances of one ``application_id`` split the tasks
      through leases in the engine (``lease_ms``); every commit is fenced by the task's
      lease. ``static_id`` (like ``group.instance.id``): a restart with the same static id
      takes its predecessor's tasks at once instead of waiting for its leases to expire.
    * ``max_task_idle_ms`` (Kafka's ``max.task.idle.ms``, default 0: never wait): how long a
      task whose sources have data in some and none in others waits for the empty ones before
      processing past them (see :mod:`.task`: records are taken in timestamp order across
      sources). A waiting task counts as idle for ``run(until_idle=True)``.
    * Global tables (:mod:`.global_table`): one instance of the application updates them,
      the holder of the global-table lease (fenced like a task); every instance waits at
      start (and before each ``run()`` round) until they caught up. If the updater fails,
      the app stops: ``run()`` raises, ``stop()`` re-raises.
    * ``on_record_error`` (:mod:`.record_errors`): ``"fail"`` (default) raises
      :class:`~tstreams_embedded.errors.StoreKeyTooLong` for a record whose key cannot be
      stored (over 255 bytes), and the ``SerdeError`` or ``InvalidArgument`` of bad input
      data (a damaged envelope, an undecodable key or value, an invalid timestamp);
      ``"skip"`` drops such a record and counts it; ``"dead_letter"`` also writes it, with
      its source and the error, to ``dead_letter_stream`` (default
      ``<application_id>-dead-letters``, created with the app's other outputs) in the same
      commit.
    * ``max_future_ms`` (default None: off): a record stamped more than that ahead of the
      app's ``clock`` (read once per input transaction) is bad data too
      (:class:`~tstreams_embedded.errors.TimestampTooFarAhead`, to ``on_record_error``)
      instead of moving stream time there. Without it, ONE record stamped in the year 9999
      makes every later normal record late and, through retention, deletes every window.
    * ``idle_advance_ms`` (default None: off): a window closes only when a later record
      reaches its aggregation, so the last window of a quiet input never would. With it, once
      no source of a task has had input for that long on ``clock``, the task's stream time
      moves on by the wall-clock time since the input stopped (:meth:`.task.Task.advance_idle`):
      closed windows are emitted, suppressed results released, exactly once. Records that
      come afterwards stamped before the advanced time minus the grace are late.
    * ``http_port`` (0: any free port) serves interactive queries and ``/metrics``
      (:mod:`.queries`, :mod:`.metrics`) while the app runs (``start()``), bound to
      ``http_host``. Key discovery tells other instances ``advertised_host`` (like Kafka
      Streams' ``application.server``): by default ``http_host``, or this machine's fully
      qualified name when ``http_host`` is a wildcard such as ``0.0.0.0``.
    """

    def __init__(self, engine: Engine, *, application_id: str, topology: Topology, num_threads: int = 1,
                 processing: Processing | str = Processing.EXACTLY_ONCE, commit_interval_ms: int = 100,
                 commit_records: int = 10_000, commit_bytes: int = 8 << 20, poll_interval_ms: int = 10,
                 clock: Callable[[], int] | None = None, lease_ms: int = 5_000, instance_name: str = "instance",
                 static_id: str | None = None, on_record_error: RecordErrorPolicy | str = RecordErrorPolicy.FAIL,
                 http_host: str = "127.0.0.1", http_port: int | None = None,
                 advertised_host: str | None = None, max_task_idle_ms: int = 0,
                 store_cache_bytes: int = DEFAULT_CACHE_BYTES, turn_records: int = DEFAULT_TURN_RECORDS,
                 turn_slack_ms: int | None = None, max_future_ms: int | None = None,
                 dead_letter_stream: str | None = None, idle_advance_ms: int | None = None) -> None:
        if not isinstance(engine, Engine):
            raise errors.InvalidArgument(f"engine must be a tstreams_embedded Engine, got {type(engine).__name__}")
        if not isinstance(topology, Topology):
            raise errors.InvalidArgument("topology must be the result of StreamsBuilder().build()")
        #: the options, checked (:class:`~.app_config.AppConfig`)
        self.config = config = AppConfig(
            application_id=application_id, num_threads=num_threads, processing=processing,  # type: ignore[arg-type]
            commit_interval_ms=commit_interval_ms, commit_records=commit_records, commit_bytes=commit_bytes,
            poll_interval_ms=poll_interval_ms, clock=clock, lease_ms=lease_ms, instance_name=instance_name,
            static_id=static_id, on_record_error=on_record_error,  # type: ignore[arg-type]
            http_host=http_host, http_port=http_port, advertised_host=advertised_host,
            max_task_idle_ms=max_task_idle_ms, store_cache_bytes=store_cache_bytes, turn_records=turn_records,
            turn_slack_ms=turn_slack_ms, max_future_ms=max_future_ms, dead_letter_stream=dead_letter_stream,
            idle_advance_ms=idle_advance_ms)
        processing, on_record_error = config.processing, config.on_record_error
        self.engine = engine
        self.application_id = application_id
        self.topology = topology
        self.num_threads = num_threads
        self.processing = processing
        self.durable = config.durable
        self.commit_interval_ms = commit_interval_ms
        self.commit_records = commit_records
        self.commit_bytes = commit_bytes
        self.poll_interval = poll_interval_ms / 1000.0
        self.clock = clock if clock is not None else _wall_ms
        self.max_task_idle_ms = max_task_idle_ms
        self.max_future_ms = max_future_ms
        self.idle_advance_ms = idle_advance_ms
        self.dead_letter_stream = None if on_record_error != "dead_letter" else (
            dead_letter_stream or dead_letter_stream_of(application_id))
        self.store_cache_bytes = store_cache_bytes
        #: the input read, to give back the pages of an embedded engine's map (:mod:`.mapped_pages`)
        self.mapped_pages = MappedPages(engine.backend.path if isinstance(engine.backend, Core) else None)
        self.turn_records = turn_records
        self.turn_slack_ms = turn_slack_ms if turn_slack_ms is not None else default_slack_ms(
            topology.instantiate(application_id).values())
        self.metrics: dict[str, int] = {}
        self._metrics_lock = threading.Lock()
        self.stream_info: dict[str, StreamInfo] = {}
        self.fused: set[str] = set()
        self.lease_ms = lease_ms
        self.instance_name = instance_name
        self.static_id = static_id
        self.http_host = http_host
        self.advertised_host = advertised_host_of(http_host, advertised_host)
        self.http_port = http_port
        self.partition_count = 0
        self.membership: Membership
        self.prometheus = AppMetrics(self)
        self._global_drops = DropCounter(self.prometheus, GLOBAL)
        self.record_errors = RecordErrors(on_record_error, self.prometheus.registry, self.count, application_id)
        self.global_metrics = GlobalTableMetrics(self.prometheus.registry, application_id)
        self._slots: list[dict[int, Task]] = []
        self._tick_lock = threading.Lock()
        self._next_tick = 0.0
        self._tick_interval = min(lease_ms / 4000.0, 0.25)
        self._http: QueryServer | None = None
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

    def _count_global(self, metric: str, n: int) -> None:
        """Count what the global tables' updaters drop (Prometheus: partition ``global``)."""
        self.count(metric, n)
        self._global_drops.count(metric, n)

    def _prepare(self) -> None:
        if self._prepared:
            return
        engine = self.engine
        topo = self.topology
        sinks = {self.resolve(s) for s in topo.sinks}
        if self.dead_letter_stream is not None:
            sinks.add(self.dead_letter_stream)
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
        self.global_tables = GlobalTables(
            engine.backend, self.application_id, topo.global_tables, poll_interval=self.poll_interval,
            lease_ms=self.lease_ms, name=self.instance_name, record_errors=self.record_errors,
            on_error=self._global_tables_failed,
            metrics=self.global_metrics, count=self._count_global)
        if tasks == 1:
            self.fused = {s for s in internal if self.stream_info[s].partitions == 1}
        self.partition_count = tasks
        self.membership = Membership(engine.backend, self.application_id, tasks, lease_ms=self.lease_ms,
                                     host=self.advertised_host if self.http_port is not None else None,
                                     port=self.http_port, name=self.instance_name, static_id=self.static_id)
        self._slots = [{} for _ in range(max(1, min(self.num_threads, tasks)))]
        self._prepared = True

    # -- tasks and their leases ------------------------------------------------------------
    def running_tasks(self) -> list[Task]:
        """The tasks this instance runs now (a copy)."""
        return [t for slot in list(self._slots) for t in list(slot.values())]

    def _maybe_tick(self, force: bool = False) -> None:
        """Renew leases and follow the assignment when due (any worker may call it)."""
        now = time.monotonic()
        if not force and now < self._next_tick:
            return
        if not self._tick_lock.acquire(blocking=force):
            return
        try:
            before = self.membership.rebalances
            view = self.membership.tick()
            self._next_tick = time.monotonic() + self._tick_interval
            self.prometheus.members.set(len(view.members))
            if self.membership.rebalances != before:
                self.prometheus.rebalances.inc(self.membership.rebalances - before)
        finally:
            self._tick_lock.release()

    def _reconcile(self, slot: int) -> None:
        """Make slot ``slot``'s tasks match the leases held: drop lost tasks, hand over
        revoked ones (commit, close, release), create newly taken ones."""
        tasks = self._slots[slot]
        n = len(self._slots)
        held = self.membership.held()
        revoked = self.membership.revoked()
        for p, task in list(tasks.items()):
            if held.get(p) != task.epoch:
                self._drop(slot, task)
            elif p in revoked:
                if self._commit(task):
                    del tasks[p]
                    task.close()
                    self.membership.release(p)
        for p, epoch in sorted(held.items()):
            if p % n == slot and p not in tasks and p not in revoked:
                task = Task(self, p)
                task.epoch = epoch
                task.fence = self.membership.fence(p, epoch)
                tasks[p] = task
        self.prometheus.assigned.set(len(held))

    def _drop(self, slot: int, task: Task) -> None:
        """Forget a task whose lease is gone, without committing (its uncommitted work is lost
        with it; the new holder starts from the last commit)."""
        self._slots[slot].pop(task.partition, None)
        task.close()

    def _commit(self, task: Task, durable: bool | None = None) -> bool:
        """Commit ``task`` (``durable``: wait for the disk; by default as ``processing``
        says); False (and the task dropped) if its lease was taken over."""
        try:
            task.commit(self.durable if durable is None else durable)
            return True
        except errors.LeaseConflict:
            task.metrics.fenced()
            self.membership.lost(task.partition, task.epoch)
            for i, slot in enumerate(self._slots):
                if slot.get(task.partition) is task:
                    self._drop(i, task)
            return False

    # -- running ---------------------------------------------------------------------------
    def run(self, until_idle: bool = True) -> dict[str, int]:
        """Process until there is no more input, then return the metrics. *No more input*
        means every task **of the application** is out of input and committed, not only this
        instance's: a task with input that another member holds is waited for (it processes
        it, or its lease runs out and this instance takes the task over), so the wait is
        bounded by ``lease_ms``. ``until_idle=False`` runs until :meth:`stop`
        (from another thread). The instance stays a member of its group (its leases run out
        after ``lease_ms``) until :meth:`stop` or :meth:`close`."""
        self._prepare()
        if not until_idle:
            self.start()
            for t in list(self._threads):
                t.join()
            if self._error is not None:  # a worker or the global-table updater failed
                self.stop()
            self._raise()
            return dict(self.metrics)
        try:
            return self._run_until_idle()
        except BaseException:
            self._abandon()
            raise

    def _run_until_idle(self) -> dict[str, int]:
        self._maybe_tick(force=True)
        seen = 0
        while True:
            self.global_tables.bootstrap()  # processing starts with the global tables caught up
            if len(self._slots) == 1:
                processed = self._work(0, until_idle=True)
            else:
                counts = [0] * len(self._slots)
                threads = [threading.Thread(target=self._work_into, args=(i, counts), daemon=True)
                           for i in range(len(self._slots))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                self._raise()
                processed = sum(counts)
            if processed == 0:
                if not self._input_elsewhere():
                    self.global_tables.release()  # no updater runs between rounds: let another instance update
                    return dict(self.metrics)
                # another member holds a task with input: it processes it, or its lease runs
                # out and a tick gives the task to us
                seen = self.engine.backend.wait_for_commit(seen, self._tick_interval)
                self._maybe_tick()

    def _input_elsewhere(self) -> bool:
        """Whether a task this instance does not hold has input after its committed offsets."""
        held = self.membership.held()
        others = [p for p in range(self.partition_count) if p not in held]
        if not others:
            return False
        backend = self.engine.backend
        for stream in self.topology.sources:
            resolved = self.resolve(stream)
            if resolved in self.fused:
                continue
            offsets = backend.get_offsets(resolved, self.application_id)
            for p in others:
                if p < self.stream_info[resolved].partitions and \
                        backend.scan_index(resolved, p, offsets.get(p, 0), max_txns=1).entries:
                    return True
        return False

    def _work_into(self, slot: int, counts: list[int]) -> None:
        try:
            counts[slot] = self._work(slot, until_idle=True)
        except BaseException as exc:  # noqa: BLE001 - re-raised by run()
            self._error = exc

    def _work(self, slot: int, until_idle: bool) -> int:
        """The loop of one worker: run slot ``slot``'s tasks; with ``until_idle``, return (the
        records processed, an empty transaction counting 1) once none has input, else run
        until :meth:`stop`."""
        backend = self.engine.backend
        total = 0
        seen = 0
        generation = -1
        tasks = self._slots[slot]
        while not self._stop.is_set():
            self._maybe_tick()
            if self.membership.generation != generation:
                generation = self.membership.generation
                self._reconcile(slot)
            processed = 0
            ready: list[tuple[int, int, Task]] = []
            quiet: list[Task] = []
            seq = backend.wait_for_commit(-1, 0)  # the commit sequence now: no fetch of what did not change
            for task in list(tasks.values()):
                task.punctuate_wall_clock()
                head = task.next_time(seq)
                if head is not None:
                    ready.append((head, task.partition, task))
                else:
                    quiet.append(task)
            ready.sort(key=lambda e: (e[0], e[1]))
            slack = self.turn_slack_ms
            advanced = self._advance_idle(quiet, ready[0][0] if ready else None)
            for i, (_, _, task) in enumerate(ready):  # the task furthest behind in event time goes next
                others = None if len(ready) == 1 else ready[1][0] if i == 0 else ready[0][0]
                processed = self._turn(tasks, task, others + slack if others is not None and slack is not None
                                       else None)
                if processed:
                    break
                if task.dirty():  # waiting for an empty source (max_task_idle_ms)
                    self._commit(task)
            total += processed + advanced
            if not processed and not advanced:
                if until_idle:
                    if self.membership.generation != generation:
                        continue
                    if not self.membership.pending:
                        break
                    # tasks assigned here are still leased by an instance that is handing them
                    # over, or that died: they come within the lease time
                    seen = backend.wait_for_commit(seen, self._tick_interval)
                    continue
                seen = backend.wait_for_commit(seen, self.poll_interval)
        for task in list(tasks.values()):
            if task.dirty():
                self._commit(task)
        return total

    def _advance_idle(self, quiet: list[Task], oldest: int | None) -> int:
        """Commit the tasks without input that have something to commit, after letting their
        stream time move on by the wall clock (``idle_advance_ms``; never past ``oldest``, the
        next record of the worker's busy tasks, plus ``turn_slack_ms``: a task catching up on
        a backlog keeps the others behind, see :mod:`.turns`). How many produced output (so
        that ``run(until_idle=True)`` goes on to the tasks that read it)."""
        limit = None if oldest is None else oldest + (self.turn_slack_ms or 0)
        produced = 0
        for task in quiet:
            if self.idle_advance_ms is not None and task.advance_idle(limit):
                produced += 1
            if task.dirty():
                self._commit(task)
        return produced

    def _turn(self, tasks: dict[int, Task], task: Task, until: int | None) -> int:
        """Let ``task`` process its transactions while their first records' timestamps are
        at most ``until`` (the oldest next record of the slot's other tasks plus
        ``turn_slack_ms``; None: no bound), up to ``turn_records`` records; the records processed (an empty transaction
        counting 1). At the end of its turn a task that wrote to streams the application
        reads back (repartition and ``through`` streams) commits, so that their readers get
        the records in the order of their timestamps (see the class docstring)."""
        done = 0
        while done < self.turn_records and not self._stop.is_set():
            if done:
                head = task.next_time()
                if head is None or (until is not None and head > until):
                    break
            n = task.step()
            if n is None:
                break
            done += max(n, 1)
            if n:
                self.count("records", n)
                task.metrics.records.inc(n)
            if not self._maybe_commit(task) or tasks.get(task.partition) is not task:
                return done  # its lease was taken over: the task is gone
        if done and task.feeds_back():
            # nothing of it leaves the application: it need not wait for the disk (a crash may
            # lose it only with every commit after it, so the app redoes the same work)
            self._commit(task, durable=self.durable and not task.feeds_back_only())
        return done

    def _maybe_commit(self, task: Task) -> bool:
        """Commit ``task`` if a commit bound is reached; False if its lease was taken over."""
        if task.records_since_commit >= self.commit_records or task.output_bytes >= self.commit_bytes or \
                self.clock() - task.last_commit >= self.commit_interval_ms or task.caches_full():
            return self._commit(task)
        return True

    def start(self) -> App:
        """Run in ``num_threads`` background threads until :meth:`stop`: join the group, take
        this instance's share of the tasks and follow rebalances."""
        self._prepare()
        if self._threads:
            raise errors.InvalidArgument("the app is already running")
        self._stop.clear()
        self.global_tables.bootstrap()  # processing starts with the global tables caught up
        self.global_tables.start()
        if self.http_port is not None and self._http is None:
            from .queries import QueryServer  # (Tornado: imported only by apps that serve queries)

            self._http = QueryServer(self, self.http_host, self.http_port)
            self.membership.advertise(self.advertised_host, self._http.port)
        self._maybe_tick(force=True)
        for i in range(len(self._slots)):
            t = threading.Thread(target=self._loop, args=(i,), name=f"streams-{self.application_id}-{i}", daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def _loop(self, slot: int) -> None:
        try:
            self._work(slot, until_idle=False)
        except BaseException as exc:  # noqa: BLE001 - reported by stop() / run()
            self._error = exc
            self._stop.set()

    def _global_tables_failed(self, exc: BaseException) -> None:
        """The global-table updater failed: stop the workers (the tables would stay frozen);
        ``run()`` / ``stop()`` raise ``exc``."""
        self.count("global_table_failures")
        if self._error is None:
            self._error = exc
        self._stop.set()

    def stop(self) -> dict[str, int]:
        """Stop the threads after their current transaction, commit, leave the group (the
        tasks move to the other instances at once), and return the metrics."""
        self._stop.set()
        for t in self._threads:
            t.join()
        self._threads = []
        if self._prepared:
            self.global_tables.stop()  # also frees the global-table lease: another instance updates at once
        if self._error is not None:
            self._abandon()
        else:
            self._leave()
        self._raise()
        return dict(self.metrics)

    def _abandon(self) -> None:
        """After a failure: drop every task WITHOUT committing (a task may be in the middle
        of a transaction) and free the leases, so that the next instance (a restart, or
        another member) continues at once from the last commit."""
        if not self._prepared:
            return
        self.global_tables.release()
        for slot in self._slots:
            for task in list(slot.values()):
                task.close()
            slot.clear()
        if not self.engine.closed:
            self.membership.leave()
        self.prometheus.assigned.set(0)

    def _leave(self) -> None:
        if not self._prepared:
            return
        self.global_tables.release()
        for slot in self._slots:
            for task in list(slot.values()):
                if not task.dirty() or self._commit(task):
                    task.close()
            slot.clear()
        if not self.engine.closed:
            self.membership.leave()
        self.prometheus.assigned.set(0)

    def _raise(self) -> None:
        if self._error is not None:
            exc, self._error = self._error, None
            raise exc

    def close(self) -> None:
        """Stop (if running), commit, leave the group, close the processors and the HTTP
        endpoint."""
        if self._threads:
            self.stop()
        else:
            self._leave()
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries ---------------------------------------------------------------------------
    def store_spec(self, name: str) -> StoreSpec:
        spec = self.topology.stores.get(name)
        if spec is None:
            raise errors.StoreNotFound(f"no store {name!r} in application {self.application_id!r}; "
                                       f"stores: {sorted(self.topology.stores)}")
        return spec

    def store(self, name: str, partitions: list[int] | None = None) -> ReadOnlyKeyValueStore | ReadOnlyWindowStore:
        """Committed state of store ``name`` (key-value: ``get``, ``range``, ``prefix``,
        ``all``; windowed: ``fetch``, ``fetch_all``, ``get``, ``all``) of every task, or of
        the tasks ``partitions``. The state lives in the engine, so any instance (or any
        process with the engine) can read every task's; each query reads one snapshot of the
        engine, across every task it covers (see :mod:`.queries` for the staleness)."""
        spec = self.store_spec(name)
        self._prepare()
        if partitions is not None and (not isinstance(partitions, (list, tuple, range)) or any(
                isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < self.partition_count
                for p in partitions)):
            raise errors.InvalidArgument(f"partitions must be a list of task numbers 0..{self.partition_count - 1}, "
                                         f"got {partitions!r:.60}")
        tasks = range(self.partition_count) if partitions is None else partitions
        namespaces = [namespace(self.application_id, p, name) for p in tasks]
        if any(g.store == name for g in self.topology.global_tables.values()):
            namespaces = [global_namespace(self.application_id, name)]
        backend = self.engine.backend
        replicated = len(namespaces) == 1 and namespaces[0] == global_namespace(self.application_id, name)
        if spec.windowed:
            return ReadOnlyWindowStore(backend, namespaces, spec.key_serde, spec.value_serde, replicated)
        return ReadOnlyKeyValueStore(backend, namespaces, spec.key_serde, spec.value_serde, replicated)

    def query_metadata_for_key(self, store: str, key: Any) -> KeyQueryMetadata:
        """Which instance runs the task owning ``key`` of ``store``: its partition, member id,
        and HTTP host and port (like Kafka Streams' ``queryMetadataForKey``)."""
        self._prepare()
        return query_metadata_for_key(self, store, key)

    @property
    def http_address(self) -> tuple[str, int] | None:
        """``(host, port)`` of this instance's HTTP endpoint while it runs (``start()`` with
        ``http_port``), else None."""
        return None if self._http is None else (self._http.host, self._http.port)

    def task_count(self) -> int:
        """How many tasks the application has (the partition count of its inputs)."""
        self._prepare()
        return self.partition_count
