"""Producers and their transactions.

A :class:`ProducerTransaction` is opened on one partition, receives items, and ends with
``checkpoint()`` (all items become visible at once, in order) or ``cancel()`` (nothing ever
becomes visible). Items are buffered and flushed to storage in chunks of ``batch_size``
items, so a transaction may be larger than memory.

A transaction is *registered* in storage (its ID allocated, its open record written) lazily:
at its first flush, at its checkpoint, or when ``txn.id`` is first read, whichever comes
first. A transaction that fits in one chunk therefore costs a single atomic commit, and an
opened-but-silent transaction blocks no consumer. Its ID (and timestamp) are those of the
registration; IDs stay strictly increasing per partition, so ordering and exactly-once are
unchanged. Read ``txn.id`` right after opening to register eagerly, as T-streams does.

While a transaction is open, the engine's keep-alive refreshes its deadline every
``keepalive_interval``; if the producer's process dies, it expires after ``txn_ttl``.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ... import errors, serde
from ...policies import Policy
from ..protocol import ops as O
from ..protocol.validate import MAX_PRODUCER_BYTES, check_partition, check_producer_name
from .context import GroupPart

if TYPE_CHECKING:
    from .context import AgentContext

OPEN, CHECKPOINTED, CANCELLED, FAILED = "open", "checkpointed", "cancelled", "failed"
#: transient state while a CheckpointGroup (or a CheckpointIfOpened policy) writes the transaction
CLOSING = "closing"
#: errors after which a transaction is finished in storage (expired, deleted, already finished)
TXN_GONE = (errors.TransactionExpired, errors.TransactionFinished, errors.TransactionNotFound,
            errors.StreamNotFound)
FLUSH_BYTES = 1 << 20


class ProducerTransaction:
    """An open transaction of a :class:`Producer`.

    Safe to share between threads: ``send``, ``send_many``, ``flush``, ``checkpoint``,
    ``cancel`` and the registration (``id``) run one at a time under the transaction's lock
    (a lock costs nothing next to a commit), so no item is lost or written twice. Items sent
    by several threads appear in the order the calls took the lock. While a CheckpointGroup
    writes the transaction, ``send`` raises :class:`TransactionFinished` instead of adding an
    item that the group's write would miss."""

    __slots__ = ("producer", "partition", "_lock", "_id", "state", "_buffer", "_buffered_bytes", "count",
                 "_engine", "__weakref__")

    def __init__(self, producer: Producer, partition: int) -> None:
        self.producer = producer
        self._engine = producer.engine
        self.partition = partition
        self._lock = threading.RLock()
        self._id: int | None = None
        self.state = OPEN
        self._buffer: list[bytes] = []
        self._buffered_bytes = 0
        self.count = 0

    def __repr__(self) -> str:
        return f"ProducerTransaction(stream={self.producer.stream!r}, partition={self.partition}, id={self._id}, " \
               f"state={self.state})"

    @property
    def id(self) -> int:
        """The transaction ID (registers the transaction in storage if it is not yet)."""
        if self._id is None:
            with self._lock:
                if self._id is None:
                    self._check_open()
                    self._register(None)
        assert self._id is not None
        return self._id

    @property
    def registered(self) -> bool:
        """Whether the transaction exists in storage yet (see the module docstring)."""
        return self._id is not None

    @property
    def is_open(self) -> bool:
        return self.state == OPEN

    def _check_open(self) -> None:
        self.producer.engine.check_open()
        if self.state == CLOSING:
            raise errors.TransactionFinished(f"transaction {self._id} is being checkpointed by a CheckpointGroup")
        if self.state != OPEN:
            raise errors.TransactionFinished(f"transaction {self._id} is {self.state}; open a new one")

    def _register(self, chunk: bytes | None) -> None:
        p = self.producer
        self._id = self._run([O.Open(p.stream, self.partition, p.txn_ttl_ms, chunk=chunk, stream_id=p.stream_id,
                                     producer=p.name)], durable=False)[0]
        p.engine.track_producer(p)

    def send(self, item: Any) -> None:
        """Add one item (serialized with the producer's serializer)."""
        # the per-item path: one lock, the same checks as everywhere, as few lookups as can be
        producer = self.producer
        data = item if producer.raw and type(item) is bytes else producer.dumps(item)
        size = len(data)
        with self._lock:
            if self.state is not OPEN or self._engine.closed:
                self._check_open()
            if size > producer.max_item_size:
                raise errors.ItemTooLarge(f"item of {size} bytes exceeds max_item_size={producer.max_item_size}")
            buffer = self._buffer
            buffered = self._buffered_bytes + size
            if len(buffer) >= producer.batch_size or buffered > FLUSH_BYTES:
                self._flush()
                buffer = self._buffer
                buffered = size
            buffer.append(data)
            self._buffered_bytes = buffered
            self.count += 1

    def send_many(self, items: Iterable[Any]) -> None:
        """Add several items, in order. All are validated before any is buffered."""
        self._check_open()
        batch = self.producer.serialize(items)
        with self._lock:
            self._check_open()
            for data in batch:
                if len(self._buffer) >= self.producer.batch_size or self._buffered_bytes + len(data) > FLUSH_BYTES:
                    self.flush()
                self._buffer.append(data)
                self._buffered_bytes += len(data)
            self.count += len(batch)

    def flush(self) -> None:
        """Write buffered items to storage (still invisible until checkpoint)."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        self._check_open()
        if not self._buffer:
            return
        chunk = O.pack_items(self._buffer)
        if self._id is None:
            self._register(chunk)
        else:
            p = self.producer
            self._run([O.Data(p.stream, self.partition, self._id, chunk, p.stream_id)], durable=False)
        self._buffer.clear()
        self._buffered_bytes = 0

    def _final_op(self) -> O.Instant | O.Checkpoint | None:
        """The record that checkpoints this transaction (None: nothing to write)."""
        chunk = O.pack_items(self._buffer) if self._buffer else None
        p = self.producer
        if self._id is None:
            return None if chunk is None else O.Instant(p.stream, self.partition, chunk, stream_id=p.stream_id)
        return O.Checkpoint(p.stream, self.partition, self._id, chunk, p.stream_id)

    def _checkpointed(self, result: Any) -> None:
        """Record the outcome of :meth:`_final_op` (an INSTANT returns the new ID)."""
        with self._lock:
            if self._id is None and result is not None:
                self._id = result
            self._finished(CHECKPOINTED if self._id is not None else CANCELLED)

    # -- a checkpoint written by someone else (CheckpointGroup, CheckpointIfOpened) --
    def _begin_final(self) -> O.Instant | O.Checkpoint | None:
        """The record that checkpoints this transaction; until :meth:`_checkpointed` or
        :meth:`_abort_final`, the transaction is ``closing`` (``send`` raises)."""
        with self._lock:
            self._check_open()
            op = self._final_op()
            self.state = CLOSING
            return op

    def _abort_final(self) -> None:
        """The write of :meth:`_begin_final`'s record failed: the transaction is open again."""
        with self._lock:
            if self.state == CLOSING:
                self.state = OPEN

    def checkpoint(self) -> None:
        """Make every item visible atomically (durably in ``sync`` mode). Checkpointing an
        empty transaction cancels it. Raises :class:`TransactionExpired` if it expired."""
        with self._lock:
            self._check_open()
            op = self._final_op()
            result = self._run([op], durable=True)[0] if op is not None else None
            self._checkpointed(result)

    def cancel(self) -> None:
        """Discard the transaction; none of its items will ever be visible."""
        with self._lock:
            self._check_open()
            if self._id is not None:
                p = self.producer
                self._run([O.CancelIfOpen(p.stream, self.partition, self._id, p.stream_id)], durable=False)
            self._finished(CANCELLED)

    def _run(self, batch: list[O.Operation], durable: bool) -> list[Any]:
        try:
            return self.producer.engine.backend.submit(batch, durable=durable)
        except TXN_GONE:
            self._finished(FAILED)
            raise

    def _finished(self, state: str) -> None:
        self.state = state
        self._buffer = []
        self._buffered_bytes = 0
        self.producer.forget(self)

    def __enter__(self) -> ProducerTransaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self.state != OPEN:
            return
        if exc_type is None:
            self.checkpoint()
        else:
            try:
                self.cancel()
            except errors.TStreamsError:
                pass  # the original exception matters more


def default_producer_name() -> str:
    """``host:pid/N``: this process's host and ID, and the producer's number in the process
    (so that two producers of one process are told apart)."""
    return f"{_HOST}:{os.getpid()}/{next(_PRODUCER_NUMBERS)}"


_HOST = socket.gethostname()[:MAX_PRODUCER_BYTES // 2] or "localhost"
_PRODUCER_NUMBERS = itertools.count(1)


class Producer:
    """Writes transactions to one stream. Thread-safe, and so are its transactions.

    ``name`` identifies the producer to operators: every transaction it opens records it
    while open (``tstreams streams describe``, the console's "waits on open transaction"),
    for display only. Default: :func:`default_producer_name` (``host:pid/N``). At most
    :data:`~..protocol.validate.MAX_PRODUCER_BYTES` UTF-8 bytes of printable text, else
    :class:`~tstreams_embedded.errors.InvalidArgument`."""

    def __init__(self, engine: AgentContext, stream: str, partition: int | None = None, serializer: Any = None,
                 txn_ttl: float | None = None, batch_size: int = 100, name: str | None = None) -> None:
        if name is None:
            name = default_producer_name()
        check_producer_name(name)
        #: who this producer is, as recorded with its open transactions (display only)
        self.name = name
        self.engine = engine
        info = engine.backend.get_stream(stream)
        self.info = info
        self.stream = info.name
        #: the incarnation of the stream (every record carries it: see :mod:`..protocol.ops`)
        self.stream_id = info.id
        self.partitions = info.partitions
        if partition is not None:
            self._check_partition(partition)
        self.default_partition = partition
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise errors.InvalidArgument(f"batch_size must be a positive integer, got {batch_size!r}")
        self.batch_size = batch_size
        self.txn_ttl_ms = engine.txn_ttl_ms(txn_ttl)
        self.dumps, _ = serde.resolve(serializer)
        #: True when items are sent as raw ``bytes`` (no serializer)
        self.raw = self.dumps is serde.RAW[0]
        self.max_item_size = engine.backend.max_item_size
        self._rr = itertools.cycle(range(info.partitions))
        self._lock = threading.Lock()
        self._open: dict[int, list[ProducerTransaction]] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"Producer(stream={self.stream!r}, name={self.name!r})"

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed or self.engine.closed

    def _check_usable(self) -> None:
        self.engine.check_open()
        if self._closed:
            raise errors.EngineClosed(f"this producer on {self.stream!r} is closed")

    def close(self) -> None:
        """Cancel this producer's open transactions, all in one atomic write, so that no
        reader waits for them; then refuse new transactions. Idempotent. (A producer whose
        process dies leaves them to expire after ``txn_ttl`` instead.)"""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if not self.engine.closed:
            cancel_open_transactions([self], self.engine.backend)

    def serialize(self, items: Iterable[Any]) -> list[bytes]:
        """Serialize and validate a batch of items (fast path for raw bytes)."""
        if type(items) is not list and type(items) is not tuple:  # the common cases skip the ABC check
            if isinstance(items, (bytes, str)):
                raise errors.InvalidArgument("items must be an iterable of items, not a single bytes/str value")
            if not isinstance(items, Iterable):
                raise errors.InvalidArgument(f"items must be an iterable of items, got {type(items).__name__}")
        if self.raw:
            data = list(items)
            if data and set(map(type, data)) != {bytes}:
                data = [self.dumps(i) for i in data]
        else:
            data = [self.dumps(i) for i in items]
        if data:
            biggest = max(map(len, data))
            if biggest > self.max_item_size:
                raise errors.ItemTooLarge(f"item of {biggest} bytes exceeds max_item_size={self.max_item_size}")
        return data

    def _check_partition(self, partition: Any) -> int:
        return check_partition(self.info, partition)

    def _choose(self, partition: int | None) -> int:
        if partition is None:
            partition = self.default_partition
        if partition is None:
            with self._lock:
                return next(self._rr)
        return self._check_partition(partition)

    def new_transaction(self, partition: int | None = None, policy: Policy = Policy.EnqueueIfOpened
                        ) -> ProducerTransaction:
        """Open a transaction on ``partition`` (round-robin when None), applying ``policy``
        to this producer's transactions already open there, in the same atomic write."""
        self._check_usable()
        if not isinstance(policy, Policy):
            raise errors.InvalidArgument(f"policy must be a tstreams_embedded.Policy, got {policy!r}")
        p = self._choose(partition)
        with self._lock:
            previous = list(self._open.get(p, ()))
        if previous and policy is Policy.ErrorIfOpened:
            raise errors.TransactionAlreadyOpened(
                f"producer on {self.stream!r} already has transaction {previous[0]._id} open on partition {p}"
            )
        if previous and policy is Policy.CheckpointIfOpened:
            ops, done = self._prepare_checkpoint(previous)
            try:
                results = self.engine.backend.submit(ops, durable=True) if ops else []
            except BaseException as exc:
                self.group_checkpoint_failed(exc)
                raise
            done(results)
        elif previous and policy is Policy.CancelIfOpened:
            cancels = [O.CancelIfOpen(self.stream, p, t._id, self.stream_id) for t in previous if t._id is not None]
            if cancels:
                self.engine.backend.submit(cancels, durable=False)
            for t in previous:
                t._finished(CANCELLED)
        txn = ProducerTransaction(self, p)
        with self._lock:
            self._open.setdefault(p, []).append(txn)
        return txn

    @contextmanager
    def transaction(self, partition: int | None = None, policy: Policy = Policy.EnqueueIfOpened
                    ) -> Iterator[ProducerTransaction]:
        """``with producer.transaction() as txn:`` checkpoints on exit, cancels on exception."""
        txn = self.new_transaction(partition, policy)
        with txn:
            yield txn

    def instant(self, items: Iterable[Any], partition: int | None = None) -> int:
        """Open, fill and checkpoint a transaction in one atomic, durable step; return its ID."""
        self._check_usable()
        data = self.serialize(items)
        if not data:
            raise errors.InvalidArgument("an instant transaction needs at least one item")
        p = self._choose(partition)
        op = O.Instant(self.stream, p, O.pack_items(data), stream_id=self.stream_id)
        txn_id: int = self.engine.backend.submit([op], durable=True)[0]
        return txn_id

    def open_transactions(self) -> list[ProducerTransaction]:
        """This producer's transactions that are still open, in the order they were opened."""
        with self._lock:
            return [t for ts in self._open.values() for t in ts]

    def checkpoint(self) -> None:
        """Checkpoint every open transaction of this producer (one by one; use a
        :class:`CheckpointGroup` for one atomic write)."""
        for t in self.open_transactions():
            t.checkpoint()

    def cancel(self) -> None:
        """Cancel every open transaction of this producer."""
        for t in self.open_transactions():
            t.cancel()

    def forget(self, txn: ProducerTransaction) -> None:
        """Stop tracking ``txn`` (called by the transaction once it is finished)."""
        with self._lock:
            lst = self._open.get(txn.partition)
            if lst and txn in lst:
                lst.remove(txn)
                if not lst:
                    del self._open[txn.partition]

    # -- CheckpointGroup member ----------------------------------------------------
    def prepare_group_checkpoint(self) -> GroupPart:
        """The records that checkpoint every open transaction, for one group write. The
        transactions are ``closing`` until the callback runs or
        :meth:`group_checkpoint_failed` is called."""
        return self._prepare_checkpoint(self.open_transactions())

    def _prepare_checkpoint(self, txns: list[ProducerTransaction]) -> GroupPart:
        for t in txns:
            t._check_open()
        finals: list[tuple[ProducerTransaction, O.Instant | O.Checkpoint | None]] = []
        try:
            for t in txns:
                finals.append((t, t._begin_final()))
        except BaseException:
            for t, _ in finals:
                t._abort_final()
            raise

        def done(results: list[Any]) -> None:
            it = iter(results)
            for t, op in finals:
                t._checkpointed(next(it) if op is not None else None)

        return [op for _, op in finals if op is not None], done

    def group_checkpoint_failed(self, exc: BaseException) -> None:
        """A group write with this producer's transactions failed (nothing of it was
        written): they are open again, except those that are finished in storage (expired,
        or their stream deleted), which are marked failed as a plain ``checkpoint()`` does,
        so that the next group checkpoint works."""
        with self._lock:
            txns = [t for ts in self._open.values() for t in ts]
        for t in txns:
            t._abort_final()
        if not isinstance(exc, TXN_GONE):
            return
        probe = [t for t in txns if t.registered and t.is_open]
        if not probe:
            return
        ops = [O.KeepAlive([[self.stream, t.partition, t.id, self.stream_id]], self.txn_ttl_ms) for t in probe]
        try:
            alive = self.engine.backend.submit(ops, durable=False)
        except errors.TStreamsError:
            return  # cannot tell now: they stay open (a later checkpoint says what happened)
        for t, n in zip(probe, alive, strict=True):
            if not n:
                with t._lock:
                    if t.state == OPEN:
                        t._finished(FAILED)


def cancel_open_transactions(producers: Iterable[Producer], backend: Any) -> int:
    """Cancel every open transaction of ``producers`` in ONE atomic write (a clean close:
    readers never wait for them); return how many were registered in storage. Transactions
    being written by a CheckpointGroup are left to it. If the write fails because a stream
    was deleted, the others are cancelled one by one."""
    txns: list[tuple[Producer, ProducerTransaction]] = []
    for p in producers:
        for t in p.open_transactions():
            with t._lock:
                if t.state == OPEN:
                    t.state = CLOSING  # no send/checkpoint slips in between
                    txns.append((p, t))
    ops = [O.CancelIfOpen(p.stream, t.partition, t._id, p.stream_id) for p, t in txns if t._id is not None]
    try:
        if ops:
            try:
                backend.submit(ops, durable=False)
            except errors.EngineClosed:
                raise
            except errors.TStreamsError:
                for op in ops:
                    try:
                        backend.submit([op], durable=False)
                    except errors.EngineClosed:
                        raise
                    except errors.TStreamsError:
                        pass  # its stream is gone: nothing left to cancel
    finally:
        for _, t in txns:
            with t._lock:
                t._finished(CANCELLED)
    return len(ops)
