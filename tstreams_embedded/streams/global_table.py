"""Global tables: a stream replicated whole to every task of an application.

``b.global_table("countries")`` is materialized in ONE store per application (namespace
``<application_id>/global/<store>``) that every task of every instance reads, so a stream
joins it without co-partitioning (``stream.join(countries, joiner, key_selector=…)``). A
:class:`GlobalTableUpdater` per global table copies new transactions of every partition of
the stream into the store; each of its commits is one engine write of the store changes and
of its offsets (consumer ``<application_id>-global-<store>``), so the store always equals
the stream up to those offsets, across crashes.

**One updater per application, fenced.** The store and the offsets belong to the
application, not to an instance, so exactly one instance updates them: the holder of the
*global-table lease* ``g/global-tables`` in the application's group store
(:func:`.membership.group_store`), a ``Lease`` record decided by the engine's clock like the
task leases. Every updater write carries a ``CheckLease`` of it: an updater whose lease was
taken over (it was paused, or slow, past ``lease_ms``) can never commit again, so the store
and its offsets never move back. The holder renews the lease every ``lease_ms / 3`` and
releases it when the app stops; when it dies, another instance takes it ``lease_ms`` after
its last renewal and continues from the stored offsets. The other instances only read the
shared store.

**Consistency** (as in Kafka Streams): when the App starts (and, in ``run(until_idle)``,
before each round) every instance notes how far each global stream can be read now (its
*head*) and waits until the stored offsets reach it — updating itself if it holds or can
take the lease, else waiting for the holder: processing starts only after this
*bootstrap*. While the app runs, the holder's global-table thread keeps the store up to
date. A stream record is joined with the global table as it is when the record is
processed: the join output is exactly-once (one result per record, in the task's atomic
commit), but which version of a global row a record sees depends on timing, and a record
processed again after a crash may see a newer version than before the crash (never an
older one: the store only moves forward).

**Failures.** If the updater fails, the app is told at once (``on_error``): ``run()``
raises, a started app stops its workers and ``stop()`` re-raises; the lease is freed. A
global record whose key cannot be a store key (longer than 255 bytes) raises
:class:`~tstreams_embedded.errors.StoreKeyTooLong` with ``on_record_error="fail"``, and is
skipped (and counted) with ``"skip"`` (:mod:`.record_errors`); so is a damaged envelope
(``SerdeError``). A lookup with such a key finds nothing (it cannot be in the table).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from .. import errors
from ..engine.operator.appgroups import group_store
from ..engine.protocol import ops as O
from ..engine.protocol.backend import Backend
from ..engine.protocol.validate import check_name
from ..engine.storage.state_stores import MAX_STORE_KEY, unpack_lease
from . import nodes as N
from .record_errors import RecordErrors
from .records import unpack_envelope
from .serdes import Serde, SerdeSpec, serde
from .topology import TopologyGraph

FETCH_TXNS = 256
#: the key of the global-table lease in the application's group store
GLOBAL_LEASE = b"g/global-tables"
METRICS_PREFIX = "tstreams_streams"


def global_namespace(application_id: str, store: str) -> str:
    return f"{application_id}/global/{store}"


@dataclass(frozen=True)
class GlobalTableSpec:
    stream: str
    store: str
    key_serde: Serde
    value_serde: Serde


class GlobalTable:
    """A global table; use it in ``stream.join`` / ``left_join`` with ``key_selector``."""

    def __init__(self, spec: GlobalTableSpec) -> None:
        self.spec = spec
        #: the store that holds it (``app.store(name)``)
        self.store = spec.store

    @property
    def getter(self) -> N.Getter:
        spec = self.spec

        def make(ctx: N.TaskContext) -> Callable[[Any], Any]:
            backend, ns = ctx.backend, global_namespace(ctx.application_id, spec.store)
            ks, vs = spec.key_serde, spec.value_serde

            def lookup(key: Any) -> Any:
                kb = ks.serialize(key)
                if len(kb) > MAX_STORE_KEY:
                    return None  # cannot be stored, so it is not in the table
                data = backend.store_get(ns, kb)
                return None if data is None else vs.deserialize(data)
            return lookup
        return make


def add_global_table(b: TopologyGraph, stream: str, key_serde: SerdeSpec, value_serde: SerdeSpec,
                     store: str | None) -> GlobalTable:
    check_name(stream)
    name = store if store is not None else f"{stream}-global"
    spec = GlobalTableSpec(stream, name, serde(key_serde, "key_serde"), serde(value_serde, "value_serde"))
    b.add_global(stream, spec)
    b.add_store(name, key_serde, value_serde)  # for app.store(name); the App reads it globally
    return GlobalTable(spec)


class GlobalTableUpdater:
    """Copies the global stream into its store (see the module docstring). ``skip()`` is
    asked about a record whose key cannot be stored: True skips it, False (or no ``skip``)
    raises :class:`~tstreams_embedded.errors.StoreKeyTooLong`."""

    def __init__(self, backend: Backend, application_id: str, spec: GlobalTableSpec,
                 skip: Callable[[], bool] | None = None,
                 count: Callable[[str, int], None] | None = None) -> None:
        self.backend = backend
        self.spec = spec
        self.count = count  # counts the records dropped (no key), as App.count does
        self.namespace = global_namespace(application_id, spec.store)
        self.consumer = f"{application_id}-global-{spec.store}"
        self.skip = skip
        try:
            info = backend.get_stream(spec.stream)
        except errors.StreamNotFound:
            raise errors.StreamNotFound(f"global table stream {spec.stream!r} does not exist; create it first"
                                        ) from None
        self.stream_id = info.id
        self.offsets = {p: 0 for p in range(info.partitions)}
        self.reload()

    def reload(self) -> None:
        """Continue from the stored offsets (after taking the lease: a predecessor moved them)."""
        self.offsets.update(self.backend.get_offsets(self.spec.stream, self.consumer))

    def head(self) -> dict[int, int]:
        """How far each partition can be read now (what a catch-up started now reaches)."""
        stored = self.backend.get_offsets(self.spec.stream, self.consumer)
        heads = {}
        for p in self.offsets:
            position = stored.get(p, 0)
            while True:
                scan = self.backend.scan_index(self.spec.stream, p, position)
                position = max(position, scan.position)
                if not scan.truncated:
                    break
            heads[p] = position
        return heads

    def reached(self, head: dict[int, int]) -> bool:
        """Whether the stored offsets reached ``head``."""
        stored = self.backend.get_offsets(self.spec.stream, self.consumer)
        return all(stored.get(p, 0) >= h for p, h in head.items())

    def catch_up(self, fence: O.CheckLease, between: Callable[[], None] | None = None) -> int:
        """Apply everything committed to the stream, each write fenced by ``fence``
        (``between`` is called before each write); the transactions applied.
        LeaseConflict (nothing written) once the lease of ``fence`` was taken over."""
        total = 0
        while True:
            puts: dict[bytes, bytes | None] = {}
            moved: dict[int, int] = {}
            dropped = 0
            for p, after in self.offsets.items():
                f = self.backend.fetch(self.spec.stream, p, after, FETCH_TXNS)
                for txn in f.txns:
                    total += 1
                    for item in txn.items:
                        try:
                            env = unpack_envelope(item)
                        except errors.SerdeError:
                            if self.skip is not None and self.skip():
                                continue
                            raise
                        if env is None or env[0] is None:
                            dropped += 1  # no key: nothing to store
                            continue
                        if len(env[0]) > MAX_STORE_KEY:
                            self._bad_key(env[0], p, txn.id)
                            continue
                        puts[env[0]] = env[1]
                if f.position > after:
                    moved[p] = f.position
            if not moved:
                return total
            ops: list[O.Operation] = [fence]
            if puts:
                ops.append(O.StoreWrite(self.namespace, [[k, v] for k, v in puts.items() if v is not None],
                                        [k for k, v in puts.items() if v is None] or None, None))
            ops.append(O.SetOffsets(self.spec.stream, self.consumer, moved, self.stream_id))
            if between is not None:
                between()
            self.backend.submit(ops, durable=True)
            self.offsets.update(moved)
            if dropped and self.count is not None:
                self.count("skipped_null_key", dropped)

    def _bad_key(self, key: bytes, partition: int, txn_id: int) -> None:
        if self.skip is not None and self.skip():
            return
        raise errors.StoreKeyTooLong(
            f"global table store {self.spec.store!r}: a record of stream {self.spec.stream!r} (partition "
            f"{partition}, transaction {txn_id}) has a key of {len(key)} bytes; store keys are at most "
            f"{MAX_STORE_KEY} bytes (App(on_record_error='skip') skips such records)")


class GlobalTableMetrics:
    """The global-table metrics of an app instance, in its Prometheus registry (labelled
    by ``app``)."""

    def __init__(self, registry: CollectorRegistry, application_id: str) -> None:
        self.updating = Gauge(f"{METRICS_PREFIX}_global_tables_updating",
                              "1 while this instance holds the global-table lease and updates the global stores",
                              ["app"], registry=registry).labels(application_id)
        self.failed = Gauge(f"{METRICS_PREFIX}_global_tables_failed",
                            "1 once this instance's global-table updater failed (the app stops)", ["app"],
                            registry=registry).labels(application_id)


class GlobalTables:
    """The updaters of an App's global tables, the global-table lease, and their thread.

    ``on_error(exc)`` is called (from the thread) when the updater fails; ``record_errors``
    decides about records whose key cannot be stored (None: they fail)."""

    def __init__(self, backend: Backend, application_id: str, specs: dict[str, Any], *, poll_interval: float,
                 lease_ms: int, name: str = "instance", record_errors: RecordErrors | None = None,
                 on_error: Callable[[BaseException], None] | None = None,
                 metrics: GlobalTableMetrics | None = None,
                 count: Callable[[str, int], None] | None = None) -> None:
        self.backend = backend
        self.metrics = metrics
        skip = None if record_errors is None else (lambda: record_errors.skip("global"))
        self.updaters = [GlobalTableUpdater(backend, application_id, spec, skip, count) for spec in specs.values()]
        self.poll_interval = poll_interval
        self.lease_ms = lease_ms
        self.store = group_store(application_id)
        #: this instance's owner id of the global-table lease (one per GlobalTables)
        self.owner = f"{name}-global-{uuid.uuid4().hex[:12]}"
        #: the epoch of the lease while this instance holds it, else 0
        self.epoch = 0
        self._last_renew = 0.0
        self._lock = threading.RLock()  # one update at a time (the thread, a run() round)
        self._on_error = on_error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: the failure that ended the updater (it is reported to the app through on_error)
        self.error: BaseException | None = None

    @property
    def state(self) -> str:
        """``"failed"``, ``"updating"`` (this instance holds the lease) or ``"standby"``."""
        if self.error is not None:
            return "failed"
        return "updating" if self.epoch else "standby"

    # -- the lease -----------------------------------------------------------------------
    def _set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self.metrics is not None:
            self.metrics.updating.set(1 if epoch else 0)

    def _hold(self) -> bool:
        """Hold the lease: renew it when due, or take it if it is free. Whether held."""
        if self.epoch:
            if time.monotonic() - self._last_renew >= self.lease_ms / 3000.0:
                self._renew()
            return self.epoch != 0
        lease = unpack_lease(self.backend.store_get(self.store, GLOBAL_LEASE))
        if lease is not None and lease.live_at(self.backend.now_ms()):
            return False  # held by a live instance
        epoch = 1 if lease is None else lease.epoch + 1
        try:
            self.backend.submit([O.Lease(self.store, GLOBAL_LEASE, self.owner, epoch, self.lease_ms)])
        except errors.LeaseConflict:
            return False  # another instance was quicker
        self._last_renew = time.monotonic()
        for u in self.updaters:  # the predecessor's commits are fenced from now on: continue from theirs
            u.reload()
        self._set_epoch(epoch)
        return True

    def _renew(self) -> None:
        try:
            self.backend.submit([O.Lease(self.store, GLOBAL_LEASE, self.owner, self.epoch, self.lease_ms)],
                                durable=False)
            self._last_renew = time.monotonic()
        except errors.LeaseConflict:
            self._set_epoch(0)  # taken over (we were paused past the lease): the new holder updates

    def _renew_if_due(self) -> None:
        if self.epoch and time.monotonic() - self._last_renew >= self.lease_ms / 3000.0:
            self._renew()
            if not self.epoch:
                raise errors.LeaseConflict("the global-table lease was taken over")

    def release(self) -> None:
        """Free the lease (when the app stops): another instance takes over at once."""
        with self._lock:
            epoch, self.epoch = self.epoch, 0
            if self.metrics is not None:
                self.metrics.updating.set(0)
            if epoch and not self.backend.closed:
                try:
                    self.backend.submit([O.Lease(self.store, GLOBAL_LEASE, self.owner, epoch, 0)])
                except errors.LeaseConflict:
                    pass  # taken over meanwhile

    # -- updating ------------------------------------------------------------------------
    def update(self) -> int:
        """If this instance holds (or can take) the lease: apply what is new to the global
        stores, every write fenced by the lease. The transactions applied."""
        if not self.updaters:
            return 0
        with self._lock:
            if not self._hold():
                return 0
            fence = O.CheckLease(self.store, GLOBAL_LEASE, self.owner, self.epoch)
            total = 0
            try:
                for u in self.updaters:
                    total += u.catch_up(fence, self._renew_if_due)
            except errors.LeaseConflict:
                self._set_epoch(0)  # taken over: nothing of ours was written since
                for u in self.updaters:
                    u.reload()
            return total

    def bootstrap(self) -> None:
        """Wait until the global stores reached the heads of their streams as they are now,
        updating them while this instance holds (or can take) the lease, else waiting for
        the holder (a dead holder's lease expires within ``lease_ms``)."""
        if not self.updaters:
            return
        self._set_failed(None)
        try:
            heads = [u.head() for u in self.updaters]
            seen = 0
            wait = min(self.lease_ms / 4000.0, 0.25)
            while True:
                self.update()
                if all(u.reached(h) for u, h in zip(self.updaters, heads, strict=True)):
                    return
                seen = self.backend.wait_for_commit(seen, wait)
        except BaseException as exc:
            self._set_failed(exc)
            self._release_quietly()
            raise

    def _set_failed(self, exc: BaseException | None) -> None:
        self.error = exc
        if self.metrics is not None:
            self.metrics.failed.set(0 if exc is None else 1)

    def _release_quietly(self) -> None:
        try:
            self.release()
        except errors.TStreamsError:
            pass  # e.g. the engine is gone: the lease expires by itself

    # -- the thread ----------------------------------------------------------------------
    def start(self) -> None:
        """Start the thread: it updates while this instance holds the lease, and takes the
        lease when it is free (the holder stopped, or died ``lease_ms`` ago)."""
        if not self.updaters or self._thread is not None:
            return
        self._set_failed(None)
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="streams-global-tables", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        seen = 0
        standby_wait = min(self.lease_ms / 4000.0, 0.25)  # how soon a dead holder's lease is noticed
        renew_wait = self.lease_ms / 3000.0
        try:
            while not self._stop.is_set():
                if not self.update():
                    wait = min(self.poll_interval, renew_wait) if self.epoch else standby_wait
                    seen = self.backend.wait_for_commit(seen, wait)
        except BaseException as exc:  # noqa: BLE001 - reported through on_error
            self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """The updater failed: free the lease, show it, tell the app."""
        self._set_failed(exc)
        self._release_quietly()
        if self._on_error is not None:
            self._on_error(exc)

    def stop(self) -> None:
        """Stop the thread and free the lease (a failure was reported through on_error)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.release()
