"""A task: one partition number of every source stream, its nodes, stores and outputs.

The task reads whole transactions of its partitions and processes each as one batch of
records (the batched record path: the transaction decoded at once, :mod:`.batch_decode`, then
moved through each node as a list, :meth:`~.nodes.Node.process_batch`), or record by record
when a node needs it (a :class:`~.processor.ProcessorNode`, whose processor may read the
task's stream time or schedule punctuators) or a record of the transaction is bad data. At
commit it submits ONE batch to the engine:

* an ``Instant`` per output (stream, partition) holding the records written since the
  last commit,
* a ``StoreWrite`` per store that changed (and one for the task's meta store: the stream
  time of its windowed aggregations),
* a ``SetOffsets`` per source partition read: the last transaction processed,
* the ``CheckLease`` of the task's lease (:mod:`.app_members`): if another instance took
  the task over, the whole batch fails with ``LeaseConflict`` and writes nothing.

The engine applies the batch in one LMDB write transaction (one commit-log entry), so after
a crash the task restarts exactly at its last commit: its stores already hold the state of
that commit, nothing is replayed.

**Order across sources** (Kafka Streams' timestamp synchronization): when several sources
have transactions buffered, the task processes next the one whose first record has the
smallest timestamp (its event time: the envelope's timestamp, the timestamp extractor's, or
the transaction's time for plain items); on equal timestamps a table source (``b.table``)
goes before streams, then the lower transaction ID. So a stream record is joined with every
table row of a timestamp ``<=`` its own that is readable when it is processed: transaction
IDs alone would not do, as each partition numbers its transactions by its own clock and
counter, so transactions of different streams written within one millisecond are in no
particular ID order. Each source keeps its own transaction order.

``max_task_idle_ms`` (Kafka's ``max.task.idle.ms``): while one source of the task has
nothing readable and another has, the task waits up to that long (on the app's clock) for
the empty one before processing past it, then keeps processing until every source has data
again. An empty source is one with no transactions, or whose next one is still open (not
checkpointed): the wait lets rows of a long-open table transaction, older than stream records
already readable, still be joined with them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import errors
from ..engine.protocol import ops as O
from ..engine.protocol.backend import Backend, StreamInfo, TxnData
from ..engine.storage.core import Core
from ..ids import ID_MULTIPLIER
from . import nodes as N
from .appview import AppView
from .batch_decode import decode_batch
from .mapped_pages import MappedPages
from .metrics import AppMetrics, TaskMetrics
from .processor import STREAM_TIME, WALL_CLOCK, ProcessorNode
from .record_errors import DEAD_LETTERED_METRIC, RecordErrors, dead_letter
from .records import (
    ENVELOPE_MARK,
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    Record,
    check_timestamp,
    pack_envelope,
    partition_of,
    unpack_envelope,
)
from .serdes import BytesSerde, MsgpackSerde
from .stores import KeyValueStore, namespace
from .window_store import WindowStore

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

    @property
    def store_cache_bytes(self) -> int:
        """The bound of each store's cache: what its entries take in memory (:mod:`.store_cache`)."""

    @property
    def max_task_idle_ms(self) -> int:
        """How long a task waits for an empty source while others have data (ms)."""

    @property
    def dead_letter_stream(self) -> str | None:
        """Where bad records go under ``on_record_error="dead_letter"`` (None: other policies)."""

    @property
    def max_future_ms(self) -> int | None:
        """How far ahead of the wall clock a record may be stamped (None: any distance)."""

    @property
    def mapped_pages(self) -> MappedPages:
        """Where the input read is counted, to give back the engine map's pages."""

    @property
    def idle_advance_ms(self) -> int | None:
        """After how long without input stream time moves on by the wall clock (None: never)."""

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
    table: bool = False  # read as a table: first on equal timestamps
    head: tuple[int, int] | None = None  # (transaction ID, timestamp of its first record) of the next one
    #: the engine's commit sequence when a fetch last found nothing (not fetched again before it moves)
    empty_at: int | None = None


@dataclass
class Punctuator:
    interval: int
    kind: str
    callback: Callable[[int], Any]
    due: int | None = None


def _extracted(node: N.SourceNode, key: Any, value: Any, txn: TxnData) -> int:
    """The timestamp ``node``'s extractor gives a record of ``txn`` (checked: a valid
    timestamp, see :func:`~.records.check_timestamp`)."""
    assert node.extract is not None
    ts = node.extract(key, value)
    if type(ts) is not int or not MIN_TIMESTAMP <= ts <= MAX_TIMESTAMP:
        check_timestamp(ts, f"the timestamp the extractor of {node.stream!r} gave the record with key {key!r:.40} "
                            f"(transaction {txn.id})")
    return ts


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
                                               spec.key_serde, spec.value_serde, app.store_cache_bytes)
        self._windows = {name: WindowStore(self._stores[name], spec.size_ms, spec.retention_ms, self.stream_time)
                         for name, spec in app.topology.stores.items() if spec.windowed}
        remote = not isinstance(self.backend, Core)
        for store in self._stores.values():
            store.remote = remote
        self._meta = KeyValueStore(self.backend, namespace(self.application_id, partition, META_STORE), META_STORE,
                                   BytesSerde(), MsgpackSerde(), app.store_cache_bytes)
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
            self.readers.append(SourceReader(resolved, partition, info.id, node, offset, offset, offset,
                                             table=stream in app.topology.table_sources))
        #: see the module docstring; since when (app clock) the task has had data in some sources
        #: and none in others (None: not so)
        self.max_idle_ms = app.max_task_idle_ms
        self._idle_since: int | None = None
        #: idle advance (:meth:`advance_idle`): since when (app clock) no source has had input,
        #: and the task's stream time then (None: it had input since the last look)
        self._quiet_since: int | None = None
        self._quiet_base: int | None = None
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
        #: the streams this task writes that the application reads back (repartition and
        #: ``through`` streams, not fused ones): see :meth:`feeds_back`
        self._read_back = {app.resolve(s) for s in app.topology.sources if s in app.topology.sinks} - set(app.fused)
        #: the engine's commit sequence as the app last read it (see :meth:`next_time`)
        self.commit_seq: int | None = None
        self.records_since_commit = 0
        #: when the task last committed, on the app's clock (epoch ms; the commit interval's start)
        self.last_commit = app.clock()
        #: the epoch of the task's lease, and the record fencing each commit with it (set by the app)
        self.epoch = 0
        self.fence: O.CheckLease | None = None
        self.metrics = TaskMetrics(app.prometheus, partition)
        #: whether transactions go through the nodes as batches (see the module docstring); set
        #: before the nodes' ``init``: a node may keep state in memory only while batched
        self.batched = not any(isinstance(node, ProcessorNode) for node in self.nodes.values())
        for node in self.nodes.values():
            node.init(self)
        #: the transaction being processed as a batch: (source node, partition, transaction)
        self._batch_source: tuple[N.SourceNode, int, TxnData] | None = None

    # -- TaskContext ---------------------------------------------------------------------
    def store(self, name: str) -> KeyValueStore:
        s = self._stores.get(name)
        if s is None:
            raise errors.StoreNotFound(f"no store {name!r} in application {self.application_id!r}")
        return s

    def window_store(self, name: str) -> WindowStore | None:
        self.store(name)  # StoreNotFound for an unknown one
        return self._windows.get(name)

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
        self.metrics.count(metric, n)

    def stream_time(self) -> int | None:
        return self._stream_time

    def source_partitions(self, stream: str) -> int:
        return self.app.partitions_of(self.app.resolve(stream))

    def wall_clock_ms(self) -> int:
        return self.app.clock()

    def schedule(self, interval_ms: int, punctuation: str, callback: Callable[[int], Any]) -> None:
        p = Punctuator(interval_ms, punctuation, callback)
        if punctuation != STREAM_TIME:
            p.due = self.app.clock() + interval_ms
        self._punctuators.append(p)

    # -- processing ----------------------------------------------------------------------
    def _fill(self) -> None:
        seq = self.commit_seq
        for r in self.readers:
            if not r.buffer and (seq is None or r.empty_at != seq):
                f = self.backend.fetch(r.stream, r.partition, r.fetched_to, FETCH_TXNS)
                r.empty_at = seq if not f.txns else None
                if f.stream_id is not None and f.stream_id != r.stream_id:
                    raise errors.StreamNotFound(f"stream {r.stream!r} was deleted while application "
                                                f"{self.application_id!r} was reading it")
                r.buffer.extend(f.txns)
                if f.txns:
                    self.app.mapped_pages.read(sum(sum(map(len, t.items)) for t in f.txns))
                r.fetched_to = max(r.fetched_to, f.position)
                r.passed_to = r.fetched_to
                if not f.txns and r.passed_to > r.offset:
                    r.offset = r.passed_to

    def next_time(self, commit_seq: int | None = None) -> int | None:
        """The timestamp of the next record the task would process (None: no input now).
        ``commit_seq`` (the engine's commit sequence, ``backend.wait_for_commit(-1, 0)``):
        sources found empty at that sequence are not fetched again until it moves."""
        if commit_seq is not None:
            self.commit_seq = commit_seq
        self._fill()
        heads = [self._head_time(r) for r in self.readers if r.buffer]
        return min(heads) if heads else None

    def feeds_back(self) -> bool:
        """Whether output buffered since the last commit goes to a stream the application
        reads back (tasks downstream see it only once committed)."""
        return any(stream in self._read_back for stream, _ in self.outputs)

    def feeds_back_only(self) -> bool:
        """Whether every output buffered since the last commit goes to streams the
        application reads back (none leaves it)."""
        return all(stream in self._read_back for stream, _ in self.outputs)

    def step(self) -> int | None:
        """Process one transaction (the next in timestamp order of the task's sources, see
        the module docstring); the records it held (0 for an empty transaction; None: no
        input now, or waiting for an empty source up to ``max_task_idle_ms``)."""
        self._fill()
        ready = [r for r in self.readers if r.buffer]
        if not ready or len(ready) == len(self.readers):
            self._idle_since = None
            if not ready:
                return None
        elif self.max_idle_ms > 0:  # some sources have data, others none: wait for them a while
            now = self.app.clock()
            if self._idle_since is None:
                self._idle_since = now
            if now - self._idle_since < self.max_idle_ms:
                return None
        best = ready[0] if len(ready) == 1 else min(
            ready, key=lambda r: (self._head_time(r), not r.table, r.buffer[0].id))
        txn = best.buffer.popleft()
        started = time.time()
        self._process_txn(best.node, best.partition, txn)
        done = time.time()
        self.metrics.process(done - started)
        self.metrics.end_to_end(max(0.0, started - txn.id / (ID_MULTIPLIER * 1000)))
        best.offset = txn.id if best.buffer else max(txn.id, best.passed_to)
        self._quiet_since = None
        n = len(txn.items)
        self.records_since_commit += n
        return n

    def _head_time(self, r: SourceReader) -> int:
        """The timestamp of the first record of ``r``'s next transaction (cached)."""
        txn = r.buffer[0]
        if r.head is None or r.head[0] != txn.id:
            r.head = (txn.id, self._first_timestamp(r.node, txn))
        return r.head[1]

    def _first_timestamp(self, node: N.SourceNode, txn: TxnData) -> int:
        """(The transaction's time when its first record is bad data: processing refuses it.)"""
        try:
            return self._first_record_timestamp(node, txn)
        except (errors.SerdeError, errors.InvalidArgument):
            return txn.id // ID_MULTIPLIER

    def _first_record_timestamp(self, node: N.SourceNode, txn: TxnData) -> int:
        txn_ts = txn.id // ID_MULTIPLIER
        if not txn.items:
            return txn_ts
        item = txn.items[0]
        env = unpack_envelope(item)
        if node.extract is None:
            return txn_ts if env is None else env[2]
        if env is None:
            return _extracted(node, None, node.value_serde.deserialize(item), txn)
        kb, vb = env[0], env[1]
        return _extracted(node, None if kb is None else node.key_serde.deserialize(kb),
                          None if vb is None else node.value_serde.deserialize(vb), txn)

    def _process_txn(self, node: N.SourceNode, partition: int, txn: TxnData) -> None:
        ahead = self.app.max_future_ms
        now = self.app.clock() if ahead is not None else 0  # the bound holds for the whole transaction
        latest = MAX_TIMESTAMP if ahead is None else now + ahead
        if self.batched and not self._punctuators and txn.items:
            recs = decode_batch(node, txn, latest)
            if recs is not None:
                self._process_batch(node, partition, txn, recs)
                return
        self._process_records(node, partition, txn, now, latest)

    def _process_batch(self, node: N.SourceNode, partition: int, txn: TxnData, recs: list[Record]) -> None:
        """The records of ``txn`` through the nodes as one batch (the task's stream time moves
        to their largest timestamp first: no node of a batched task reads it in between)."""
        top = max(rec.timestamp for rec in recs)
        if self._stream_time is None or top > self._stream_time:
            self._stream_time = top
        self._batch_source = (node, partition, txn)
        try:
            node.forward_batch(recs, list(range(len(recs))))
        finally:
            self._batch_source = None

    def record_failed(self, origin: int, error: errors.StoreKeyTooLong) -> None:
        """A record of the batch being processed failed (see :class:`~.nodes.TaskContext`)."""
        if not self.app.record_errors.skip("task"):
            raise error
        assert self._batch_source is not None
        node, partition, txn = self._batch_source
        self._dead_letter(txn.items[origin], node.stream, partition, txn, origin, error)

    def _process_records(self, node: N.SourceNode, partition: int, txn: TxnData, now: int, latest: int) -> None:
        """The records of ``txn`` one at a time (each through every node before the next)."""
        txn_ts = txn.id // ID_MULTIPLIER
        ks, vs, extract = node.key_serde, node.value_serde, node.extract
        punctuate = bool(self._punctuators)
        ahead = self.app.max_future_ms
        for index, item in enumerate(txn.items):
            try:  # bad data (see record_errors): a damaged envelope, undecodable key or value, bad timestamp
                if item and item[0] == ENVELOPE_MARK:
                    env = unpack_envelope(item)
                    assert env is not None
                    kb, vb, ts, headers = env
                    key = None if kb is None else ks.deserialize(kb)
                    value = None if vb is None else vs.deserialize(vb)
                else:
                    key, value, ts, headers = None, vs.deserialize(item), txn_ts, None
                if extract is not None:
                    ts = _extracted(node, key, value, txn)
                elif type(ts) is not int or not MIN_TIMESTAMP <= ts <= MAX_TIMESTAMP:
                    check_timestamp(ts, f"the timestamp of the record with key {key!r:.40} in transaction "
                                        f"{txn.id} of {node.stream!r}")
                if ts > latest:
                    raise errors.TimestampTooFarAhead(
                        f"the record with key {key!r:.40} in transaction {txn.id} of {node.stream!r} is stamped "
                        f"{ts}, more than max_future_ms={ahead} ahead of the wall clock ({now})")
            except (errors.SerdeError, errors.InvalidArgument) as exc:
                if not self.app.record_errors.skip("task"):
                    raise
                self._dead_letter(item, node.stream, partition, txn, index, exc)
                continue
            if self._stream_time is None or ts > self._stream_time:
                self._stream_time = ts
            try:
                node.forward(Record(key, value, ts, headers))
            except errors.StoreKeyTooLong as exc:
                if not self.app.record_errors.skip("task"):
                    raise
                self._dead_letter(item, node.stream, partition, txn, index, exc)
            if punctuate:
                self._punctuate_stream_time()

    def _dead_letter(self, item: bytes, stream: str, partition: int, txn: TxnData, index: int,
                     error: BaseException) -> None:
        """Under ``on_record_error="dead_letter"``: the record to the dead-letter stream, with
        this commit (see :mod:`.record_errors`)."""
        target = self.app.dead_letter_stream
        if target is not None:
            self.send(target, None, dead_letter(item, stream, partition, txn.id, index, error),
                      txn.id // ID_MULTIPLIER, None)
            self.count(DEAD_LETTERED_METRIC)

    def _punctuate_stream_time(self) -> None:
        now = self._stream_time
        assert now is not None
        for p in self._punctuators:
            if p.kind == STREAM_TIME:
                if p.due is None:
                    p.due = now + p.interval
                elif now >= p.due:
                    p.due = now + p.interval
                    self.metrics.punctuated(STREAM_TIME)
                    p.callback(now)

    def advance_idle(self, limit: int | None) -> bool:
        """Idle advance (``App(idle_advance_ms=N)``), called while no source of the task has
        input: once none has had any for ``N`` ms of the app's clock, stream time moves on by
        the wall-clock time elapsed since the input stopped (from the stream time then: the
        task's, or after a restart its aggregations' committed one), at most to ``limit``
        (the worker's other tasks' next records, see :mod:`.turns`) and to the clock plus
        ``max_future_ms``. The windowed aggregations close what that closes (suppressed
        results are released) and stream-time punctuators run, as if a record stamped so had
        come; nothing is emitted twice (the task commits it with the aggregations' stream
        time). Whether it produced output."""
        after = self.app.idle_advance_ms
        if after is None:
            return False
        now = self.app.clock()
        if self._quiet_since is None:
            self._quiet_since = now
            times = [t for t in (self._stream_time, *(n.own_stream_time() for n in self.nodes.values()))
                     if t is not None]
            self._quiet_base = max(times) if times else None
            return False
        if self._quiet_base is None or now - self._quiet_since < after:
            return False
        target = self._quiet_base + (now - self._quiet_since)
        if self.app.max_future_ms is not None:
            target = min(target, now + self.app.max_future_ms)
        if limit is not None:
            target = min(target, limit)
        if self._stream_time is not None and target <= self._stream_time:
            return False
        self._stream_time = target
        before = self.output_bytes
        for node in self.nodes.values():
            node.advance_stream_time(target)
        if self._punctuators:
            self._punctuate_stream_time()
        return self.output_bytes > before

    def punctuate_wall_clock(self) -> None:
        now = self.app.clock()
        for p in self._punctuators:
            if p.kind != STREAM_TIME and p.due is not None and now >= p.due:
                p.due = now + p.interval
                self.metrics.punctuated(WALL_CLOCK)
                p.callback(now)

    # -- commit --------------------------------------------------------------------------
    def caches_full(self) -> bool:
        """Whether a store's changes since the last commit fill its cache (commit now)."""
        return any(store.full() for store in self._stores.values())

    def dirty(self) -> bool:
        return bool(self.outputs) or self.records_since_commit > 0 or any(
            r.offset != r.committed for r in self.readers)

    def commit(self, durable: bool) -> None:
        """Output, store changes and input offsets in ONE engine write."""
        for node in self.nodes.values():
            node.flush()
        for window_store in self._windows.values():
            window_store.expire()
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
        self.last_commit = self.app.clock()

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()
