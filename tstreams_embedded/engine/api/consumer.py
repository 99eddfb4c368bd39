"""Consumers: read checkpointed transactions in order and keep named offsets.

A consumer holds, per partition, the ID of the last transaction it processed (its
*position*). ``get_transaction`` returns the next checkpointed transaction after that
position, skipping cancelled, invalid and TTL-expired ones, and returns ``None`` while the
next transaction is still open: a consumer never reads past an open transaction, so no
transaction can appear behind it later. ``checkpoint()`` stores every partition's position
under the consumer's name in one atomic write; a consumer created with the same name resumes
there (unless ``use_last_offset=False``).
"""

from __future__ import annotations

import datetime as _dt
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import errors, serde
from ...ids import ID_MULTIPLIER, txn_id_at, txn_time
from ..protocol import ops as O
from ..protocol.backend import TxnData
from ..protocol.validate import MAX_FETCH, check_int, check_name, check_txn_id
from .context import GroupPart

if TYPE_CHECKING:
    from .context import AgentContext

Start = str | int | _dt.datetime


@dataclass(frozen=True)
class Transaction:
    """A checkpointed transaction as a consumer sees it."""

    stream: str
    partition: int
    id: int
    items: list[Any]

    @property
    def timestamp(self) -> _dt.datetime:
        """When the transaction was opened (UTC)."""
        return txn_time(self.id)

    def __len__(self) -> int:
        return len(self.items)


class Consumer:
    """Reads one stream under a name. Not thread-safe: use one consumer per thread."""

    def __init__(self, engine: AgentContext, stream: str, name: str, start: Start = "oldest",
                 partitions: Iterable[int] | None = None, use_last_offset: bool = True,
                 serializer: Any = None, prefetch: int = 256) -> None:
        self.engine = engine
        backend = engine.backend
        info = backend.get_stream(stream)
        self.stream = info.name
        #: the incarnation of the stream (see :mod:`..protocol.ops`)
        self.stream_id = info.id
        self.ttl_ms = info.ttl * 1000
        self.name = check_name(name, "consumer name")
        # Prefetched transactions are re-checked against the stream TTL when taken. The
        # embedded engine's clock is cheap to ask; a remote one is estimated locally.
        if backend.local_clock:
            self._now_ms: Callable[[], int] = backend.now_ms
        else:
            offset = backend.now_ms() - time.time_ns() // 1_000_000
            self._now_ms = lambda: time.time_ns() // 1_000_000 + offset
        self._loads = serde.resolve(serializer)[1]
        self._raw = self._loads is serde.RAW[1]
        self.prefetch = check_int(prefetch, "prefetch", 1, MAX_FETCH)
        if partitions is None:
            self.partitions = list(range(info.partitions))
        else:
            if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Iterable):
                raise errors.InvalidArgument(
                    f"partitions must be an iterable of partition numbers (e.g. [0, 2]), got {partitions!r:.40}"
                )
            wanted = list(partitions)
            for p in wanted:
                if isinstance(p, bool) or not isinstance(p, int):
                    raise errors.InvalidArgument(f"partition must be an integer, got {p!r}")
            self.partitions = sorted(set(wanted))
            for p in self.partitions:
                if isinstance(p, bool) or not isinstance(p, int):
                    raise errors.InvalidArgument(f"partition must be an integer, got {p!r}")
                if not 0 <= p < info.partitions:
                    raise errors.PartitionOutOfRange(
                        f"partition {p} is out of range for stream {stream!r} with {info.partitions} partitions"
                    )
            if not self.partitions:
                raise errors.InvalidArgument("partitions must not be empty")
        stored = backend.get_offsets(stream, name) if use_last_offset else {}
        self._position: dict[int, int] = {}
        for p in self.partitions:
            self._position[p] = stored[p] if p in stored else self._start_position(p, start)
        self._scanned = dict(self._position)
        self._buffers: dict[int, deque[TxnData]] = {p: deque() for p in self.partitions}
        self._next = 0
        self.committed: dict[int, int] = dict(self._position)

    def __repr__(self) -> str:
        return f"Consumer(stream={self.stream!r}, name={self.name!r})"

    def _start_position(self, partition: int, start: Start) -> int:
        if start == "oldest":
            return 0
        if start == "newest":
            return self.engine.backend.last_txn_id(self.stream, partition)
        if isinstance(start, _dt.datetime):
            return max(txn_id_at(start) - 1, 0)
        if isinstance(start, int) and not isinstance(start, bool) and start >= 0:
            return max(start - 1, 0)
        raise errors.InvalidArgument(
            f"start must be 'oldest', 'newest', a datetime or a transaction id, got {start!r}"
        )

    def _check_partition(self, partition: Any) -> int:
        if partition not in self._position:
            if isinstance(partition, bool) or not isinstance(partition, int):
                raise errors.InvalidArgument(f"partition must be an integer, got {type(partition).__name__}")
            raise errors.PartitionOutOfRange(
                f"partition {partition} is not read by this consumer (partitions {self.partitions})"
            )
        checked: int = partition
        return checked

    def _same_stream(self, stream_id: int | None) -> None:
        """StreamNotFound if a read answered from another incarnation of the stream (it was
        deleted and created again since this consumer was made)."""
        if stream_id is not None and stream_id != self.stream_id:
            raise errors.StreamNotFound(
                f"stream {self.stream!r} (id {self.stream_id}) was deleted; a new stream of that name "
                f"(id {stream_id}) exists: open a new consumer on it"
            )

    def _checked(self, t: TxnData | None) -> Transaction | None:
        """``t`` wrapped, after checking that it was read from this consumer's stream (when
        nothing was found, the stream is looked up: a new stream of the same name has none
        of this consumer's transactions)."""
        if t is None:
            self._same_stream(self.engine.backend.get_stream(self.stream).id)
            return None
        self._same_stream(t.stream_id)
        return self._wrap(t)

    def _wrap(self, t: TxnData) -> Transaction:
        items = t.items if self._raw else [self._loads(i) for i in t.items]
        return Transaction(t.stream, t.partition, t.id, items)

    # ------------------------------------------------------------------ reading
    @property
    def offsets(self) -> dict[int, int]:
        """Current positions: partition -> ID of the last transaction processed (0 = none)."""
        return dict(self._position)

    def get_transaction(self, partition: int | None = None) -> Transaction | None:
        """The next checkpointed transaction of ``partition`` (of any partition, fairly, when
        None), or None if there is none yet or the next one is still open."""
        self.engine.check_open()
        if partition is None:
            n = len(self.partitions)
            for i in range(n):
                p = self.partitions[(self._next + i) % n]
                t = self._take(p)
                if t is not None:
                    self._next = (self._next + i + 1) % n
                    return t
            return None
        return self._take(self._check_partition(partition))

    def _take(self, p: int) -> Transaction | None:
        buf = self._buffers[p]
        if not buf:
            f = self.engine.backend.fetch(self.stream, p, self._position[p], self.prefetch)
            self._same_stream(f.stream_id)
            buf.extend(f.txns)
            self._scanned[p] = f.position
            if not buf:
                self._position[p] = max(self._position[p], f.position)
                return None
        floor = (self._now_ms() - self.ttl_ms) * ID_MULTIPLIER
        while buf and buf[0].id < floor:  # its stream TTL passed after it was prefetched
            self._position[p] = buf.popleft().id
        if not buf:
            return self._take(p)
        t = buf.popleft()
        self._position[p] = t.id if buf else max(t.id, self._scanned[p])
        return self._wrap(t)

    def get_transaction_by_id(self, partition: int, txn_id: int) -> Transaction | None:
        """A checkpointed transaction by ID (does not move the position)."""
        self.engine.check_open()
        t = self.engine.backend.get_transaction(self.stream, self._check_partition(partition), txn_id)
        return self._checked(t)

    def get_transactions_from_to(self, partition: int, from_id: int, to_id: int) -> list[Transaction]:
        """Checkpointed transactions with ``from_id < id <= to_id`` (as in T-streams, which
        scans from ``from_id + 1``), stopping before the first open one (does not move the
        position)."""
        self.engine.check_open()
        p = self._check_partition(partition)
        check_txn_id(from_id, "from_id")
        check_txn_id(to_id, "to_id")
        ts = self.engine.backend.transactions_range(self.stream, p, from_id + 1, to_id) if from_id < to_id else []
        if not ts:
            self._checked(None)
        for t in ts:
            self._same_stream(t.stream_id)
        return [self._wrap(t) for t in ts]

    def get_last_transaction(self, partition: int) -> Transaction | None:
        """The checkpointed transaction with the highest ID (does not move the position)."""
        self.engine.check_open()
        t = self.engine.backend.last_transaction(self.stream, self._check_partition(partition))
        return self._checked(t)

    def set_offset(self, partition: int, txn_id: int) -> None:
        """Move the position: the next transaction read will have an ID > ``txn_id``."""
        self.engine.check_open()
        p = self._check_partition(partition)
        check_txn_id(txn_id, "offset")
        self._position[p] = txn_id
        self._scanned[p] = txn_id
        self._buffers[p].clear()

    # ------------------------------------------------------------------ offsets
    def checkpoint(self) -> None:
        """Store every partition's position atomically and durably under this consumer's name."""
        self.engine.check_open()
        ops, done = self.prepare_group_checkpoint()
        done(self.engine.backend.submit(ops, durable=True))

    def prepare_group_checkpoint(self) -> GroupPart:
        """The record that stores every partition's position, for one group write."""
        positions = dict(self._position)

        def done(results: list[Any]) -> None:
            self.committed = positions

        return [O.SetOffsets(self.stream, self.name, positions, self.stream_id)], done
