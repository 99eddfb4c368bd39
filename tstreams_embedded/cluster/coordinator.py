"""The coordinator a cluster node relies on, behind a small interface.

A node needs from ZooKeeper: a session (whose loss it is told of at once), the election
lock, the epoch (read, and bumped with a version check), the configuration (read and
watched), the leader's record, and the nodes' published positions (ephemeral, so they vanish
with their session). :class:`Coordinator` is that interface; :class:`KazooCoordinator`
is the production one over kazoo, and :mod:`tstreams_embedded.testing.coordinator` ships an
in-memory one whose sessions a test can expire.

Every call may raise :class:`~tstreams_embedded.errors.ClusterUnavailable` (no session, or
no answer in time); none waits forever.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from .. import errors
from ..retry import RetryPolicy
from .zk import (
    ZK_CALL_TIMEOUT,
    BoundedZk,
    SessionLogger,
    ZkAddress,
    decode_json,
    encode_json,
    ensure_cluster_id,
    new_client,
    read_status,
    unreachable_reason,
)

log = logging.getLogger(__name__)

#: Seconds a node waits for its first coordinator session at start (``tstreams serve
#: --cluster``) before it exits with :class:`~tstreams_embedded.errors.ClusterUnavailable`
#: (saying "connection refused" when that is why).
CONNECT_TIMEOUT = 10.0


def epoch_retry() -> RetryPolicy:
    """Bumping the epoch (a versioned write) while other candidates bump it too: again after
    a short, jittered pause on kazoo's ``BadVersionError``, for at most
    :data:`~.zk.ZK_CALL_TIMEOUT` seconds (a function: kazoo is imported when used)."""
    from kazoo.exceptions import BadVersionError

    return RetryPolicy(retry_on=(BadVersionError,), deadline=ZK_CALL_TIMEOUT, delay=0.005, backoff=2.0,
                       max_delay=0.1, jitter=0.5)


class SessionState(enum.Enum):
    """The coordinator session as the node sees it (kazoo's states)."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"  # the connection dropped; the session may still live
    LOST = "lost"  # the session expired: its ephemeral records and lock are gone


class NodeIdInUse(errors.InvalidArgument):
    """Another running node (another ZooKeeper session) holds this node id."""

    def __init__(self, node_id: str, owner: str) -> None:
        super().__init__(f"node id {node_id!r} is in use by another running node (ZooKeeper session {owner}): "
                         f"every node needs its own --node-id")
        self.node_id = node_id
        self.owner = owner


class ElectionLock(Protocol):
    """One node's attempt at the election lock."""

    def acquire(self) -> bool:
        """Block until this node holds the lock (True), or the attempt was cancelled (False)."""

    def release(self) -> None:
        """Give the lock up (:class:`~tstreams_embedded.errors.ClusterUnavailable` without a
        session: the lock then goes when the session expires)."""

    def cancel(self) -> None:
        """Make a blocked :meth:`acquire` return (from another thread); never fails."""


class KazooElectionLock:
    """kazoo's lock recipe as an :class:`ElectionLock`: a cancelled :meth:`acquire` returns
    False, and kazoo's errors (session lost, no answer) become
    :class:`~tstreams_embedded.errors.ClusterUnavailable`."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock

    def acquire(self) -> bool:
        from kazoo.exceptions import CancelledError, KazooException

        try:
            return bool(self.lock.acquire())
        except CancelledError:
            return False
        except (KazooException, self.lock.client.handler.timeout_exception) as exc:
            raise errors.ClusterUnavailable(f"ZooKeeper: waiting for the election lock failed: {exc!r}") from exc

    def release(self) -> None:
        from kazoo.exceptions import KazooException

        try:
            self.lock.release()
        except (KazooException, self.lock.client.handler.timeout_exception) as exc:
            raise errors.ClusterUnavailable(f"ZooKeeper: releasing the election lock failed: {exc!r}") from exc

    def cancel(self) -> None:
        self.lock.cancel()


class Coordinator(Protocol):
    """What a node needs from ZooKeeper (see the module docstring)."""

    def start(self, timeout: float) -> None:
        """Open the session (``ClusterUnavailable`` if it cannot within ``timeout`` seconds)."""

    def close(self) -> None:
        """Close the session at once (its ephemeral records vanish, its lock is freed)."""

    @property
    def granted_session_timeout(self) -> float | None:
        """Seconds of the session as the server granted it (None before a session exists)."""

    def add_state_listener(self, listener: Callable[[SessionState], None]) -> None:
        """Call ``listener`` (on the coordinator's thread; it must not call back) on every change."""

    def read_config(self) -> dict[str, Any] | None:
        """The cluster's configuration, or None if no cluster was initialised there."""

    def watch_config(self, callback: Callable[[dict[str, Any]], None]) -> None:
        """Call ``callback`` with the configuration now and after every change."""

    def cluster_id(self) -> str:
        """The cluster's unique id (created by the first node or ``cluster init`` to ask)."""

    def read_epoch(self, fresh: bool = False, timeout: float | None = None) -> int:
        """The current epoch (``fresh``: after a sync, so no older than any acknowledged bump)."""

    def bump_epoch(self) -> int:
        """Increment the epoch with a version check; return the new one."""

    def live_nodes(self) -> set[str]:
        """The ids of the nodes with a session (their published record exists)."""

    def node_records(self) -> dict[str, dict[str, Any]]:
        """Each live node's published record."""

    def publish_node(self, node_id: str, record: dict[str, Any], previous_session: str | None = None) -> None:
        """Publish this node's record, tied to this session: the claim of ``node_id``. A record
        of ``previous_session`` (this data directory's previous process) is replaced; one of any
        other live session raises :class:`NodeIdInUse`."""

    @property
    def session_token(self) -> str | None:
        """This session's id (None without a session)."""

    def node_owners(self) -> dict[str, str]:
        """Each live node id and the session that owns it."""

    def read_leader(self) -> dict[str, Any]:
        """The serving leader's record (empty if none)."""

    def publish_leader(self, record: dict[str, Any]) -> None:
        """Publish this node as the serving leader, tied to this session."""

    def drop_leader(self, node_id: str) -> None:
        """Remove the leader record if it names ``node_id``."""

    def election_lock(self, node_id: str) -> ElectionLock: ...

    def status(self) -> dict[str, Any]:
        """What ``tstreams cluster status`` prints (:func:`.zk.read_status`)."""

    @property
    def description(self) -> str:
        """Where the coordinator is, for messages (``zk://host:port/path``)."""


_STATES = {"CONNECTED": SessionState.CONNECTED, "SUSPENDED": SessionState.SUSPENDED, "LOST": SessionState.LOST}


class KazooCoordinator:
    """:class:`Coordinator` over a kazoo client, for the cluster at ``addr`` (layout:
    :mod:`.zk`). Calls are bounded (:class:`.zk.BoundedZk`)."""

    def __init__(self, addr: ZkAddress, session_timeout: float) -> None:
        self.addr = addr
        self._session_log = SessionLogger()  # learns the session timeout ZooKeeper granted
        self.client = new_client(addr.hosts, session_timeout, self._session_log)
        self.zk = BoundedZk(self.client)

    @property
    def description(self) -> str:
        return str(self.addr)

    def start(self, timeout: float) -> None:
        try:
            self.client.start(timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - kazoo raises its own timeout class
            self.close()  # (no retries left running)
            raise errors.ClusterUnavailable(f"cannot reach ZooKeeper at {self.addr.hosts} within {timeout:g} s: "
                                            f"{unreachable_reason(self.addr, exc)}") from None

    def close(self) -> None:
        try:
            self.client.stop()
            self.client.close()
        except Exception:  # noqa: BLE001 - closing anyway: nothing is left to use the client, whatever went wrong
            log.debug("closing the ZooKeeper client failed", exc_info=True)

    @property
    def granted_session_timeout(self) -> float | None:
        return self._session_log.granted

    def add_state_listener(self, listener: Callable[[SessionState], None]) -> None:
        self.client.add_listener(lambda state: listener(_STATES.get(str(state), SessionState.SUSPENDED)))

    def read_config(self) -> dict[str, Any] | None:
        if self.zk.exists(self.addr.config) is None:
            return None
        return decode_json(self.zk.get(self.addr.config)[0])

    def watch_config(self, callback: Callable[[dict[str, Any]], None]) -> None:
        def on_change(raw: bytes | None, _stat: Any) -> None:
            config = decode_json(raw)
            if config:
                callback(config)

        self.client.DataWatch(self.addr.config, on_change)

    def cluster_id(self) -> str:
        return ensure_cluster_id(self.zk, self.addr)

    def read_epoch(self, fresh: bool = False, timeout: float | None = None) -> int:
        zk = self.zk if timeout is None else BoundedZk(self.client, timeout)
        if fresh:
            zk.sync(self.addr.epoch)
        return int(zk.get(self.addr.epoch)[0] or b"0")

    def bump_epoch(self) -> int:
        from kazoo.exceptions import BadVersionError

        def bump() -> int:
            raw, stat = self.zk.get(self.addr.epoch)
            new = int(raw or b"0") + 1
            self.zk.set(self.addr.epoch, str(new).encode(), version=stat.version)
            return new

        try:
            return epoch_retry().call(bump, clock=time.monotonic, sleep=time.sleep)
        except BadVersionError:
            raise errors.ClusterUnavailable(f"the epoch at {self.addr} kept changing under this node's bump "
                                            f"for {ZK_CALL_TIMEOUT:g} s") from None

    def live_nodes(self) -> set[str]:
        return set(self.zk.get_children(self.addr.nodes))

    def node_records(self) -> dict[str, dict[str, Any]]:
        from kazoo.exceptions import NoNodeError

        out: dict[str, dict[str, Any]] = {}
        for child in self.zk.get_children(self.addr.nodes):
            try:
                out[child] = decode_json(self.zk.get(self.addr.node(child))[0])
            except NoNodeError:  # gone meanwhile
                continue
        return out

    @property
    def session_token(self) -> str | None:
        session = self.client.client_id
        return f"{session[0]:x}" if session is not None and session[0] else None

    def node_owners(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for child in self.zk.get_children(self.addr.nodes):
            stat = self.zk.exists(self.addr.node(child))
            if stat is not None:
                out[child] = f"{stat.ephemeralOwner:x}"
        return out

    def publish_node(self, node_id: str, record: dict[str, Any], previous_session: str | None = None) -> None:
        from kazoo.exceptions import NodeExistsError, NoNodeError

        path = self.addr.node(node_id)
        data = encode_json(record)
        mine = self.session_token
        stat = self.zk.exists(path)
        if stat is not None:
            owner = f"{stat.ephemeralOwner:x}"
            if owner == mine:
                self.zk.set(path, data)
                return
            if owner != previous_session:
                raise NodeIdInUse(node_id, owner)
            # the ephemeral node of this directory's previous process (a restart within the
            # session timeout): it would vanish when that session expires, and elections
            # (which ask the nodes listed here) would then miss this one
            try:
                self.zk.delete(path)
            except NoNodeError:
                pass
        try:
            self.zk.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            raise NodeIdInUse(node_id, "?") from None

    def read_leader(self) -> dict[str, Any]:
        if self.zk.exists(self.addr.leader) is None:
            return {}
        return decode_json(self.zk.get(self.addr.leader)[0])

    def publish_leader(self, record: dict[str, Any]) -> None:
        from kazoo.exceptions import NoNodeError

        try:
            self.zk.delete(self.addr.leader)
        except NoNodeError:
            pass
        self.zk.create(self.addr.leader, encode_json(record), ephemeral=True)

    def drop_leader(self, node_id: str) -> None:
        from kazoo.exceptions import NoNodeError

        try:
            if self.read_leader().get("node") == node_id:
                self.zk.delete(self.addr.leader)
        except (NoNodeError, errors.ClusterUnavailable):  # gone already, or no session: it vanishes with it
            pass

    def election_lock(self, node_id: str) -> ElectionLock:
        return KazooElectionLock(self.client.Lock(self.addr.election, node_id))

    def status(self) -> dict[str, Any]:
        return read_status(self.zk, self.addr)
