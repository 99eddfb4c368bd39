"""TestDriver: run a topology on a temporary engine, with a fake wall clock.

It is the real thing, not a simulation: records are written to real streams of an
embedded engine in a temporary directory (``durability="async"``: nothing waits for the
disk), the real :class:`~.app.App` processes them with real commits, and outputs and
stores are read back from the engine. Only time is under the test's control: event time is
what you pipe, wall-clock time moves with :meth:`TestDriver.advance_wall_clock`.

**When records are processed** (as Kafka's ``TopologyTestDriver``): each :meth:`~TestDriver.pipe`
writes its record as one transaction and processes it at once, through every repartition
stream, before it returns: what it led to is committed, in the output streams and the
stores, and the next record is processed after it, whatever the timestamps. So the results
are those of records arriving one by one in the order piped; a record never overtakes an
earlier one through a repartition.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

from .. import errors
from ..engine.embedded import open_engine
from ..engine.protocol import ops as O
from .app import App
from .records import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    Record,
    check_headers,
    check_timestamp,
    pack_envelope,
    partition_of,
    unpack_envelope,
)
from .serdes import Serde, SerdeSpec, serde
from .stores import DEFAULT_CACHE_BYTES, ReadOnlyKeyValueStore, ReadOnlyWindowStore
from .topology import Topology, is_internal


class TestDriver:
    """``TestDriver(topology)``: ``pipe``, ``pipe_raw``, ``read_output``, ``store``,
    ``advance_wall_clock``, ``metrics``, ``process``.

    ``partitions`` is the partition count of the input streams it creates;
    ``commit_records``, ``store_cache_bytes``, ``on_record_error``, ``max_future_ms`` and
    ``idle_advance_ms`` are the :class:`~.app.App`'s (the last two against the driver's wall
    clock: :meth:`advance_wall_clock` lets an idle advance happen). Every record
    piped is processed before ``pipe`` returns (see the module docstring).
    """

    __test__ = False  # not a pytest test class

    def __init__(self, topology: Topology, *, application_id: str = "test-app", partitions: int = 1,
                 wall_clock_ms: int = 0, commit_records: int = 10_000, directory: str | None = None,
                 store_cache_bytes: int = DEFAULT_CACHE_BYTES, on_record_error: str = "fail",
                 max_future_ms: int | None = None, idle_advance_ms: int | None = None) -> None:
        if not isinstance(topology, Topology):
            raise errors.InvalidArgument(f"TestDriver takes a topology (StreamsBuilder().build()), "
                                         f"got {type(topology).__name__}")
        if isinstance(wall_clock_ms, bool) or not isinstance(wall_clock_ms, int) or not (
                MIN_TIMESTAMP <= wall_clock_ms <= MAX_TIMESTAMP):
            raise errors.InvalidArgument(f"wall_clock_ms must be epoch ms as an int in [{MIN_TIMESTAMP}, "
                                         f"{MAX_TIMESTAMP}], got {wall_clock_ms!r:.40}")
        self._dir = tempfile.mkdtemp(prefix="tstreams-driver-", dir=directory)
        self.engine = open_engine(self._dir, durability="async", compaction_interval=None, keepalive_interval=None)
        self.topology = topology
        self._wall = wall_clock_ms
        self._read: dict[tuple[str, int], int] = {}
        try:
            for stream in [*topology.sources, *topology.global_tables]:
                if not is_internal(stream) and not self.engine.has_stream(stream):
                    self.engine.create_stream(stream, partitions=partitions)
            self.app = App(self.engine, application_id=application_id, topology=topology,
                           commit_records=commit_records, clock=lambda: self._wall,
                           store_cache_bytes=store_cache_bytes, on_record_error=on_record_error,
                           max_future_ms=max_future_ms, idle_advance_ms=idle_advance_ms)
            # the tasks start now (as Kafka's TopologyTestDriver's): their processors' init runs and
            # wall-clock punctuators are due from the driver's start time, before any clock move
            self.app.run(until_idle=True)
        except BaseException:
            self.close()
            raise

    # -- input ----------------------------------------------------------------------------
    def pipe(self, stream: str, key: Any, value: Any, timestamp: int, headers: dict[str, bytes] | None = None) -> None:
        """Write one record (one transaction) to input ``stream`` (the partition of its key;
        partition 0 without a key), serialized with the source's serdes, and process it at
        once, through every repartition, to the end."""
        node = self._source(stream)
        check_timestamp(timestamp, f"the timestamp of a record piped to {stream!r}")
        check_headers(headers)
        kb = None if key is None else node.key_serde.serialize(key)
        vb = None if value is None else node.value_serde.serialize(value)
        n = self.engine.get_stream(stream).partitions
        p = 0 if kb is None else partition_of(kb, n)
        self._write(O.Instant(stream, p, O.pack_items([pack_envelope(kb, vb, timestamp, headers)])))

    def pipe_raw(self, stream: str, item: bytes, partition: int = 0) -> None:
        """Write one plain item (no envelope: key None, the transaction's timestamp) to
        ``partition`` and process it at once."""
        self._source(stream)
        if not isinstance(item, bytes):
            raise errors.InvalidArgument(f"item must be bytes, got {type(item).__name__}")
        n = self.engine.get_stream(stream).partitions
        if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < n:
            raise errors.PartitionOutOfRange(f"partition must be 0..{n - 1} for {stream!r}, got {partition!r:.20}")
        self._write(O.Instant(stream, partition, O.pack_items([item])))

    def _write(self, op: O.Instant) -> None:
        self.engine.backend.submit([op], durable=False)
        self.app.run(until_idle=True)

    def _source(self, stream: str) -> Any:
        name = self.topology.sources.get(stream)
        if name is None and stream in self.topology.global_tables:
            return self.topology.global_tables[stream]
        if name is None:
            raise errors.StreamNotFound(f"{stream!r} is not an input stream of the topology; inputs: "
                                        f"{sorted(s for s in self.topology.sources if not is_internal(s))}")
        spec = self.topology.nodes[name]
        return spec.make(lambda s: s)

    def process(self) -> dict[str, int]:
        """Process whatever input there is (nothing, after ``pipe``: it processes its record
        at once; input written to the streams by other means, e.g. ``driver.engine``, is
        processed here) and return the metrics."""
        return self.app.run(until_idle=True)

    def advance_wall_clock(self, ms: int) -> None:
        """Move the wall clock by ``ms``, run wall-clock punctuators and let idle tasks'
        stream time move on (``idle_advance_ms``)."""
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise errors.InvalidArgument(f"ms must be a non-negative integer, got {ms!r}")
        if self._wall + ms > MAX_TIMESTAMP:
            raise errors.InvalidArgument(f"the wall clock would pass {MAX_TIMESTAMP} (the last valid timestamp)")
        self._wall += ms
        self.process()

    # -- output ---------------------------------------------------------------------------
    def read_output(self, stream: str, *, key_serde: SerdeSpec | None = None,
                    value_serde: SerdeSpec | None = None) -> list[Record]:
        """Records written to ``stream`` since the last call (partition by partition, in
        order), decoded with the serdes the topology writes it with."""
        self.process()
        sink = self.topology.sinks.get(stream)
        if sink is None and (key_serde is None or value_serde is None):
            raise errors.StreamNotFound(f"{stream!r} is not written by the topology; outputs: "
                                        f"{sorted(self.topology.sinks)}")
        ks: Serde = serde(key_serde) if key_serde is not None else sink[0]  # type: ignore[index]
        vs: Serde = serde(value_serde) if value_serde is not None else sink[1]  # type: ignore[index]
        out: list[Record] = []
        info = self.engine.get_stream(stream)
        backend = self.engine.backend
        for p in range(info.partitions):
            after = self._read.get((stream, p), 0)
            while True:
                f = backend.fetch(stream, p, after, 1024)
                for txn in f.txns:
                    for item in txn.items:
                        env = unpack_envelope(item)
                        if env is None:
                            out.append(Record(None, vs.deserialize(item), txn.id // 100_000))
                            continue
                        kb, vb, t, headers = env
                        out.append(Record(None if kb is None else ks.deserialize(kb),
                                          None if vb is None else vs.deserialize(vb), t, headers))
                if f.position <= after:
                    break
                after = f.position
            self._read[(stream, p)] = after
        return out

    def store(self, name: str) -> ReadOnlyKeyValueStore | ReadOnlyWindowStore:
        """The committed content of store ``name`` (after processing what was piped)."""
        self.process()
        return self.app.store(name)

    @property
    def metrics(self) -> dict[str, int]:
        return dict(self.app.metrics)

    def close(self) -> None:
        try:
            app = getattr(self, "app", None)
            if app is not None and not self.engine.closed:
                app.close()
        finally:
            self._close_engine()

    def _close_engine(self) -> None:
        try:
            if not self.engine.closed:
                self.engine.close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> TestDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

