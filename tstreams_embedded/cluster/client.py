"""``ts.connect("zk://h1:2181,h2:2181/path")``: a Backend that finds and follows the leader.

:class:`ClusterBackend` watches ``P/leader`` in ZooKeeper and talks to the leader through a
:class:`~tstreams_embedded.net.client.RemoteBackend`. When a call meets
:class:`~tstreams_embedded.errors.NotLeader`, :class:`~tstreams_embedded.errors.ClusterUnavailable`
or a lost connection, it waits for a (new) leader and calls again, until ``timeout``.

Writes are safe to retry: each ``submit`` carries this client's ID and a sequence number,
and the cluster applies a repeated ``(client, seq)`` once, answering the retry with the
first outcome (see :mod:`.node`). Pipelined DATA is off (every submit waits for its
reply), so that every write can be retried. The cluster remembers a client's last
:data:`~.messages.DEDUP_WINDOW` requests, so a submit takes a sequence number only within
that many of the oldest one still unanswered (it waits otherwise): a write retried after a
failover is then always recognised, however many coroutines or threads write at once.

With ``read_from="follower"`` the reads (streams, transactions, offsets, markers, commit
waits) go to a follower instead, chosen among the nodes ZooKeeper lists as followers, on
a connection that asked for follower reads (``read_from_follower``); a follower that
refuses or fails is avoided for a second and another node (or, if none can, the leader)
answers. What a follower read may miss is stated in :mod:`.follower_reads`.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import msgpack

from .. import errors
from ..engine.protocol import ops as O
from ..engine.protocol.backend import (
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
from ..net import framing
from ..net.client import RemoteBackend, encode_submit
from ..net.connection import Connection, Transport
from ..retry import RetryPolicy
from .leader_waits import LeaderWaits, ThreadWaits
from .messages import DEDUP_WINDOW
from .zk import BoundedZk, ZkAddress, check_seconds, decode_json, start_client, zk_error

T = TypeVar("T")

log = logging.getLogger(__name__)

RETRYABLE = (errors.NotLeader, errors.ClusterUnavailable, errors.RemoteError, errors.EngineClosed)
#: A call on the leader: again after each retryable error (a leader changing or unreachable),
#: after 0.05 s, doubling up to 0.4 s, each pause shortened by up to half at random so that
#: the clients of a cluster spread out after a failover; the deadline is the call's ``timeout``.
LEADER_RETRY = RetryPolicy(retry_on=RETRYABLE, delay=0.05, backoff=2.0, max_delay=0.4, jitter=0.5)
READ_FROM = ("leader", "follower")


class _NoLeader(Exception):
    """No leader was published before the call's deadline (carries the error to raise)."""

    def __init__(self, error: errors.ClusterUnavailable) -> None:
        super().__init__(str(error))
        self.error = error
AVOID_SECONDS = 1.0  # a follower that refused or failed a read is not asked again for this long
#: The :class:`~tstreams_embedded.net.client.RemoteBackend` options a cluster client passes on
#: (``pipeline_data`` is always off: every write must be retryable).
REMOTE_OPTIONS = frozenset({"curve_dir", "curve_client", "server_public_key", "client_public_key",
                            "client_secret_key", "context"})


def check_remote_options(options: dict[str, Any]) -> None:
    """:class:`~tstreams_embedded.errors.InvalidArgument` for an option the connection to a
    node does not know, so that a typo fails here, not later as a misleading "no leader"."""
    unknown = sorted(set(options) - REMOTE_OPTIONS)
    if unknown:
        raise errors.InvalidArgument(f"unknown option(s) for a cluster connection: {', '.join(unknown)} "
                                     f"(known: timeout, request_timeout, heartbeat, zk_timeout, read_from, "
                                     f"{', '.join(sorted(REMOTE_OPTIONS))})")


class ClusterBackend:
    """The Backend of an ``Engine`` connected to a cluster (see the module docstring).

    ``timeout`` bounds each call, retries included (seconds); ``request_timeout`` bounds one
    attempt on one leader. ``read_from``: ``"leader"`` (default) or ``"follower"`` (reads
    from a follower's committed state, see the module docstring).

    ``transport`` makes the connection to a node (as for
    :class:`~tstreams_embedded.net.client.RemoteBackend`) and ``waits`` says where leader
    changes are applied and how calls wait (:mod:`.leader_waits`): the defaults serve
    threads; :mod:`tstreams_embedded.aio` passes its ``zmq.asyncio`` connection and the
    event loop's waits, so that every request and every wait of a call suspends a greenlet
    on the loop (kazoo's thread only follows ZooKeeper).
    """

    local_clock = False

    def __init__(self, url: str, timeout: float = 30.0, request_timeout: float = 5.0,
                 heartbeat: float = 1.0, zk_timeout: float = 10.0, read_from: str = "leader", *,
                 transport: Callable[..., Transport] = Connection, waits: LeaderWaits | None = None,
                 **remote_options: Any) -> None:
        self.addr = ZkAddress.parse(url)
        if read_from not in READ_FROM:
            raise errors.InvalidArgument(f"read_from must be one of {READ_FROM}, got {read_from!r}")
        self.read_from = read_from
        self._reader: RemoteBackend | None = None
        self._reader_node: str | None = None
        self._avoid: dict[str, float] = {}
        self.timeout = check_seconds("timeout", timeout)
        self.request_timeout = check_seconds("request_timeout", request_timeout)
        self.heartbeat = check_seconds("heartbeat", heartbeat)
        zk_timeout = check_seconds("zk_timeout", zk_timeout)
        check_remote_options(remote_options)
        self.remote_options = remote_options
        self.remote_options["pipeline_data"] = False
        self.remote_options["transport"] = transport
        self._waits: LeaderWaits = ThreadWaits() if waits is None else waits
        self._zk_timeout = zk_timeout
        self.client_id = uuid.uuid4().hex
        self._next_seq = 1
        self._unanswered: set[int] = set()  # sequence numbers of submits in progress
        self._lock = threading.Lock()
        self._remote: RemoteBackend | None = None
        self._remote_endpoint: str | None = None
        self._leader: dict[str, Any] = {}
        self._closed = False
        #: when this client's ZooKeeper connection was last lost, and last (re-)established
        self._zk_lost_at: float | None = None
        self._zk_back_at: float | None = None
        self._zk = start_client(self.addr, zk_timeout, connect_timeout=min(zk_timeout, self.timeout))
        try:
            try:
                found = BoundedZk(self._zk, zk_timeout).exists(self.addr.config)
            except errors.TStreamsError:
                raise
            except Exception as exc:  # noqa: BLE001 - kazoo's errors about the request
                raise zk_error(exc, self.addr, "look for the cluster") from exc
            if found is None:
                raise errors.InvalidArgument(f"no cluster at {self.addr}: run 'tstreams cluster init' first")
        except BaseException:
            self._zk.stop()
            self._zk.close()
            raise
        self._zk.add_listener(self._on_session)
        self._zk.DataWatch(self.addr.leader, self._on_leader)

    def __repr__(self) -> str:
        return f"ClusterBackend({str(self.addr)!r}, leader={self._leader.get('node')!r})"

    # ------------------------------------------------------------------ leader tracking
    def _on_session(self, state: Any) -> None:
        """kazoo's session listener (its thread: no ZooKeeper calls here)."""
        if str(state) == "CONNECTED":
            self._zk_back_at = time.monotonic()
        elif self._zk_lost_at is None or (self._zk_back_at or 0.0) >= self._zk_lost_at:
            self._zk_lost_at = time.monotonic()  # (the start of this outage, not a later LOST)

    def _on_leader(self, data: bytes | None, stat: Any) -> None:
        """kazoo's watch of ``P/leader`` (its thread): the change is handed to :attr:`_waits`."""
        leader = decode_json(data)

        def change() -> None:
            self._leader = leader

        def after() -> None:
            endpoint = leader.get("endpoint")
            if endpoint:
                self._drop_old_leader(str(endpoint))

        self._waits.deliver(change, after)

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
        def known() -> bool:
            return bool(self._leader.get("endpoint"))

        while not known():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                raise errors.ClusterUnavailable(
                    f"no leader in {self.addr} within {self.timeout:g} s"
                    f"{self._zookeeper_trouble(deadline - self.timeout)}")
            self._waits.wait_change(known, min(remaining, 0.2))
        endpoint = str(self._leader["endpoint"])
        old = None
        with self._lock:  # (held across no wait: greenlets on one thread share it)
            if self._closed:
                raise errors.EngineClosed(f"cluster backend {self.addr} is closed")
            if self._remote is None or self._remote_endpoint != endpoint:
                old = self._remote
                self._remote = RemoteBackend(endpoint, timeout=self.request_timeout, heartbeat=self.heartbeat,
                                             failover_retries=False, **self.remote_options)
                self._remote_endpoint = endpoint
            remote = self._remote
        if old is not None:
            old.close()
        return remote

    def _retry(self, fn: Callable[[RemoteBackend], T]) -> T:
        """``fn`` on the leader, again after each retryable error (:data:`LEADER_RETRY`)
        until :attr:`timeout`; then :class:`~tstreams_embedded.errors.ClusterUnavailable`
        with the last error (or, with no leader known at all, the "no leader" one)."""
        if self._closed:
            raise errors.EngineClosed(f"cluster backend {self.addr} is closed")
        deadline = time.monotonic() + self.timeout

        def attempt() -> T:
            while True:
                try:
                    remote = self._backend(deadline)
                except errors.ClusterUnavailable as exc:  # no leader until the deadline: not retried
                    raise _NoLeader(exc) from None
                if remote.connection.connected or self._await_connection(remote, deadline):
                    return fn(remote)
                # the leader changed meanwhile, or still no connection: look again

        try:
            return replace(LEADER_RETRY, deadline=self.timeout).call(
                attempt, clock=time.monotonic, sleep=self._waits.sleep, stop=lambda: self._closed)
        except _NoLeader as no_leader:
            raise no_leader.error from None
        except RETRYABLE as last:
            if self._closed:
                raise
            raise errors.ClusterUnavailable(
                f"the cluster {self.addr} did not answer within {self.timeout:g} s"
                f"{self._zookeeper_trouble(deadline - self.timeout)}; last error: {type(last).__name__}: {last}"
            ) from last

    def _zookeeper_trouble(self, since: float) -> str:
        """``": ZooKeeper … unavailable …"`` while this client has no ZooKeeper connection
        (then the leader it knows may be stale and no new one can be learnt), or if it had
        none for part of the call started at ``since`` (a ZooKeeper outage that ended just
        before the timeout: the cluster may still be electing); else ``""``."""
        state = str(self._zk.state)
        if state != "CONNECTED":
            return (f": ZooKeeper at {self.addr.hosts} is unavailable (this client's session is {state.lower()}), "
                    f"so no leader can be found")
        lost, back = self._zk_lost_at, self._zk_back_at
        if lost is not None and back is not None and back > since and back >= lost:
            return (f": ZooKeeper at {self.addr.hosts} was unavailable for {back - max(lost, since):.1f} s of it "
                    f"(back {time.monotonic() - back:.1f} s ago; a leader is elected after such an outage)")
        return ""

    def _await_connection(self, remote: RemoteBackend, deadline: float) -> bool:
        """Wait (at most 0.5 s) for ``remote`` to connect; False if the leader changed or it
        did not connect (a dead leader whose ZooKeeper node has not expired yet): requests
        are then not sent into a void to wait for their whole timeout."""
        end = min(deadline, time.monotonic() + 0.5)
        endpoint = self._leader.get("endpoint")

        def changed() -> bool:
            return self._leader.get("endpoint") != endpoint or self._closed

        while not remote.connection.connected:
            if changed():
                return False
            remaining = end - time.monotonic()
            if remaining <= 0:
                return time.monotonic() >= deadline  # at the deadline: try anyway, fail clearly
            self._waits.wait_change(changed, min(remaining, 0.02))
        return True

    # ------------------------------------------------------------------ follower reads
    @property
    def reading_from(self) -> str | None:
        """The node follower reads currently go to (``None``: none chosen, or the leader)."""
        return self._reader_node

    def _read(self, fn: Callable[[RemoteBackend], T]) -> T:
        """A read: on the leader, or with ``read_from="follower"`` on a follower."""
        if self.read_from == "leader":
            return self._retry(fn)
        if self._closed:
            raise errors.EngineClosed(f"cluster backend {self.addr} is closed")
        deadline = time.monotonic() + self.timeout
        last: BaseException | None = None
        while True:
            remote = self._follower()
            if remote is None:  # no follower can serve now: the leader does
                return self._retry(fn)
            try:
                return fn(remote)
            except RETRYABLE as exc:
                if self._closed:
                    raise
                last = exc
                self._drop_follower()
            if time.monotonic() >= deadline:
                raise errors.ClusterUnavailable(
                    f"no node of {self.addr} served the read within {self.timeout:g} s; last error: "
                    f"{type(last).__name__}: {last}") from last

    def _follower(self) -> RemoteBackend | None:
        """The connection follower reads use, opted in; a new one to a follower ZooKeeper
        lists (not avoided) if there is none; ``None`` if no follower qualifies."""
        with self._lock:
            if self._reader is not None:
                return self._reader
        from kazoo.exceptions import KazooException

        now = time.monotonic()
        candidates = []
        wait = self._waits.zk_result
        try:
            for child in wait(self._zk.get_children_async(self.addr.nodes), self._zk_timeout):
                if self._avoid.get(child, 0.0) > now:
                    continue
                info = decode_json(wait(self._zk.get_async(self.addr.node(child)), self._zk_timeout)[0])
                if info.get("role") == "follower" and not info.get("diverged") and info.get("endpoint"):
                    candidates.append((child, str(info["endpoint"])))
        except (KazooException, self._zk.handler.timeout_exception, errors.ClusterUnavailable):
            # ZooKeeper trouble: read from the leader
            return None
        if not candidates:
            return None
        node, endpoint = random.choice(candidates)
        remote = RemoteBackend(endpoint, timeout=self.request_timeout, heartbeat=self.heartbeat, failover_retries=False,
                               **self.remote_options)
        try:
            remote.connection.call("read_from_follower")
        except RETRYABLE:
            remote.close()
            self._avoid[node] = time.monotonic() + AVOID_SECONDS
            return None
        with self._lock:
            closed = self._closed
            if not closed:
                self._reader, self._reader_node = remote, node
        if closed:
            remote.close()
            raise errors.EngineClosed(f"cluster backend {self.addr} is closed")
        return remote

    def _drop_follower(self) -> None:
        with self._lock:
            remote, node = self._reader, self._reader_node
            self._reader = self._reader_node = None
        if remote is not None:
            remote.close()
        if node is not None:
            self._avoid[node] = time.monotonic() + AVOID_SECONDS

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
        seq = self._take_seq()
        try:
            wire = msgpack.unpackb(body[0], raw=False, strict_map_key=False)  # blob references stay ExtType
            frames = [framing.pack([wire[0], bool(durable), self.client_id, seq]), *body[1:]]

            def call(r: RemoteBackend) -> list[Any]:
                r.check_request_size(frames)  # RequestTooLarge unsent, not a connection ZeroMQ drops
                results: list[Any] = r.connection.call_frames("submit", frames, self.request_timeout,
                                                              retry_safe=False)
                return results

            return self._retry(call)
        finally:
            with self._lock:
                self._unanswered.discard(seq)
            self._waits.wake()

    def _window_open(self) -> bool:
        """Whether the next sequence number is within the window (call with :attr:`_lock` held)."""
        return not self._unanswered or self._next_seq - min(self._unanswered) < DEDUP_WINDOW

    def _window_open_now(self) -> bool:
        with self._lock:
            return self._window_open()

    def _take_seq(self) -> int:
        """The next sequence number, once it is within :data:`~.messages.DEDUP_WINDOW` of the
        oldest unanswered submit (whose retry the cluster must still recognise); waits for
        that at most :attr:`timeout`, then :class:`~tstreams_embedded.errors.ClusterUnavailable`."""
        deadline = time.monotonic() + self.timeout
        while True:
            with self._lock:
                if self._window_open():
                    seq = self._next_seq
                    self._next_seq += 1
                    self._unanswered.add(seq)
                    return seq
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                if self._closed:
                    raise errors.EngineClosed(f"cluster backend {self.addr} is closed")
                raise errors.ClusterUnavailable(
                    f"the cluster {self.addr} did not answer within {self.timeout:g} s: the oldest of this "
                    f"client's {DEDUP_WINDOW} latest writes is still unanswered")
            self._waits.wait_change(self._window_open_now, min(remaining, 0.2))

    def get_stream(self, name: str) -> StreamInfo:
        return self._read(lambda r: r.get_stream(name))

    def list_streams(self, prefix: str = "", limit: int | None = None) -> list[StreamInfo]:
        return self._read(lambda r: r.list_streams(prefix, limit))

    def fetch(self, stream: str, partition: int, after: int, max_txns: int = 256) -> Fetched:
        return self._read(lambda r: r.fetch(stream, partition, after, max_txns))

    def scan_index(self, stream: str, partition: int, after: int, upto: int = 2**63 - 1,
                   max_txns: int = 4096) -> IndexScan:
        return self._read(lambda r: r.scan_index(stream, partition, after, upto, max_txns))

    def get_transaction(self, stream: str, partition: int, txn_id: int) -> TxnData | None:
        return self._read(lambda r: r.get_transaction(stream, partition, txn_id))

    def transactions_range(self, stream: str, partition: int, from_id: int, to_id: int) -> list[TxnData]:
        return self._read(lambda r: r.transactions_range(stream, partition, from_id, to_id))

    def last_transaction(self, stream: str, partition: int) -> TxnData | None:
        return self._read(lambda r: r.last_transaction(stream, partition))

    def last_txn_id(self, stream: str, partition: int) -> int:
        return self._read(lambda r: r.last_txn_id(stream, partition))

    def get_offsets(self, stream: str, consumer: str) -> dict[int, int]:
        return self._read(lambda r: r.get_offsets(stream, consumer))

    def get_marker(self, key: str) -> int | None:
        return self._read(lambda r: r.get_marker(key))

    def list_consumers(self, stream: str | None = None, limit: int | None = None) -> list[ConsumerInfo]:
        return self._retry(lambda r: r.list_consumers(stream, limit))

    def backup_begin(self) -> BackupCopy:
        """A copy made by the node that leads now; if another node leads before the copy is
        read, :meth:`backup_read` says the token is unknown and the backup is started again."""
        return self._retry(lambda r: r.backup_begin())

    def backup_read(self, token: str, offset: int, size: int) -> bytes:
        return self._retry(lambda r: r.backup_read(token, offset, size))

    def backup_end(self, token: str) -> None:
        self._retry(lambda r: r.backup_end(token))

    def queue_status(self, stream: str, group: str, full: bool = False) -> QueueStatus:
        return self._retry(lambda r: r.queue_status(stream, group, full))

    def describe_partitions(self, stream: str, first: int = 0, count: int = 256) -> list[PartitionInfo]:
        return self._retry(lambda r: r.describe_partitions(stream, first, count))

    def first_open_at(self, stream: str, partition: int, ms: int) -> int:
        return self._retry(lambda r: r.first_open_at(stream, partition, ms))
    def store_get(self, store: str, key: bytes) -> bytes | None:
        return self._retry(lambda r: r.store_get(store, key))

    def store_range(self, store: str, start: bytes | None = None, end: bytes | None = None,
                    limit: int = 10_000) -> list[tuple[bytes, bytes]]:
        return self._retry(lambda r: r.store_range(store, start, end, limit))

    def store_windows(self, store: str, key: bytes | None, end_from: int, end_to: int,
                      limit: int = 10_000) -> list[tuple[bytes, bytes]]:
        return self._retry(lambda r: r.store_windows(store, key, end_from, end_to, limit))

    def store_snapshot(self, scans: Sequence[StoreScan],
                       max_bytes: int | None = None) -> list[list[tuple[bytes, bytes]]]:
        return self._retry(lambda r: r.store_snapshot(scans, max_bytes))

    def wait_for_commit(self, seen: int, timeout: float) -> int:
        return self._read(lambda r: r.wait_for_commit(seen, timeout))

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
        self._waits.wake()
        with self._lock:
            remotes = [r for r in (self._remote, self._reader) if r is not None]
        for remote in remotes:
            remote.close()
        try:
            self._zk.stop()
            self._zk.close()
        except Exception:  # noqa: BLE001 - closing anyway: nothing is left to use the client, whatever went wrong
            log.debug("closing the ZooKeeper client failed", exc_info=True)


def connect_cluster(url: str, *, timeout: float = 30.0, txn_ttl: float | None = None,
                    keepalive_interval: float | None = -1, **options: Any) -> Any:
    """An ``Engine`` on the cluster at ``url`` (``zk://hosts/path``) that follows its leader."""
    from ..engine.api.engine import DEFAULT_TXN_TTL, Engine

    backend = ClusterBackend(url, timeout=timeout, **options)
    ttl = DEFAULT_TXN_TTL if txn_ttl is None else txn_ttl
    return Engine(backend, txn_ttl=ttl, keepalive_interval=keepalive_interval)
