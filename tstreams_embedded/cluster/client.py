"""``ts.connect("zk://h1:2181,h2:2181/path")``: a Backend that finds and follows the leader.

:class:`ClusterBackend` watches ``P/leader`` in ZooKeeper and talks to the leader through a
:class:`~tstreams_embedded.net.client.RemoteBackend`. When a call meets
:class:`~tstreams_embedded.errors.NotLeader`, :class:`~tstreams_embedded.errors.ClusterUnavailable`
or a lost connection, it waits for a (new) leader and calls again, until ``timeout``.

Writes are safe to retry: each ``submit`` carries this client's ID and a sequence number,
and the cluster applies a repeated ``(client, seq)`` once, answering the retry with the
first outcome (see :mod:`.node`). Pipelined DATA is off (every submit waits for its
reply), so that every write can be retried.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgpack

from .. import errors
from ..engine import ops as O
from ..engine.backend import Fetched, IndexScan, StreamInfo, TxnData
from ..net import framing
from ..net.client import RemoteBackend, encode_submit
from .zk import ZkAddress, decode_json

T = TypeVar("T")

RETRYABLE = (errors.NotLeader, errors.ClusterUnavailable, errors.RemoteError, errors.EngineClosed)


class ClusterBackend:
    """The Backend of an ``Engine`` connected to a cluster (see the module docstring).

    ``timeout`` bounds each call, retries included (seconds); ``request_timeout`` bounds one
    attempt on one leader.
    """

    local_clock = False

    def __init__(self, url: str, timeout: float = 30.0, request_timeout: float = 5.0,
                 heartbeat: float = 1.0, zk_timeout: float = 10.0, **remote_options: Any) -> None:
        from kazoo.client import KazooClient

        self.addr = ZkAddress.parse(url)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise errors.InvalidArgument(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.request_timeout = float(request_timeout)
        self.heartbeat = heartbeat
        self.remote_options = remote_options
        self.remote_options["pipeline_data"] = False
        self.client_id = uuid.uuid4().hex
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self._remote: RemoteBackend | None = None
        self._remote_endpoint: str | None = None
        self._leader: dict[str, Any] = {}
        self._changed = threading.Condition()
        self._closed = False
        self._zk = KazooClient(hosts=self.addr.hosts, timeout=zk_timeout)
        try:
            self._zk.start(timeout=zk_timeout)
        except Exception as exc:  # noqa: BLE001
            raise errors.ClusterUnavailable(f"cannot reach ZooKeeper at {self.addr.hosts}: {exc}") from exc
        if self._zk.exists(self.addr.config) is None:
            self._zk.stop()
            raise errors.InvalidArgument(f"no cluster at {self.addr}: run 'tstreams cluster init' first")
        self._zk.DataWatch(self.addr.leader, self._on_leader)

    def __repr__(self) -> str:
        return f"ClusterBackend({str(self.addr)!r}, leader={self._leader.get('node')!r})"

    # ------------------------------------------------------------------ leader tracking
    def _on_leader(self, data: bytes | None, stat: Any) -> None:
        with self._changed:
            self._leader = decode_json(data)
            self._changed.notify_all()
        endpoint = self._leader.get("endpoint")
        if endpoint:
            self._drop_old_leader(str(endpoint))

    def _drop_old_leader(self, endpoint: str) -> None:
        """A new leader is published: close the connection to the old one, so that calls
        waiting on it (unsent to a dead leader, or unanswered by a paused one) fail at once
        with a retryable error and go to the new leader instead of waiting for their
        timeout. A write that did reach the old leader is retried with the same request ID,
        so it is applied at most once."""
        with self._lock:
            old = self._remote
            if old is None or self._remote_endpoint == endpoint:
                return
            self._remote, self._remote_endpoint = None, None
        old.close()

    @property
    def leader(self) -> dict[str, Any]:
        """The leader as published in ZooKeeper (``node``, ``epoch``, ``endpoint``), or ``{}``."""
        return dict(self._leader)

    def _backend(self, deadline: float) -> RemoteBackend:
        with self._changed:
            while not self._leader.get("endpoint"):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    raise errors.ClusterUnavailable(f"no leader in {self.addr} within {self.timeout:g} s")
                self._changed.wait(min(remaining, 0.2))
            endpoint = str(self._leader["endpoint"])
        with self._lock:
            if self._closed:
                raise errors.EngineClosed(f"cluster backend {self.addr} is closed")
            if self._remote is None or self._remote_endpoint != endpoint:
                if self._remote is not None:
                    self._remote.close()
                self._remote = RemoteBackend(endpoint, timeout=self.request_timeout, heartbeat=self.heartbeat,
                                             **self.remote_options)
                self._remote_endpoint = endpoint
            return self._remote

    def _retry(self, fn: Callable[[RemoteBackend], T]) -> T:
        if self._closed:
            raise errors.EngineClosed(f"cluster backend {self.addr} is closed")
        deadline = time.monotonic() + self.timeout
        last: BaseException | None = None
        while True:
            remote = self._backend(deadline)
            if not remote.connection.connected and not self._await_connection(remote, deadline):
                continue  # the leader changed meanwhile, or still no connection: look again
            try:
                return fn(remote)
            except RETRYABLE as exc:
                if self._closed:
                    raise
                last = exc
            if time.monotonic() >= deadline:
                raise errors.ClusterUnavailable(
                    f"the cluster {self.addr} did not answer within {self.timeout:g} s; last error: "
                    f"{type(last).__name__}: {last}") from last
            time.sleep(0.05)  # a back-off between attempts, not a synchronisation

    def _await_connection(self, remote: RemoteBackend, deadline: float) -> bool:
        """Wait (at most 0.5 s) for ``remote`` to connect; False if the leader changed or it
        did not connect (a dead leader whose ZooKeeper node has not expired yet): requests
        are then not sent into a void to wait for their whole timeout."""
        end = min(deadline, time.monotonic() + 0.5)
        with self._changed:
            endpoint = self._leader.get("endpoint")
            while not remote.connection.connected:
                if self._leader.get("endpoint") != endpoint or self._closed:
                    return False
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return time.monotonic() >= deadline  # at the deadline: try anyway, fail clearly
                self._changed.wait(min(remaining, 0.02))
        return True

    # ------------------------------------------------------------------ Backend
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def max_item_size(self) -> int:
        return self._retry(lambda r: r.max_item_size)

    def submit(self, ops: Sequence[O.Operation], durable: bool = True) -> list[Any]:
        """Apply ``ops`` atomically on the cluster, once, retrying across failover."""
        if self._closed:
            raise errors.EngineClosed(f"cluster backend {self.addr} is closed")
        body = encode_submit(ops, bool(durable))  # checks the batch
        if not ops:
            return []
        seq = next(self._seq)
        wire = msgpack.unpackb(body[0], raw=False, strict_map_key=False)  # blob references stay ExtType
        frames = [framing.pack([wire[0], bool(durable), self.client_id, seq]), *body[1:]]

        def call(r: RemoteBackend) -> list[Any]:
            results: list[Any] = r.connection.call_frames("submit", frames, self.request_timeout, retry_safe=False)
            return results

        return self._retry(call)

    def get_stream(self, name: str) -> StreamInfo:
        return self._retry(lambda r: r.get_stream(name))

    def list_streams(self, prefix: str = "", limit: int | None = None) -> list[StreamInfo]:
        return self._retry(lambda r: r.list_streams(prefix, limit))

    def fetch(self, stream: str, partition: int, after: int, max_txns: int = 256) -> Fetched:
        return self._retry(lambda r: r.fetch(stream, partition, after, max_txns))

    def scan_index(self, stream: str, partition: int, after: int, upto: int = 2**63 - 1,
                   max_txns: int = 4096) -> IndexScan:
        return self._retry(lambda r: r.scan_index(stream, partition, after, upto, max_txns))

    def get_transaction(self, stream: str, partition: int, txn_id: int) -> TxnData | None:
        return self._retry(lambda r: r.get_transaction(stream, partition, txn_id))

    def transactions_range(self, stream: str, partition: int, from_id: int, to_id: int) -> list[TxnData]:
        return self._retry(lambda r: r.transactions_range(stream, partition, from_id, to_id))

    def last_transaction(self, stream: str, partition: int) -> TxnData | None:
        return self._retry(lambda r: r.last_transaction(stream, partition))

    def last_txn_id(self, stream: str, partition: int) -> int:
        return self._retry(lambda r: r.last_txn_id(stream, partition))

    def get_offsets(self, stream: str, consumer: str) -> dict[int, int]:
        return self._retry(lambda r: r.get_offsets(stream, consumer))

    def get_marker(self, key: str) -> int | None:
        return self._retry(lambda r: r.get_marker(key))

    def wait_for_commit(self, seen: int, timeout: float) -> int:
        return self._retry(lambda r: r.wait_for_commit(seen, timeout))

    def now_ms(self) -> int:
        return self._retry(lambda r: r.now_ms())

    def stats(self) -> dict[str, Any]:
        return self._retry(lambda r: r.stats())

    def compact(self) -> dict[str, int]:
        return self._retry(lambda r: r.compact())

    def cluster_info(self) -> dict[str, Any]:
        """The answering leader's view of itself (role, epoch, log position)."""
        info: dict[str, Any] = self._retry(lambda r: r.connection.call("cluster_info"))
        return info

    def close(self) -> None:
        """Close the connection and the ZooKeeper session (the cluster is unaffected)."""
        if self._closed:
            return
        self._closed = True
        with self._changed:
            self._changed.notify_all()
        with self._lock:
            if self._remote is not None:
                self._remote.close()
        try:
            self._zk.stop()
            self._zk.close()
        except Exception:  # noqa: BLE001
            pass


def connect_cluster(url: str, *, timeout: float = 30.0, txn_ttl: float | None = None,
                    keepalive_interval: float | None = -1, **options: Any) -> Any:
    """An ``Engine`` on the cluster at ``url`` (``zk://hosts/path``) that follows its leader."""
    from ..engine.engine import DEFAULT_TXN_TTL, Engine

    backend = ClusterBackend(url, timeout=timeout, **options)
    ttl = DEFAULT_TXN_TTL if txn_ttl is None else txn_ttl
    return Engine(backend, txn_ttl=ttl, keepalive_interval=keepalive_interval)
