"""Global tables: a stream replicated whole to every task of an application.

``b.global_table("countries")`` is materialized in ONE store per application (namespace
``<application_id>/global/<store>``) that every task reads, so a stream joins it without
co-partitioning (``stream.join(countries, joiner, key_selector=…)``). A
:class:`GlobalTableUpdater` per global table copies new transactions of every partition of
the stream into the store; each of its commits is one engine write of the store changes and
of its offsets (consumer ``<application_id>-global-<store>``), so the store always equals
the stream up to those offsets, across crashes.

**Consistency** (as in Kafka Streams): when the App starts (and, in ``run(until_idle)``,
before each round) the updaters catch up with everything committed to the global streams:
processing starts only after this *bootstrap*. While the app runs, the updater's own thread
keeps the store up to date. A stream record is joined with the global table as it is when
the record is processed: the join output is exactly-once (one result per record, in the
task's atomic commit), but which version of a global row a record sees depends on timing,
and a record processed again after a crash may see a newer version than before the crash.

**One updater per application:** the store and the offsets belong to the application, not
to an instance. Several instances of one application (scale-out) must let one of them run
the updater (e.g. the holder of a lease) or give each instance its own namespace and
consumer name; two updaters at once write the same values but may move the offsets back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import errors
from ..engine import ops as O
from ..engine.backend import Backend
from ..engine.validate import check_name
from . import nodes as N
from .records import unpack_envelope
from .serdes import Serde, SerdeSpec, serde
from .topology import TopologyGraph

FETCH_TXNS = 256


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
                data = backend.store_get(ns, ks.serialize(key))
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
    """Copies the global stream into its store (see the module docstring)."""

    def __init__(self, backend: Backend, application_id: str, spec: GlobalTableSpec,
                 count: Callable[[str, int], None] | None = None) -> None:
        self.backend = backend
        self.spec = spec
        self.count = count  # counts the records dropped (no key), as App.count does
        self.namespace = global_namespace(application_id, spec.store)
        self.consumer = f"{application_id}-global-{spec.store}"
        try:
            info = backend.get_stream(spec.stream)
        except errors.StreamNotFound:
            raise errors.StreamNotFound(f"global table stream {spec.stream!r} does not exist; create it first"
                                        ) from None
        self.stream_id = info.id
        self.offsets = {p: 0 for p in range(info.partitions)}
        self.offsets.update(backend.get_offsets(spec.stream, self.consumer))

    def catch_up(self) -> int:
        """Apply everything committed to the stream; the transactions applied."""
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
                        env = unpack_envelope(item)
                        if env is None or env[0] is None:
                            dropped += 1  # no key: nothing to store
                            continue
                        puts[env[0]] = env[1]
                if f.position > after:
                    moved[p] = f.position
            if not moved:
                return total
            ops: list[O.Operation] = []
            if puts:
                ops.append(O.StoreWrite(self.namespace, [[k, v] for k, v in puts.items() if v is not None],
                                        [k for k, v in puts.items() if v is None] or None, None))
            ops.append(O.SetOffsets(self.spec.stream, self.consumer, moved, self.stream_id))
            self.backend.submit(ops, durable=True)
            self.offsets.update(moved)
            if dropped and self.count is not None:
                self.count("skipped_null_key", dropped)


class GlobalTables:
    """The updaters of an App's global tables, and their thread."""

    def __init__(self, backend: Backend, application_id: str, specs: dict[str, Any], poll_interval: float,
                 count: Callable[[str, int], None] | None = None) -> None:
        self.backend = backend
        self.updaters = [GlobalTableUpdater(backend, application_id, spec, count) for spec in specs.values()]
        self.poll_interval = poll_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def catch_up(self) -> None:
        for u in self.updaters:
            u.catch_up()

    def start(self) -> None:
        if not self.updaters or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="streams-global-tables", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        seen = 0
        try:
            while not self._stop.is_set():
                if not any([u.catch_up() for u in self.updaters]):
                    seen = self.backend.wait_for_commit(seen, self.poll_interval)
        except BaseException as exc:  # noqa: BLE001 - reported by App.stop()
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            exc, self.error = self.error, None
            raise exc
