"""A task: one partition number of every source stream, its nodes, stores and outputs.

The task reads whole transactions of its partitions (the transaction with the lowest ID
first when several sources have data), processes them record by record, and at commit
submits ONE batch to the engine:

* an ``Instant`` per output (stream, partition) holding the records written since the
  last commit,
* a ``StoreWrite`` per store that changed (and one for the task's meta store: the stream
  time of its windowed aggregations),
* a ``SetOffsets`` per source partition read: the last transaction processed,
* the ``CheckLease`` of the task's lease (:mod:`.membership`): if another instance took
  the task over, the whole batch fails with ``LeaseConflict`` and writes nothing.

The engine applies the batch in one LMDB write transaction (one commit-log entry), so after
a crash the task restarts exactly at its last commit: its stores already hold the state of
that commit, nothing is replayed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import errors
from ..engine import ops as O
from ..engine.backend import Backend, StreamInfo, TxnData
from ..ids import ID_MULTIPLIER
from . import nodes as N
from .appview import AppView
from .metrics import AppMetrics, TaskMetrics
from .processor import STREAM_TIME, WALL_CLOCK
from .record_errors import RecordErrors
from .records import ENVELOPE_MARK, Record, pack_envelope, partition_of, unpack_envelope
from .serdes import BytesSerde, MsgpackSerde
from .stores import KeyValueStore, namespace

META_STORE = "__meta"
FETCH_TXNS = 64


class TaskHost(AppView, Protocol):
    """What a task uses of the app that runs it (:class:`~.app.App` is one)."""

    @property
    def stream_info(self) -> Mapping[str, StreamInfo]:
        """The resolved streams the app reads and writes (partitions, id)."""

    @property
    def fused(self) -> AbstractSet[str]:
        """Internal streams whose sink forwards to their source in memory (one task)."""

    @property
    def prometheus(self) -> AppMetrics: ...

    @property
    def clock(self) -> Callable[[], int]:
        """The wall clock, epoch ms."""

    def resolve(self, stream: str) -> str: ...

    def partitions_of(self, stream: str) -> int: ...

    def count(self, metric: str, n: int = 1) -> None: ...

    @property
    def record_errors(self) -> RecordErrors:
        """What to do with a record whose key cannot be stored (``on_record_error``)."""


@dataclass
class SourceReader:
    """One source partition of a task."""

    stream: str
    partition: int
    stream_id: int
    node: N.SourceNode
    offset: int  # last transaction processed
    committed: int
    fetched_to: int
    buffer: deque[TxnData] = field(default_factory=deque)
    passed_to: int = 0  # position after the buffered transactions (passes cancelled ones)


@dataclass
class Punctuator:
    interval: int
    kind: str
    callback: Callable[[int], Any]
    due: int | None = None


class Task:
    """One task of an :class:`~.app.App` (see the module docstring)."""

    def __init__(self, app: TaskHost, partition: int) -> None:
        self.app = app
        self.backend: Backend = app.engine.backend
        self.application_id = app.application_id
        self.partition = partition
        self.outputs: dict[tuple[str, int], list[bytes]] = {}
        #: bytes of output buffered since the last commit (the app commits at a bound)
        self.output_bytes = 0
        self._stream_time: int | None = None
        self._punctuators: list[Punctuator] = []
        self._stores: dict[str, KeyValueStore] = {}
        for name, spec in app.topology.stores.items():
            self._stores[name] = KeyValueStore(self.backend, namespace(self.application_id, partition, name), name,
                                               spec.key_serde, spec.value_serde)
        self._meta = KeyValueStore(self.backend, namespace(self.application_id, partition, META_STORE), META_STORE,
                                   BytesSerde(), MsgpackSerde())
        self.nodes = app.topology.instantiate(self.application_id)
        for node in self.nodes.values():
            if isinstance(node, (N.SinkNode, N.SourceNode)):
                node.stream = app.resolve(node.stream)
        self.readers: list[SourceReader] = []
        for stream, node_name in app.topology.sources.items():
            resolved = app.resolve(stream)
            node = self.nodes[node_name]
            assert isinstance(node, N.SourceNode)
            if resolved in app.fused:
                continue
            info = app.stream_info[resolved]
            if partition >= info.partitions:
                continue
            offset = self.backend.get_offsets(resolved, self.application_id).get(partition, 0)
            self.readers.append(SourceReader(resolved, partition, info.id, node, offset, offset, offset))
        fused: dict[N.Node, list[N.Node]] = {}
        for node in self.nodes.values():
            if isinstance(node, N.SinkNode) and node.stream in app.fused:
                source = next(n for n in self.nodes.values()
                              if isinstance(n, N.SourceNode) and n.stream == node.stream)
                node.fused = source
                fused[node] = source.children
        for node in self.nodes.values():  # parents of a fused sink call the internal source's children
            if any(c in fused for c in node.children):
                node.children = [g for c in node.children for g in fused.get(c, [c])]
        self.records_since_commit = 0
        self.last_commit = time.monotonic()
        #: the epoch of the task's lease, and the record fencing each commit with it (set by the app)
        self.epoch = 0
        self.fence: O.CheckLease | None = None
        self.metrics = TaskMetrics(app.prometheus, partition)
        for node in self.nodes.values():
            node.init(self)

    # -- TaskContext ---------------------------------------------------------------------
    def store(self, name: str) -> KeyValueStore:
        s = self._stores.get(name)
        if s is None:
            raise errors.StoreNotFound(f"no store {name!r} in application {self.application_id!r}")
        return s

    def meta(self) -> KeyValueStore:
        return self._meta

    def send(self, stream: str, key: bytes | None, value: bytes | None, timestamp: int,
             headers: dict[str, bytes] | None) -> None:
        n = self.app.partitions_of(stream)
        p = partition_of(key, n) if key is not None else self.partition % n
        item = pack_envelope(key, value, timestamp, headers)
        self.output_bytes += len(item)
        out = self.outputs.get((stream, p))
        if out is None:
            self.outputs[(stream, p)] = [item]
        else:
            out.append(item)

    def count(self, metric: str, n: int = 1) -> None:
        self.app.count(metric, n)

    def stream_time(self) -> int | None:
        return self._stream_time

    def wall_clock_ms(self) -> int:
        return self.app.clock()

    def schedule(self, interval_ms: int, punctuation: str, callback: Callable[[int], Any]) -> None:
        p = Punctuator(interval_ms, punctuation, callback)
        if punctuation != STREAM_TIME:
            p.due = self.app.clock() + interval_ms
        self._punctuators.append(p)

    # -- processing ----------------------------------------------------------------------
    def _fill(self) -> None:
        for r in self.readers:
            if not r.buffer:
                f = self.backend.fetch(r.stream, r.partition, r.fetched_to, FETCH_TXNS)
                if f.stream_id is not None and f.stream_id != r.stream_id:
                    raise errors.StreamNotFound(f"stream {r.stream!r} was deleted while application "
                                                f"{self.application_id!r} was reading it")
                r.buffer.extend(f.txns)
                r.fetched_to = max(r.fetched_to, f.position)
                r.passed_to = r.fetched_to
                if not f.txns and r.passed_to > r.offset:
                    r.offset = r.passed_to

    def step(self) -> int:
        """Process one transaction (the oldest of the task's sources); the records it held
        (0: no input now)."""
        self._fill()
        best: SourceReader | None = None
        for r in self.readers:
            if r.buffer and (best is None or r.buffer[0].id < best.buffer[0].id):
                best = r
        if best is None:
            return 0
        txn = best.buffer.popleft()
        started = time.time()
        self._process_txn(best.node, txn)
        done = time.time()
        self.metrics.process(done - started)
        self.metrics.end_to_end(max(0.0, started - txn.id / (ID_MULTIPLIER * 1000)))
        best.offset = txn.id if best.buffer else max(txn.id, best.passed_to)
        n = len(txn.items)
        self.records_since_commit += n
        return max(n, 1)

    def _process_txn(self, node: N.SourceNode, txn: TxnData) -> None:
        txn_ts = txn.id // ID_MULTIPLIER
        ks, vs, extract = node.key_serde, node.value_serde, node.extract
        punctuate = bool(self._punctuators)
        for item in txn.items:
            if item and item[0] == ENVELOPE_MARK:
                env = unpack_envelope(item)
                assert env is not None
                kb, vb, ts, headers = env
                key = None if kb is None else ks.deserialize(kb)
                value = None if vb is None else vs.deserialize(vb)
            else:
                key, value, ts, headers = None, vs.deserialize(item), txn_ts, None
            if extract is not None:
                ts = extract(key, value)
                if isinstance(ts, bool) or not isinstance(ts, int):
                    raise errors.InvalidArgument(f"the timestamp extractor of {node.stream!r} must return epoch ms "
                                                 f"as an int, got {ts!r:.40}")
            if self._stream_time is None or ts > self._stream_time:
                self._stream_time = ts
            try:
                node.forward(Record(key, value, ts, headers))
            except errors.StoreKeyTooLong:
                if not self.app.record_errors.skip("task"):
                    raise
            if punctuate:
                self._punctuate_stream_time()

    def _punctuate_stream_time(self) -> None:
        now = self._stream_time
        assert now is not None
        for p in self._punctuators:
            if p.kind == STREAM_TIME:
                if p.due is None:
                    p.due = now + p.interval
                elif now >= p.due:
                    p.due = now + p.interval
                    self.metrics.punctuations.labels(STREAM_TIME).inc()
                    p.callback(now)

    def punctuate_wall_clock(self) -> None:
        now = self.app.clock()
        for p in self._punctuators:
            if p.kind != STREAM_TIME and p.due is not None and now >= p.due:
                p.due = now + p.interval
                self.metrics.punctuations.labels(WALL_CLOCK).inc()
                p.callback(now)

    # -- commit --------------------------------------------------------------------------
    def dirty(self) -> bool:
        return bool(self.outputs) or self.records_since_commit > 0 or any(
            r.offset != r.committed for r in self.readers)

    def commit(self, durable: bool) -> None:
        """Output, store changes and input offsets in ONE engine write."""
        for node in self.nodes.values():
            node.flush()
        ops: list[O.Operation] = []
        out = 0
        for (stream, p), items in self.outputs.items():
            ops.append(O.Instant(stream, p, O.pack_items(items), stream_id=self.app.stream_info[stream].id))
            out += len(items)
        for store in (*self._stores.values(), self._meta):
            change = store.changes()
            if change is not None:
                ops.append(change)
        for r in self.readers:
            if r.offset != r.committed:
                ops.append(O.SetOffsets(r.stream, self.application_id, {r.partition: r.offset}, r.stream_id))
        if ops:
            if self.fence is not None:
                ops.append(self.fence)  # LeaseConflict (nothing written) once the task moved
            started = time.monotonic()
            self.backend.submit(ops, durable=durable)
            self.metrics.committed(time.monotonic() - started, out)
            self.app.count("commits")
        self.outputs = {}
        self.output_bytes = 0
        for store in (*self._stores.values(), self._meta):
            store.committed()
        for r in self.readers:
            r.committed = r.offset
        self.records_since_commit = 0
        self.last_commit = time.monotonic()

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()
