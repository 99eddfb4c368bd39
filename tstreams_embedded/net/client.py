"""``RemoteBackend``: the :class:`~tstreams_embedded.engine.protocol.backend.Backend` protocol over ZeroMQ.

``Engine(RemoteBackend("tcp://host:7000"))`` (what :func:`tstreams_embedded.net.connect`
returns) has the same public API as an embedded engine: producers, transactions, consumers,
subscribers and checkpoint groups run unchanged, and server-side errors are re-raised as
the same exception classes with the same messages.

Pipelining: a non-durable ``submit`` consisting only of ``DATA`` operations (a
transaction's buffered items being flushed) is sent without waiting for its reply and
returns ``[None, ...]``. Before any later write touching the same transaction is sent, the
client waits for those replies and raises the first error instead of sending — so a
transaction is never checkpointed with a chunk missing. The server applies one client's
writes in the order sent. At most :data:`PIPELINE_WINDOW` bytes of them are in flight:
past it the client waits for the oldest replies, so it stays within the server's
per-client budget. Any other request answered ``ServerBusy`` (not executed: the server is
over its memory budget) is sent again after :data:`BUSY_BACKOFF` until its timeout.

Reads and long polls are retried transparently after a reconnection; a write whose
connection dropped while it was in flight raises :class:`RemoteError` (its outcome is
unknown — use a ``SET_MARKER`` guard or a CheckpointGroup to make retries exactly-once).

**Cluster nodes** (``server_info`` carries ``cluster``; e.g. a ``tcp://`` address of HAProxy
in front of a cluster, docs/CLUSTER.md): every ``submit`` carries this client's ID and a
sequence number, which the cluster keeps in its replicated deduplication window, so a
write whose outcome is unknown (connection lost, no reply, ``NotLeader``,
``ClusterUnavailable``) is sent again with the same ``(client_id, seq)`` until ``timeout``
and applied once. Reads are retried the same way once the client knows the server is a
cluster node (after its first write, or any ``server_info``). Writes are not pipelined then.

The read methods are made by :func:`_remote` from their declarations in
:class:`~tstreams_embedded.engine.protocol.backend.Backend`: each calls the server method of the
same name (:mod:`~tstreams_embedded.net.handlers`) and decodes the reply.
"""

from __future__ import annotations

import inspect
import itertools
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import msgpack
import zmq

from .. import errors
from ..engine.protocol import ops as O
from ..engine.protocol.backend import (
    Backend,
    BackupCopy,
    ConsumerInfo,
    Fetched,
    IndexScan,
    PartitionInfo,
    QueueStatus,
    StoreScan,
    StreamInfo,
    TxnData,
)
from ..engine.protocol.validate import check_wait
from . import framing
from .connection import Connection, Transport
from .future import Future

_BLOB = msgpack.ExtType


#: Errors after which a request to a cluster node is sent again: its outcome is unknown or
#: it was refused by a node that does not lead (any more).
FAILOVER_RETRYABLE = (errors.NotLeader, errors.ClusterUnavailable, errors.RemoteError)
FAILOVER_BACKOFF = 0.05  # seconds between two attempts
#: Bytes of pipelined ``DATA`` a client keeps in flight at most: past it, it waits for the
#: oldest replies before sending more, so a fast producer stays well within the server's
#: per-client budget (``--max-client-bytes``, 64 MiB by default) and is never refused.
PIPELINE_WINDOW = 16 * 1024 * 1024
#: Seconds between two attempts of a request answered ``ServerBusy`` (not executed).
BUSY_BACKOFF = 0.05
#: Requests up to this many bytes are sent without checking the server's size limits; a
#: larger one is checked first against them (asked once per connection, ``server_stats``,
#: then known), so a request the server would refuse raises
#: :class:`~tstreams_embedded.errors.RequestTooLarge` unsent, instead of being dropped by
#: ZeroMQ with the connection (``--max-msg-size``; a server set below this size can still drop a
#: smaller request that way, before the limits are known).
CHECKED_REQUEST = 4 << 10
#: Bytes of a request beyond its ``[body, *blobs]``: the header frame (with some margin).
HEADER_BYTES = 64


def encode_submit(ops: Sequence[O.Operation], durable: bool, client_id: str | None = None,
                  seq: int = 0) -> list[Any]:
    """``[body, *blobs]`` for ``submit(ops, durable[, client_id, seq])``: each record as
    ``[opcode, *fields]`` (:func:`.ops.encode`), every bytes-like field (item chunks) of
    :data:`.framing.BLOB_MIN` bytes or more as its own frame (smaller ones inline). The
    batch is checked as a client batch first, so a bad one fails here with the server's
    message. ``client_id``/``seq`` make it idempotent on a cluster node."""
    blobs: list[Any] = []
    wire: list[Any] = []
    blob_min = framing.BLOB_MIN
    for op in O.check_client_batch(ops):
        row = O.encode(op)
        for j in range(1, len(row)):
            v = row[j]
            if isinstance(v, (bytes, bytearray, memoryview)) and len(v) >= blob_min:
                row[j] = _BLOB(framing.BLOB, len(blobs).to_bytes(4, "big"))
                blobs.append(v)
        wire.append(row)
    try:
        body = framing.pack([wire, durable] if client_id is None else [wire, durable, client_id, seq])
    except (TypeError, ValueError, OverflowError) as e:
        raise errors.InvalidArgument(f"operations cannot be encoded: {e}") from None
    return [body, *blobs]


def _curve_from_dir(curve_dir: str, name: str) -> tuple[bytes, bytes, bytes]:
    from .auth import load_client_curve

    return load_client_curve(curve_dir, name)


P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def _remote(declared: Callable[Concatenate[Any, P], R],
            decode: Callable[[Any], R]) -> Callable[Concatenate[RemoteBackend, P], R]:
    """A method of :class:`RemoteBackend` with the signature of the Backend method
    ``declared``: it calls the server method of the same name with every argument
    (defaults filled in) and returns the reply through ``decode``. Reads are safe to retry."""
    name = declared.__name__
    sig = inspect.signature(declared)
    params = list(sig.parameters.values())[1:]  # after self
    lo = sum(1 for p in params if p.default is p.empty)
    hi = len(params)
    defaults = tuple(p.default for p in params[lo:])

    def method(self: RemoteBackend, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if kwargs or not lo <= len(args) <= hi:
            bound = sig.bind(self, *args, **kwargs)  # a TypeError for a bad call, as usual
            bound.apply_defaults()
            full = tuple(bound.arguments.values())[1:]
        else:
            full = args + defaults[len(args) - lo :]
        return decode(self._call(name, *full))

    method.__name__ = method.__qualname__ = name
    method.__doc__ = declared.__doc__
    return method


def _as_is(value: Any) -> Any:
    return value


def _each(decode: Callable[[Any], T]) -> Callable[[Any], list[T]]:
    return lambda values: [decode(v) for v in values]


def _pairs(value: Any) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in value]


class RemoteBackend:
    """A Backend served by ``tstreams serve`` at ``endpoint`` (or a list of endpoints).

    ``timeout`` bounds every request (seconds). CURVE: pass ``curve_dir`` (made by
    ``tstreams keys generate``; ``curve_client`` names the client keypair in it) or the
    three Z85 keys ``server_public_key``, ``client_public_key`` and ``client_secret_key``.
    """

    #: ``now_ms()`` is a round trip; consumers estimate the server clock locally instead.
    local_clock = False


    def __init__(
        self,
        endpoint: str | Sequence[str],
        timeout: float = 30.0,
        heartbeat: float = 2.0,
        *,
        curve_dir: str | os.PathLike[str] | None = None,
        curve_client: str = "client",
        server_public_key: bytes | str | None = None,
        client_public_key: bytes | str | None = None,
        client_secret_key: bytes | str | None = None,
        pipeline_data: bool = True,
        context: zmq.Context[Any] | None = None,
        failover_retries: bool = True,
        transport: Callable[..., Transport] = Connection,
    ) -> None:
        """``failover_retries``: on a cluster node, send requests again after a failover (see
        the module docstring); the cluster client (``zk://``) turns it off, as it retries
        on the next leader itself. ``transport`` makes the connection (called as
        :class:`~.connection.Connection`): :mod:`tstreams_embedded.aio` passes its
        ``zmq.asyncio`` one, so the same request logic runs on an event loop."""
        curve: tuple[bytes, bytes, bytes] | None = None
        if curve_dir is not None:
            curve = _curve_from_dir(os.fspath(curve_dir), curve_client)
        elif server_public_key is not None:
            if client_public_key is None or client_secret_key is None:
                raise errors.InvalidArgument("CURVE needs server_public_key, client_public_key and client_secret_key")
            server_pub, client_pub, client_sec = (k.encode() if isinstance(k, str) else bytes(k)
                                                  for k in (server_public_key, client_public_key, client_secret_key))
            curve = (server_pub, client_pub, client_sec)
        self.endpoint = endpoint
        self.timeout = timeout
        self.pipeline_data = pipeline_data
        self._conn: Transport = transport(endpoint, timeout=timeout, heartbeat=heartbeat, curve=curve,
                                          context=context)
        self._lock = threading.Lock()
        self._inflight: dict[tuple[Any, ...], list[Future]] = {}  # pipelined DATA per (stream, partition, txn)
        self._window: deque[tuple[Future, int]] = deque()  # pipelined DATA in flight, oldest first, with sizes
        self._window_bytes = 0
        self._info: dict[str, Any] | None = None
        self._size_limits: tuple[int, int] | None = None  # the server's (max request, max frame)
        self._closed = False
        self.failover_retries = bool(failover_retries)
        self.client_id = uuid.uuid4().hex  # with a sequence number in every submit to a cluster node
        self._seq = itertools.count(1)

    def __repr__(self) -> str:
        return f"RemoteBackend({self.endpoint!r})"

    # ------------------------------------------------------------------ plumbing
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connection(self) -> Transport:
        return self._conn

    def _check(self) -> None:
        if self._closed:
            raise errors.EngineClosed(f"remote backend {self.endpoint!r} is closed")

    def _call(self, method: str, *args: Any, retry_safe: bool = True, timeout: float | None = None) -> Any:
        self._check()
        try:
            body = framing.encode_args(args)
        except (TypeError, ValueError, OverflowError) as e:
            raise errors.InvalidArgument(f"{method}: arguments cannot be encoded: {e}") from None
        t = self.timeout if timeout is None else timeout
        if retry_safe and self._info is not None and self.cluster_node:  # (known once server_info was asked)
            return self._again_after_failover(lambda left: self._conn.call_frames(method, body, left, True), t)
        return self._again_while_busy(lambda left: self._conn.call_frames(method, body, left, retry_safe), t)

    def _again_while_busy(self, attempt: Callable[[float], T], timeout: float) -> T:
        """``attempt(seconds left)`` again while the server answers ``ServerBusy`` (the request
        was not executed: the server is over a memory budget), until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return attempt(max(deadline - time.monotonic(), 0.1))
            except errors.ServerBusy:
                if self._closed or time.monotonic() + BUSY_BACKOFF >= deadline:
                    raise
            self._conn.pause(BUSY_BACKOFF)  # a back-off between attempts, not a synchronisation

    def _again_after_failover(self, attempt: Callable[[float], T], timeout: float) -> T:
        """``attempt(seconds left)`` until it succeeds, a non-retryable error, or ``timeout``
        (then :class:`~tstreams_embedded.errors.ClusterUnavailable` saying no node led,
        with the last error)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                return attempt(max(left, 0.1))
            except FAILOVER_RETRYABLE as exc:
                if self._closed:
                    raise
                if time.monotonic() + FAILOVER_BACKOFF >= deadline:
                    raise errors.ClusterUnavailable(
                        f"no cluster node at {self.endpoint} served the request as leader within {timeout:g} s: "
                        f"the cluster has no leader (an election, or ZooKeeper unavailable) or it cannot be "
                        f"reached; last error: {type(exc).__name__}: {exc}") from exc
            self._conn.pause(FAILOVER_BACKOFF)  # a back-off between attempts, not a synchronisation

    def server_info(self) -> dict[str, Any]:
        """The server's ``pid``, ``durability``, ``max_item_size`` and method list (cached);
        a cluster node adds ``cluster`` (its cluster's address) and ``node``."""
        if self._info is None:
            self._info = self._call("server_info")
        return self._info

    @property
    def cluster_node(self) -> bool:
        """Whether requests are retried across failover: the server is a cluster node and
        ``failover_retries`` is on."""
        return self.failover_retries and bool(self.server_info().get("cluster"))

    def _limits(self) -> tuple[int, int]:
        """The server's ``(max_request_bytes, max_msg_size)`` (cached)."""
        if self._size_limits is None:
            st = self._call("server_stats")
            self._size_limits = (int(st["max_request_bytes"]), int(st["max_msg_size"]))
        return self._size_limits

    def check_request_size(self, frames: list[Any]) -> None:
        """Raise :class:`~tstreams_embedded.errors.RequestTooLarge` for a request the server
        would refuse (not sent: nothing executed)."""
        total = sum(len(f) for f in frames) + HEADER_BYTES
        if total <= CHECKED_REQUEST and self._size_limits is None:
            return
        max_request, max_message = self._limits()
        if total > max_request:
            what = f"request of {total} bytes exceeds the server's max request size ({max_request} bytes)"
        elif len(self._conn.endpoints) > 1 and 0 <= max_message < total:  # sent whole: see Connection._messages
            what = (f"request of {total} bytes exceeds the server's max message size ({max_message} bytes), and "
                    "with several endpoints on one connection requests travel whole, not in pieces (connect to "
                    "one endpoint, or raise the servers' --max-msg-size)")
        else:
            return
        raise errors.RequestTooLarge(f"{what}; not sent: write fewer or smaller items per call "
                                     "(a transaction sends its items in chunks of 1 MiB)")

    @property
    def max_item_size(self) -> int:
        return int(self.server_info()["max_item_size"])

    @property
    def durability(self) -> str:
        return str(self.server_info()["durability"])

    def server_stats(self) -> dict[str, Any]:
        """Network counters of the server process that answers."""
        stats: dict[str, Any] = self._call("server_stats")
        return stats

    def ping(self) -> float:
        """Round-trip one request; return the seconds it took."""
        t = time.perf_counter()
        self._call("ping")
        return time.perf_counter() - t

    # ------------------------------------------------------------------ writes
    def submit(self, ops: Sequence[O.Operation], durable: bool = True) -> list[Any]:
        """Apply ``ops`` atomically on the server; see the module docstring for pipelining."""
        self._check()
        if not isinstance(durable, bool):
            durable = bool(durable)
        if self.cluster_node:
            return self._submit_once(ops, durable)
        body = encode_submit(ops, durable)
        if not ops:
            return []
        self.check_request_size(body)
        keys = [k for k in map(O.txn_address, ops) if k is not None]
        if self.pipeline_data and not durable and all(type(op) is O.Data for op in ops):
            fut = self._conn.request("submit", body, self.timeout, retry_safe=False)
            with self._lock:
                for k in keys:
                    lst = self._inflight.setdefault(k, [])
                    lst[:] = [f for f in lst if not f.done() or f.exception() is not None]
                    lst.append(fut)
                self._window.append((fut, sum(len(b) for b in body)))
                self._window_bytes += self._window[-1][1]
            self._within_window()
            return [None] * len(ops)
        self._barrier(keys)
        # a write answered ServerBusy was not executed, and this caller's earlier DATA were
        # answered (the barrier), so sending it again keeps its transaction's order
        results: list[Any] = self._again_while_busy(
            lambda left: self._conn.call_frames("submit", body, left, retry_safe=False), self.timeout)
        return results

    def _within_window(self) -> None:
        """Wait for the oldest pipelined DATA while more than :data:`PIPELINE_WINDOW` bytes
        of them are in flight (their errors are raised by :meth:`_barrier`)."""
        while True:
            with self._lock:
                while self._window and self._window[0][0].done():
                    self._window_bytes -= self._window.popleft()[1]
                if self._window_bytes <= PIPELINE_WINDOW:
                    return
                oldest = self._window[0][0]
            try:
                self._conn.wait(oldest, self.timeout + 5.0)
            except Exception:  # noqa: BLE001 - its error is read from the future by _barrier
                pass
            if not oldest.done():
                return  # (the connection's deadline ends it; do not spin)

    def _submit_once(self, ops: Sequence[O.Operation], durable: bool) -> list[Any]:
        """A submit to a cluster node: with ``(client_id, seq)``, sent again while its outcome
        is unknown; the cluster applies it once and answers a repeat with the first outcome."""
        body = encode_submit(ops, durable, self.client_id, next(self._seq))
        if not ops:
            return []
        self.check_request_size(body)
        self._barrier([k for k in map(O.txn_address, ops) if k is not None])

        def attempt(left: float) -> list[Any]:
            results: list[Any] = self._conn.call_frames("submit", body, left, retry_safe=False)
            return results

        return self._again_after_failover(attempt, self.timeout)

    def submit_async(self, ops: Sequence[O.Operation], durable: bool = True) -> Future:
        """Send a submit without waiting; the returned future gives its results (or error)."""
        self._check()
        body = encode_submit(ops, bool(durable))
        self.check_request_size(body)
        return self._conn.request("submit", body, self.timeout, retry_safe=False)

    def _barrier(self, keys: list[tuple[Any, ...]]) -> None:
        """Wait for pipelined DATA of these transactions; raise the first failure."""
        if not self._inflight or not keys:
            return
        with self._lock:
            waits = [f for k in keys for f in self._inflight.pop(k, ())]
        first: BaseException | None = None
        for f in waits:
            if not f.done():
                try:  # take the receiver role if free rather than wait for a hand-off
                    self._conn.wait(f, self.timeout + 5.0)
                except Exception:  # noqa: BLE001 - its error is read from the future below
                    pass
            if first is None and f.done() and f.exception() is not None:
                first = f.exception()
        if first is not None:
            raise first

    # ------------------------------------------------------------------ metadata and reads
    # method = _remote(its declaration, the decoder of its reply)
    get_stream = _remote(Backend.get_stream, StreamInfo.from_wire)
    list_streams = _remote(Backend.list_streams, _each(StreamInfo.from_wire))
    scan_index = _remote(Backend.scan_index, IndexScan.from_wire)
    last_txn_id = _remote(Backend.last_txn_id, _as_is)
    get_offsets = _remote(Backend.get_offsets, _as_is)
    get_marker = _remote(Backend.get_marker, _as_is)
    list_consumers = _remote(Backend.list_consumers, _each(ConsumerInfo.from_wire))
    describe_partitions = _remote(Backend.describe_partitions, _each(PartitionInfo.from_wire))
    queue_status = _remote(Backend.queue_status, QueueStatus.from_wire)
    backup_begin = _remote(Backend.backup_begin, BackupCopy.from_wire)
    backup_read = _remote(Backend.backup_read, bytes)
    backup_end = _remote(Backend.backup_end, lambda reply: None)
    first_open_at = _remote(Backend.first_open_at, _as_is)
    store_get = _remote(Backend.store_get, _as_is)
    store_range = _remote(Backend.store_range, _pairs)
    store_windows = _remote(Backend.store_windows, _pairs)

    def store_snapshot(self, scans: Sequence[StoreScan],
                       max_bytes: int | None = None) -> list[list[tuple[bytes, bytes]]]:
        """The entries of each scan, read by the server in ONE snapshot (see the Backend)."""
        if not isinstance(scans, (list, tuple)) or not all(isinstance(s, StoreScan) for s in scans):
            raise errors.InvalidArgument("scans must be a list of StoreScan records")
        return [_pairs(got) for got in self._call("store_snapshot", [s.to_wire() for s in scans], max_bytes)]

    now_ms = _remote(Backend.now_ms, _as_is)
    stats = _remote(Backend.stats, _as_is)

    # ------------------------------------------------------------------ paged reads (see engine/storage/paging.py)
    def get_transaction(self, stream: str, partition: int, txn_id: int) -> TxnData | None:
        """The checkpointed transaction ``txn_id``, or None (read in pages of the server's size cap)."""
        return self._one("get_transaction", stream, partition, txn_id)

    def last_transaction(self, stream: str, partition: int) -> TxnData | None:
        """The checkpointed transaction with the highest ID, or None (paged)."""
        return self._one("last_transaction", stream, partition)

    def _one(self, method: str, *args: Any) -> TxnData | None:
        wire, cursor = self._call(method, *args)
        if wire is None:
            return None
        items: list[bytes] = wire[3]
        while cursor is not None:
            more, cursor = self._call("get_transaction", args[0], args[1], wire[2], cursor)
            if more is None:  # gone between pages (expired or compacted)
                return None
            items.extend(more[3])
        return TxnData.from_wire(wire)

    def _pages(self, method: str, args: tuple[Any, ...], limit: int | None) -> tuple[list[list[Any]], Any]:
        """Call a paged scan until its cursor ends; ``(transactions, last reply)``."""
        txns: list[list[Any]] = []
        cursor = None
        partial = False
        while True:
            extra = () if limit is None else (limit - len(txns),)  # a partial one is counted
            reply = self._call(method, *args, *extra, cursor)
            page, cursor, dropped = reply[0], reply[1], reply[2]
            got = page if limit is None else page[0]
            if partial:
                if dropped:
                    txns.pop()
                elif got and got[0][2] == txns[-1][2]:
                    txns[-1][3].extend(got.pop(0)[3])
            txns.extend(got)
            partial = cursor is not None and cursor[2] >= 0
            if cursor is None or (limit is not None and len(txns) >= limit and not partial):
                return txns, page

    def transactions_range(self, stream: str, partition: int, from_id: int, to_id: int) -> list[TxnData]:
        """Checkpointed transactions with ``from_id <= id <= to_id``, stopping at an open one (paged)."""
        txns, _ = self._pages("transactions_range", (stream, partition, from_id, to_id), None)
        return [TxnData.from_wire(t) for t in txns]

    def fetch(self, stream: str, partition: int, after: int, max_txns: int = 256) -> Fetched:
        """Checkpointed transactions with ID > ``after``, stopping at an open one (paged)."""
        txns, last = self._pages("fetch", (stream, partition, after), max_txns)
        return Fetched([TxnData.from_wire(t) for t in txns], last[1], last[2], last[3] if len(last) > 3 else None)

    def wait_for_commit(self, seen: int, timeout: float) -> int:
        """Long poll on the server (it never blocks its loop for it)."""
        t = check_wait(seen, timeout)  # as the embedded engine does: nan or inf would never end
        generation: int = self._call("wait_for_commit", seen, timeout, timeout=self.timeout + t)
        return generation

    def watch(self, seen: int, callback: Callable[[int], Any]) -> Subscription:
        """Call ``callback(sequence)`` (on the client's I/O thread) for every commit-log
        sequence change after ``seen``, until :meth:`Subscription.cancel`."""
        self._check()
        fut = self._conn.request("watch", framing.encode_args([seen]), timeout=3600.0 * 24 * 365,
                                 retry_safe=True, on_item=callback)
        return Subscription(self._conn, fut)

    def compact(self) -> dict[str, int]:
        """Remove expired data on the server now; return what was removed."""
        removed: dict[str, int] = self._call("compact", retry_safe=False)
        return removed

    def close(self) -> None:
        """Close the connection (the server and its data are unaffected). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._conn.close()


class Subscription:
    """A running ``watch`` request."""

    def __init__(self, conn: Transport, future: Future) -> None:
        self._conn = conn
        self.future = future

    def cancel(self) -> None:
        """End the subscription: the server closes its generator, and once the client has
        processed the cancel no further callback runs."""
        self._conn.cancel(self.future)
