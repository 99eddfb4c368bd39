"""``RemoteBackend``: the :class:`~tstreams_embedded.engine.backend.Backend` protocol over ZeroMQ.

``Engine(RemoteBackend("tcp://host:7000"))`` (what :func:`tstreams_embedded.net.connect`
returns) has the same public API as an embedded engine: producers, transactions, consumers,
subscribers and checkpoint groups run unchanged, and server-side errors are re-raised as
the same exception classes with the same messages.

Pipelining: a non-durable ``submit`` consisting only of ``DATA`` operations (a
transaction's buffered items being flushed) is sent without waiting for its reply and
returns ``[None, ...]``. Before any later write touching the same transaction is sent, the
client waits for those replies and raises the first error instead of sending — so a
transaction is never checkpointed with a chunk missing. The server applies one client's
writes in the order sent.

Reads and long polls are retried transparently after a reconnection; a write whose
connection dropped while it was in flight raises :class:`RemoteError` (its outcome is
unknown — use a ``SET_MARKER`` guard or a CheckpointGroup to make retries exactly-once).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import msgpack
import zmq

from .. import errors
from ..engine import ops as O
from ..engine.backend import Fetched, IndexScan, StreamInfo, TxnData
from . import framing
from .connection import Connection
from .future import Future

_BLOB = msgpack.ExtType


def encode_submit(ops: Sequence[O.Operation], durable: bool) -> list:
    """``[body, *blobs]`` for ``submit(ops, durable)``: each record as ``[opcode, *fields]``
    (:func:`.ops.encode`), every bytes-like field (item chunks) as its own frame. The batch
    is checked as a client batch first, so a bad one fails here with the server's message."""
    blobs: list[Any] = []
    wire: list[Any] = []
    for op in O.check_client_batch(ops):
        row = O.encode(op)
        for j in range(1, len(row)):
            v = row[j]
            if isinstance(v, (bytes, bytearray, memoryview)):
                row[j] = _BLOB(framing.BLOB, len(blobs).to_bytes(4, "big"))
                blobs.append(v)
        wire.append(row)
    try:
        body = framing.pack([wire, durable])
    except (TypeError, ValueError, OverflowError) as e:
        raise errors.InvalidArgument(f"operations cannot be encoded: {e}") from None
    return [body, *blobs]


def _curve_from_dir(curve_dir: str, name: str) -> tuple[bytes, bytes, bytes]:
    from .auth import load_client_curve

    return load_client_curve(curve_dir, name)


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
        curve_dir: str | os.PathLike | None = None,
        curve_client: str = "client",
        server_public_key: bytes | str | None = None,
        client_public_key: bytes | str | None = None,
        client_secret_key: bytes | str | None = None,
        pipeline_data: bool = True,
        context: zmq.Context | None = None,
    ) -> None:
        curve = None
        if curve_dir is not None:
            curve = _curve_from_dir(os.fspath(curve_dir), curve_client)
        elif server_public_key is not None:
            if client_public_key is None or client_secret_key is None:
                raise errors.InvalidArgument("CURVE needs server_public_key, client_public_key and client_secret_key")
            curve = tuple(k.encode() if isinstance(k, str) else bytes(k)
                          for k in (server_public_key, client_public_key, client_secret_key))
        self.endpoint = endpoint
        self.timeout = timeout
        self.pipeline_data = pipeline_data
        self._conn = Connection(endpoint, timeout=timeout, heartbeat=heartbeat, curve=curve, context=context)
        self._lock = threading.Lock()
        self._inflight: dict[tuple, list[Future]] = {}  # pipelined DATA per (stream, partition, txn)
        self._info: dict[str, Any] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"RemoteBackend({self.endpoint!r})"

    # ------------------------------------------------------------------ plumbing
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connection(self) -> Connection:
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
        return self._conn.call_frames(method, body, self.timeout if timeout is None else timeout, retry_safe)

    def server_info(self) -> dict[str, Any]:
        """The server's ``pid``, ``durability``, ``max_item_size`` and method list (cached)."""
        if self._info is None:
            self._info = self._call("server_info")
        return self._info

    @property
    def max_item_size(self) -> int:
        return int(self.server_info()["max_item_size"])

    @property
    def durability(self) -> str:
        return str(self.server_info()["durability"])

    def server_stats(self) -> dict[str, Any]:
        """Network counters of the server process that answers."""
        return self._call("server_stats")

    def ping(self) -> float:
        """Round-trip one request; return the seconds it took."""
        import time

        t = time.perf_counter()
        self._call("ping")
        return time.perf_counter() - t

    # ------------------------------------------------------------------ writes
    def submit(self, ops: Sequence[O.Operation], durable: bool = True) -> list[Any]:
        """Apply ``ops`` atomically on the server; see the module docstring for pipelining."""
        self._check()
        if not isinstance(durable, bool):
            durable = bool(durable)
        body = encode_submit(ops, durable)
        if not ops:
            return []
        keys = [k for k in map(O.txn_address, ops) if k is not None]
        if self.pipeline_data and not durable and all(type(op) is O.Data for op in ops):
            fut = self._conn.request("submit", body, self.timeout, retry_safe=False)
            with self._lock:
                for k in keys:
                    lst = self._inflight.setdefault(k, [])
                    lst[:] = [f for f in lst if not f.done() or f.exception() is not None]
                    lst.append(fut)
            return [None] * len(ops)
        self._barrier(keys)
        return self._conn.call_frames("submit", body, self.timeout, retry_safe=False)

    def submit_async(self, ops: Sequence[O.Operation], durable: bool = True) -> Future:
        """Send a submit without waiting; the returned future gives its results (or error)."""
        self._check()
        body = encode_submit(ops, bool(durable))
        return self._conn.request("submit", body, self.timeout, retry_safe=False)

    def _barrier(self, keys: list[tuple]) -> None:
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
            if first is None and f.exception() is not None:
                first = f.exception()
        if first is not None:
            raise first

    # ------------------------------------------------------------------ metadata and reads
    def get_stream(self, name: str) -> StreamInfo:
        return StreamInfo.from_wire(self._call("get_stream", name))

    def list_streams(self, prefix: str = "", limit: int | None = None) -> list[StreamInfo]:
        return [StreamInfo.from_wire(v) for v in self._call("list_streams", prefix, limit)]

    def fetch(self, stream: str, partition: int, after: int, max_txns: int = 256) -> Fetched:
        return Fetched.from_wire(self._call("fetch", stream, partition, after, max_txns))

    def scan_index(self, stream: str, partition: int, after: int, upto: int = 2**63 - 1,
                   max_txns: int = 4096) -> IndexScan:
        return IndexScan.from_wire(self._call("scan_index", stream, partition, after, upto, max_txns))

    def get_transaction(self, stream: str, partition: int, txn_id: int) -> TxnData | None:
        v = self._call("get_transaction", stream, partition, txn_id)
        return None if v is None else TxnData.from_wire(v)

    def transactions_range(self, stream: str, partition: int, from_id: int, to_id: int) -> list[TxnData]:
        return [TxnData.from_wire(v) for v in self._call("transactions_range", stream, partition, from_id, to_id)]

    def last_transaction(self, stream: str, partition: int) -> TxnData | None:
        v = self._call("last_transaction", stream, partition)
        return None if v is None else TxnData.from_wire(v)

    def last_txn_id(self, stream: str, partition: int) -> int:
        return self._call("last_txn_id", stream, partition)

    def get_offsets(self, stream: str, consumer: str) -> dict[int, int]:
        return self._call("get_offsets", stream, consumer)

    def get_marker(self, key: str) -> int | None:
        return self._call("get_marker", key)

    def wait_for_commit(self, seen: int, timeout: float) -> int:
        """Long poll on the server (it never blocks its loop for it)."""
        t = float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else 0.0
        return self._call("wait_for_commit", seen, timeout, timeout=self.timeout + max(t, 0.0))

    def watch(self, seen: int, callback: Any) -> Subscription:
        """Call ``callback(sequence)`` (on the client's I/O thread) for every commit-log
        sequence change after ``seen``, until :meth:`Subscription.cancel`."""
        self._check()
        fut = self._conn.request("watch", framing.encode_args([seen]), timeout=3600.0 * 24 * 365,
                                 retry_safe=True, on_item=callback)
        return Subscription(self._conn, fut)

    def now_ms(self) -> int:
        return self._call("now_ms")

    def stats(self) -> dict[str, Any]:
        return self._call("stats")

    def compact(self) -> dict[str, int]:
        return self._call("compact", retry_safe=False)

    def close(self) -> None:
        """Close the connection (the server and its data are unaffected). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._conn.close()


class Subscription:
    """A running ``watch`` request."""

    def __init__(self, conn: Connection, future: Future) -> None:
        self._conn = conn
        self.future = future

    def cancel(self) -> None:
        """End the subscription: the server closes its generator, and once the client has
        processed the cancel no further callback runs."""
        self._conn.cancel(self.future)
