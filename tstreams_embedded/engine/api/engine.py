"""The user-facing engine handle: stream administration and factories for producers,
consumers, subscribers. It works over any :class:`~..protocol.backend.Backend`: the embedded
:class:`~..storage.core.Core` (``ts.open``) or a remote server (``ts.connect``)."""

from __future__ import annotations

import datetime as _dt
import itertools
import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from ... import errors
from ..protocol import ops as O
from ..protocol import schedules as S
from ..protocol.backend import Backend, StreamInfo
from ..protocol.validate import check_interval, check_name, check_partition, check_stream_shape, txn_ttl_ms, utf8
from .batch import Batch
from .consumer import Consumer, Start, Transaction
from .context import GroupMember
from .group import CheckpointGroup
from .keepalive import KeepAlive, KeptAlive
from .producer import Producer, cancel_open_transactions
from .subscriber import Subscriber
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

DEFAULT_TXN_TTL = 60.0
DEFAULT_STREAM_TTL = 86_400


def check_handle_options(txn_ttl: Any, keepalive_interval: Any) -> None:
    """Validate the per-handle options of :class:`Engine` (before anything is opened)."""
    txn_ttl_ms(txn_ttl)
    if keepalive_interval != -1 or isinstance(keepalive_interval, bool):
        check_interval(keepalive_interval, "keepalive_interval", allow_none=True)


class Engine:
    """A handle on a set of streams. Thread-safe. Use as a context manager or call :meth:`close`."""

    def __init__(self, backend: Backend, *, txn_ttl: float = DEFAULT_TXN_TTL, keepalive_interval: float | None = -1,
                 on_close: Callable[[], None] | None = None) -> None:
        check_handle_options(txn_ttl, keepalive_interval)
        self._backend = backend
        self.txn_ttl = txn_ttl
        self._default_ttl_ms = txn_ttl_ms(txn_ttl)
        if keepalive_interval == -1:
            keepalive_interval = max(min(txn_ttl / 10.0, 6.0), 0.05)
        self._keepalive = KeepAlive(backend, keepalive_interval)
        self._producers: weakref.WeakSet[Producer] = weakref.WeakSet()  # cancelled at close
        self._on_close = on_close
        self._closed = False
        self._lock = threading.Lock()
        self._schedule_turns = itertools.count()  # partition=None: round-robin

    def __repr__(self) -> str:
        return f"Engine({self.backend!r})"

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def backend(self) -> Backend:
        """The storage this handle works on: the embedded engine or a remote server."""
        return self._backend

    @property
    def closed(self) -> bool:
        return self._closed or self._backend.closed

    # -- the AgentContext of producers, consumers, batches (see context.py) ----------
    def check_open(self) -> None:
        """Raise :class:`~tstreams_embedded.errors.EngineClosed` if this handle is closed."""
        if self.closed:
            raise errors.EngineClosed("this engine handle is closed")

    def txn_ttl_ms(self, seconds: float | None) -> int:
        """A transaction TTL in milliseconds (this handle's ``txn_ttl`` when ``None``)."""
        return self._default_ttl_ms if seconds is None else txn_ttl_ms(seconds)

    def track_producer(self, producer: KeptAlive) -> None:
        """Keep ``producer``'s open transactions alive while this handle is open."""
        self._keepalive.track(producer)

    def close(self) -> None:
        """Cancel the open transactions of this handle's producers (in one atomic write, so
        that no reader waits for them), stop keep-alives and release the backend. (If the
        process dies instead, open transactions expire after ``txn_ttl``.)"""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._keepalive.stop()
        try:
            if not self._backend.closed:
                cancel_open_transactions(list(self._producers), self._backend)
        except errors.TStreamsError as exc:  # they will expire on their TTL instead
            log.warning("could not cancel open transactions at close: %s", exc)
        if self._on_close is not None:
            self._on_close()
        else:
            self._backend.close()

    # ------------------------------------------------------------------ streams
    def create_stream(self, name: str, partitions: int = 1, ttl: int = DEFAULT_STREAM_TTL,
                      description: str = "") -> StreamInfo:
        """Create a stream. Raises :class:`StreamExists` if the name is taken."""
        self.check_open()
        check_name(name)
        check_stream_shape(partitions, ttl, description)
        wire = self.backend.submit([O.CreateStream(name, partitions, ttl, description)], durable=True)[0]
        return StreamInfo.from_wire(wire)

    def get_stream(self, name: str) -> StreamInfo:
        """A stream's metadata, or :class:`StreamNotFound`."""
        self.check_open()
        return self.backend.get_stream(check_name(name))

    def has_stream(self, name: str) -> bool:
        try:
            self.get_stream(name)
            return True
        except errors.StreamNotFound:
            return False

    def list_streams(self, prefix: str = "", limit: int | None = None) -> list[StreamInfo]:
        """Streams whose name starts with ``prefix``, in name order."""
        self.check_open()
        if isinstance(prefix, str):
            utf8(prefix, "prefix")
        return self.backend.list_streams(prefix, limit)

    def delete_stream(self, name: str) -> None:
        """Delete a stream with all its transactions, data and consumer offsets."""
        self.check_open()
        self.backend.submit([O.DeleteStream(check_name(name))], durable=True)

    # ------------------------------------------------------------------ agents
    def producer(self, stream: str, partition: int | None = None, serializer: Any = None,
                 txn_ttl: float | None = None, batch_size: int = 100, name: str | None = None) -> Producer:
        """A producer on ``stream`` (round-robin over partitions unless ``partition`` is given).

        ``name`` is recorded with each transaction it opens while it is open, for operators
        (``tstreams streams describe``, the console); default ``host:pid/N``. At most 200
        UTF-8 bytes of printable text."""
        self.check_open()
        producer = Producer(self, check_name(stream), partition, serializer, txn_ttl, batch_size, name)
        self._producers.add(producer)
        return producer

    def consumer(self, stream: str, name: str, start: Start = "oldest", partitions: Iterable[int] | None = None,
                 use_last_offset: bool = True, serializer: Any = None, prefetch: int = 256) -> Consumer:
        """A named consumer; its stored offsets win over ``start`` unless ``use_last_offset=False``.

        ``start`` is where a partition without a stored offset begins: ``"oldest"``;
        ``"newest"`` (after the highest ID allocated so far: only transactions opened after
        this call, as in T-streams); a transaction ID (that transaction, then those after
        it); or a datetime T: the transactions whose ID is at or after ``ts.txn_id_at(T)``,
        i.e. those *opened* at or after T. A transaction ID records when its transaction was
        opened, not when it was checkpointed, so one opened before T and checkpointed after
        T is not read. To re-read everything checkpointed since T, step back before the
        transactions open at T (``Backend.first_open_at``), as ``tstreams consumers reset
        --to T`` does."""
        self.check_open()
        check_name(stream)
        check_name(name, "consumer name")
        return Consumer(self, stream, name, start, partitions, use_last_offset, serializer, prefetch)

    def subscribe(self, stream: str, name: str, callback: Callable[[Transaction], Any], start: Start = "newest",
                  partitions: Iterable[int] | None = None, poll_interval: float = 1.0, serializer: Any = None,
                  on_error: Callable[[BaseException], Any] | None = None) -> Subscriber:
        """Start a background subscriber (see :class:`Subscriber`)."""
        self.check_open()
        return Subscriber(self, stream, name, callback, start, partitions, poll_interval, serializer, on_error)

    def checkpoint_group(self, *agents: GroupMember) -> CheckpointGroup:
        """Shorthand for ``ts.CheckpointGroup(*agents)``."""
        return CheckpointGroup(*agents)

    def work_queue(self, stream: str, group: str, *, ack_timeout: float = 30.0, max_deliveries: int = 5,
                   dead_letter: str | None = None, backoff: Iterable[float] = (), max_in_flight: int = 10_000,
                   consumer: str | None = None) -> WorkQueue:
        """Work queue ``group`` of ``stream`` (see :class:`WorkQueue`): competing consumers
        with acknowledgements. Creates the group, or changes its settings."""
        self.check_open()
        return WorkQueue(self, stream, group, ack_timeout=ack_timeout, max_deliveries=max_deliveries,
                         dead_letter=dead_letter, backoff=list(backoff) if not isinstance(backoff, str) else backoff,
                         max_in_flight=max_in_flight, consumer=consumer)

    def batch(self, durable: bool = True) -> Batch:
        """Collect several operations and apply them in one atomic write (see :class:`Batch`)."""
        self.check_open()
        return Batch(self, durable)

    def keep_alive(self) -> int:
        """Refresh this handle's open transactions now (the background thread does it every
        ``keepalive_interval``); return how many are alive."""
        self.check_open()
        return self._keepalive.refresh()

    # ------------------------------------------------------------------ scheduled delivery
    def schedule(self, stream: str, items: Iterable[bytes], *, at: _dt.datetime | None = None,
                 delay: float | None = None, partition: int | None = None) -> int:
        """Write ``items`` (bytes) to ``stream`` as one checkpointed transaction at ``at`` (a
        datetime; naive means UTC) or ``delay`` seconds from now (the engine's clock), on
        ``partition`` (round-robin when None); return the schedule's ID. Durable at return;
        it fires exactly once, at or after its time, across crashes and restarts, unless
        :meth:`cancel_schedule` cancels it first. Until then it is not a transaction of the
        stream: readers do not wait for it. See :mod:`..protocol.schedules` and docs/SCHEDULES.md."""
        self.check_open()
        at_ms, delay_ms = S.due_ms_of(at, delay)
        info = self.get_stream(check_name(stream))
        if isinstance(items, (bytes, str)) or not isinstance(items, Iterable):
            raise errors.InvalidArgument(f"items must be an iterable of bytes, got {type(items).__name__}")
        data = list(items)
        if not data:
            raise errors.InvalidArgument("a schedule needs at least one item")
        if any(type(i) is not bytes for i in data):
            raise errors.InvalidArgument("scheduled items must be bytes (serialize them first)")
        p = next(self._schedule_turns) % info.partitions if partition is None else check_partition(info, partition)
        op = O.Schedule(info.name, p, O.pack_items(data), at_ms=at_ms, delay_ms=delay_ms, stream_id=info.id)
        schedule_id: int = self.backend.submit([op], durable=True)[0]
        return schedule_id

    def cancel_schedule(self, schedule_id: int) -> bool:
        """Cancel a schedule that has not fired: True if it was pending, False if there is no
        such schedule (it fired, was cancelled, or never existed). Atomic with firing: a
        schedule is either cancelled or delivered, never both."""
        self.check_open()
        cancelled: bool = self.backend.submit([O.CancelSchedule(S.check_schedule_id(schedule_id))], durable=True)[0]
        return cancelled

    def schedules(self, stream: str | None = None, limit: int | None = None) -> list[S.ScheduleInfo]:
        """The pending schedules (of ``stream``, or all), earliest due first, up to ``limit``."""
        self.check_open()
        if stream is not None:
            check_name(stream)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise errors.InvalidArgument(f"limit must be None or a non-negative integer, got {limit!r}")
        out: list[S.ScheduleInfo] = []
        start = S.DUE
        while limit is None or len(out) < limit:
            page = self.backend.store_range(S.NAMESPACE, start, S.BY_ID, limit=1000)
            if not page:
                break
            for key, value in page:
                info = S.info_of(key, value)
                if stream is None or info.stream == stream:
                    out.append(info)
            start = page[-1][0] + b"\x00"
        return out if limit is None else out[:limit]

    # ------------------------------------------------------------------ maintenance
    def compact(self) -> dict[str, int]:
        """Delete expired transactions now (also done in the background)."""
        self.check_open()
        return self.backend.compact()

    def stats(self) -> dict[str, Any]:
        self.check_open()
        return self.backend.stats()
