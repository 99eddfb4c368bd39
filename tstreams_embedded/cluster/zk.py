"""ZooKeeper addresses, the cluster's znode layout, ``cluster init`` and ``cluster status``.

Layout under the cluster path ``P`` (``zk://hosts/P``)::

    P/config          JSON {"nodes": N, "acks": "quorum",         written by `cluster init`
                            "log_retain_entries": R, "log_retain_bytes": B}
    P/epoch           the current epoch, a decimal integer        bumped with a version check
    P/id              the cluster's unique id (hex)               created once; kept in each data directory
    P/election/…      kazoo Lock nodes (the election)
    P/leader          ephemeral JSON {node, epoch, endpoint, repl, http}   the serving leader
    P/nodes/<id>      ephemeral JSON {node, role, endpoint, repl, http, epoch,
                                      last_index, last_epoch, commit, applied}
"""

from __future__ import annotations

import json
import logging
import math
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import errors
from .retention import (
    DEFAULT_COMPACTION_INTERVAL,
    DEFAULT_RETAIN_BYTES,
    DEFAULT_RETAIN_ENTRIES,
    check_bytes,
    check_compaction_interval,
    check_entries,
)

ACKS = ("quorum", "all", "leader")


@dataclass(frozen=True)
class ZkAddress:
    """A parsed ``zk://h1:2181,h2:2181/path``."""

    hosts: str
    path: str

    @classmethod
    def parse(cls, url: Any) -> ZkAddress:
        """Parse and check ``url``: every host ``name:port`` with a port from 1 to 65535, and a
        path ZooKeeper accepts (:func:`check_znode_path`) outside its reserved ``/zookeeper``."""
        if not isinstance(url, str) or not url.startswith("zk://"):
            raise errors.InvalidArgument(f"a cluster address looks like 'zk://host:2181/path', got {url!r}")
        rest = url[len("zk://"):]
        hosts, sep, path = rest.partition("/")
        path = "/" + path.strip("/")
        if not hosts or not sep or path == "/":
            raise errors.InvalidArgument(
                f"a cluster address needs hosts and a path: 'zk://host:2181/path', got {url!r}")
        for h in hosts.split(","):
            host, _, port = h.rpartition(":")
            if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise errors.InvalidArgument(
                    f"bad ZooKeeper host {h!r} in {url!r} (expected host:port, a port from 1 to 65535)")
        check_znode_path(path, url)
        return cls(hosts, path)

    def __str__(self) -> str:
        return f"zk://{self.hosts}{self.path}"

    @property
    def config(self) -> str:
        return self.path + "/config"

    @property
    def epoch(self) -> str:
        return self.path + "/epoch"

    @property
    def cluster_id(self) -> str:
        return self.path + "/id"

    @property
    def election(self) -> str:
        return self.path + "/election"

    @property
    def leader(self) -> str:
        return self.path + "/leader"

    @property
    def nodes(self) -> str:
        return self.path + "/nodes"

    def node(self, node_id: str) -> str:
        return f"{self.path}/nodes/{node_id}"


#: Characters ZooKeeper refuses in a path (its ``PathUtils.validatePath``), and ``?``/``#``
#: (a query or fragment in a URL, not part of a znode's name by intent).
_BAD_PATH_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff?#]")
RESERVED_PATH = "/zookeeper"


def check_znode_path(path: str, url: str) -> None:
    """Raise :class:`~tstreams_embedded.errors.InvalidArgument` unless ``path`` (from ``url``)
    is an absolute znode path ZooKeeper accepts for a cluster: no empty, ``.`` or ``..``
    segment, no control characters or ``?``/``#``, not under the reserved ``/zookeeper``."""
    bad = _BAD_PATH_CHARS.search(path)
    if bad:
        raise errors.InvalidArgument(
            f"a cluster path cannot contain {bad.group()!r} (control characters, '?' and '#' are refused), "
            f"got {url!r}")
    segments = path.split("/")[1:]
    if any(seg in ("", ".", "..") for seg in segments):
        raise errors.InvalidArgument(f"a cluster path cannot have empty, '.' or '..' segments, got {url!r}")
    if segments[0] == RESERVED_PATH[1:]:
        raise errors.InvalidArgument(f"{RESERVED_PATH} is ZooKeeper's own subtree, not for a cluster: got {url!r}")


#: Seconds any one ZooKeeper call may take on a start-up or election path before it fails
#: with :class:`~tstreams_embedded.errors.ClusterUnavailable` (kazoo's synchronous calls
#: wait forever on a server that accepted the connection but does not answer).
ZK_CALL_TIMEOUT = 10.0


class BoundedZk:
    """kazoo calls that cannot hang: each runs through kazoo's asynchronous API and waits at
    most ``timeout`` seconds; a timeout or a connection problem raises
    :class:`~tstreams_embedded.errors.ClusterUnavailable`, naming the call. kazoo's own
    errors about the data (``NoNodeError``, ``NodeExistsError``, ``BadVersionError``…)
    pass through unchanged."""

    def __init__(self, client: Any, timeout: float = ZK_CALL_TIMEOUT) -> None:
        self.client = client
        self.timeout = float(timeout)

    def _wait(self, result: Any, what: str) -> Any:
        from kazoo.exceptions import ConnectionLoss, SessionExpiredError

        try:
            return result.get(timeout=self.timeout)
        except self.client.handler.timeout_exception as exc:
            raise errors.ClusterUnavailable(
                f"ZooKeeper did not answer {what} within {self.timeout:g} s") from exc
        except (ConnectionLoss, SessionExpiredError) as exc:
            raise errors.ClusterUnavailable(f"ZooKeeper connection lost during {what}: {exc!r}") from exc

    def exists(self, path: str) -> Any:
        return self._wait(self.client.exists_async(path), f"exists({path})")

    def sync(self, path: str) -> Any:
        return self._wait(self.client.sync_async(path), f"sync({path})")

    def get(self, path: str) -> tuple[bytes, Any]:
        got: tuple[bytes, Any] = self._wait(self.client.get_async(path), f"get({path})")
        return got

    def get_children(self, path: str) -> list[str]:
        got: list[str] = self._wait(self.client.get_children_async(path), f"get_children({path})")
        return got

    def set(self, path: str, value: bytes, version: int = -1) -> Any:
        return self._wait(self.client.set_async(path, value, version), f"set({path})")

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False, makepath: bool = False) -> Any:
        return self._wait(self.client.create_async(path, value, ephemeral=ephemeral, makepath=makepath),
                          f"create({path})")

    def delete(self, path: str) -> Any:
        return self._wait(self.client.delete_async(path), f"delete({path})")

    def ensure_path(self, path: str) -> Any:
        return self._wait(self.client.ensure_path_async(path), f"ensure_path({path})")


def check_seconds(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite positive number of seconds, else
    :class:`~tstreams_embedded.errors.InvalidArgument` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise errors.InvalidArgument(f"{name} must be a finite positive number of seconds, got {value!r}")
    return float(value)


#: kazoo's log level for its protocol chatter (``kazoo.loggingsupport.BLATHER``).
BLATHER = 5


class SessionLogger(logging.Logger):
    """A logger for a :class:`~kazoo.client.KazooClient` (its public ``logger`` option) that
    learns the session timeout ZooKeeper *granted*: the server clamps the requested one to
    ``[minSessionTimeout, maxSessionTimeout]`` (by default 2 to 20 ticks) and kazoo keeps the
    requested value, logging the negotiated one only when a session is created. Everything
    else goes to the ``kazoo.client`` logger as usual.

    :attr:`granted` is the latest negotiated timeout in seconds (``None`` before the first
    session). Its :class:`ReconnectChatter` filter thins out kazoo's messages about each
    reconnection attempt."""

    def __init__(self) -> None:
        super().__init__("kazoo.client")
        self.parent = logging.getLogger("kazoo.client")
        self.granted: float | None = None
        self.addFilter(ReconnectChatter())

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if (level == BLATHER and isinstance(msg, str) and "negotiated session timeout" in msg
                and len(args) >= 3 and isinstance(args[2], (int, float))):
            self.granted = float(args[2]) / 1000.0
        super().log(level, msg, *args, **kwargs)


#: Seconds between two of kazoo's messages of one kind about reconnection attempts while
#: ZooKeeper is unreachable (it tries every :data:`RECONNECT_MAX_DELAY` s, each listed host:
#: several warnings a second otherwise).
RECONNECT_LOG_EVERY = 10.0
_RECONNECT_CHATTER = ("Connecting to ", "Connection dropped: ", "Connection time-out: ")
_CONNECTION_CHANGES = ("Zookeeper connection established", "Zookeeper connection lost")


class ReconnectChatter(logging.Filter):
    """A filter for a kazoo client's logger: after the connection is lost, the first message
    of each kind about a reconnection attempt ("Connecting to", "Connection dropped",
    "Connection time-out") is logged, then one every ``every`` seconds saying how many
    were left out, until the connection is established again."""

    def __init__(self, every: float = RECONNECT_LOG_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every = every
        self.clock = clock
        self.next_at: dict[str, float] = {}
        self.left_out: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg if isinstance(record.msg, str) else ""
        if msg.startswith(_CONNECTION_CHANGES):
            self.next_at.clear()
            self.left_out.clear()
            return True
        kind = next((k for k in _RECONNECT_CHATTER if msg.startswith(k)), None)
        if kind is None:
            return True
        now = self.clock()
        if now < self.next_at.get(kind, 0.0):
            self.left_out[kind] = self.left_out.get(kind, 0) + 1
            return False
        left_out = self.left_out.pop(kind, 0)
        if left_out:
            record.msg = f"{msg} ({left_out} more such messages in the last {self.every:g} s not logged)"
        self.next_at[kind] = now + self.every
        return True


#: Seconds at most between two attempts to reach ZooKeeper again (kazoo's own default
#: doubles the pause up to an hour: after a 20 s outage a client came back up to 12 s late,
#: its session expired meanwhile). The pause starts at 0.1 s and doubles up to this.
RECONNECT_MAX_DELAY = 0.5


#: Seconds at most a connection attempt waits for ZooKeeper's answer to its handshake.
#: kazoo waits ``session timeout / number of hosts``; a server that accepted the connection
#: but does not serve yet (a restarting ZooKeeper between binding its port and loading its
#: data) would otherwise hold a reconnecting client for a whole session timeout.
HANDSHAKE_TIMEOUT = 1.0


def handshake_hosts(hosts: str, timeout: float) -> str:
    """``hosts`` (``h1:p1,h2:p2``) repeated so that kazoo's wait for a handshake answer
    (``timeout`` divided by the number of hosts it is given) is at most
    :data:`HANDSHAKE_TIMEOUT`: each attempt then tries the next host (the same server again
    after the last one) instead of waiting longer. The order stays as given; kazoo shuffles."""
    listed = hosts.split(",")
    repeat = max(1, math.ceil(timeout / (HANDSHAKE_TIMEOUT * len(listed))))
    return ",".join(listed * repeat)


def new_client(hosts: str, timeout: float, logger: logging.Logger | None = None) -> Any:
    """A (not started) :class:`~kazoo.client.KazooClient` for ``hosts`` with a session of
    ``timeout`` seconds, which tries to reconnect at least every :data:`RECONNECT_MAX_DELAY`
    seconds while ZooKeeper is unreachable, retries its own calls as often, and waits at
    most :data:`HANDSHAKE_TIMEOUT` for a server to answer a connection attempt
    (:func:`handshake_hosts`). It logs to ``logger`` (by default a :class:`SessionLogger`)."""
    from kazoo.client import KazooClient
    from kazoo.retry import KazooRetry

    def retry() -> KazooRetry:
        return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_jitter=0.2, max_delay=RECONNECT_MAX_DELAY)

    return KazooClient(hosts=handshake_hosts(hosts, timeout), timeout=timeout,
                       logger=logger if logger is not None else SessionLogger(), connection_retry=retry(),
                       command_retry=retry())


def start_client(addr: ZkAddress, timeout: float, logger: logging.Logger | None = None,
                 connect_timeout: float | None = None) -> Any:
    """A started :class:`~kazoo.client.KazooClient` for ``addr`` (session timeout ``timeout``
    seconds; the connection waited for ``connect_timeout``, by default ``timeout``), or
    :class:`~tstreams_embedded.errors.ClusterUnavailable` (then no retries are left running)."""
    wait = timeout if connect_timeout is None else connect_timeout
    client = new_client(addr.hosts, timeout, logger)
    try:
        client.start(timeout=wait)
    except Exception as exc:  # noqa: BLE001 - kazoo raises its own timeout class
        client.stop()
        client.close()
        raise errors.ClusterUnavailable(
            f"cannot reach ZooKeeper at {addr.hosts} within {wait:g} s: {unreachable_reason(addr, exc)}") from None
    return client


def unreachable_reason(addr: ZkAddress, exc: Exception) -> str:
    """Why no server of ``addr`` could be reached: kazoo reports every failure as a
    time-out, so each host is probed once to tell a refused connection (wrong port, server
    down) from one that does not answer."""
    refused = []
    for host in addr.hosts.split(","):
        name, _, port = host.rpartition(":")
        try:
            with socket.create_connection((name or host, int(port) if port.isdigit() else 2181), timeout=1.0):
                pass
        except ConnectionRefusedError:
            refused.append(host)
        except (OSError, ValueError):
            pass
    if refused:
        return f"connection refused by {', '.join(refused)} (is ZooKeeper running on that port?)"
    return str(exc) or type(exc).__name__


def zk_error(exc: Exception, addr: ZkAddress, what: str) -> errors.TStreamsError:
    """A kazoo error met by ``what`` on ``addr``, as a tstreams error: ZooKeeper refusing the
    request (bad arguments, no permission, …) is :class:`~tstreams_embedded.errors.InvalidArgument`,
    anything else :class:`~tstreams_embedded.errors.ClusterUnavailable`."""
    from kazoo.exceptions import BadArgumentsError, InvalidACLError, NoAuthError, NotEmptyError

    name = type(exc).__name__
    if isinstance(exc, (BadArgumentsError, NoAuthError, InvalidACLError, NotEmptyError)):
        return errors.InvalidArgument(f"ZooKeeper refused to {what} at {addr}: {name}")
    return errors.ClusterUnavailable(f"ZooKeeper failed to {what} at {addr}: {name} {exc}".rstrip())


def ensure_cluster_id(zk: BoundedZk, addr: ZkAddress) -> str:
    """The cluster's unique id in ``P/id``, created (a random hex string) if missing."""
    import uuid

    from kazoo.exceptions import NodeExistsError

    if zk.exists(addr.cluster_id) is None:
        try:
            zk.create(addr.cluster_id, uuid.uuid4().hex.encode())
        except NodeExistsError:
            pass  # created meanwhile
    return zk.get(addr.cluster_id)[0].decode("ascii", "replace")


def quorum_of(nodes: int) -> int:
    return nodes // 2 + 1


def required_acks(acks: str, nodes: int) -> int:
    """How many nodes (the leader included) must hold an entry before it is committed."""
    if acks == "all":
        return nodes
    if acks == "leader":
        return 1
    return quorum_of(nodes)


def decode_json(raw: bytes | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw.decode("utf-8"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def encode_json(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True).encode("utf-8")


#: The configuration of a new cluster, for each option ``cluster init`` leaves out.
CONFIG_DEFAULTS: dict[str, Any] = {"acks": "quorum", "log_retain_entries": DEFAULT_RETAIN_ENTRIES,
                                   "log_retain_bytes": DEFAULT_RETAIN_BYTES,
                                   "compaction_interval": DEFAULT_COMPACTION_INTERVAL}


def checked_config(options: dict[str, Any]) -> dict[str, Any]:
    """The given configuration options (``None``: not given, left out), each checked."""
    checks: dict[str, Callable[[Any], Any]] = {
        "nodes": check_nodes, "acks": check_acks, "log_retain_entries": check_entries,
        "log_retain_bytes": check_bytes, "compaction_interval": check_compaction_interval}
    return {name: checks[name](value) for name, value in options.items() if value is not None}


def check_nodes(nodes: Any) -> int:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= 99:
        raise errors.InvalidArgument(f"nodes must be an integer from 1 to 99, got {nodes!r}")
    return nodes


def check_acks(acks: Any) -> str:
    if acks not in ACKS:
        raise errors.InvalidArgument(f"acks must be one of {ACKS}, got {acks!r}")
    return str(acks)


def init_cluster(url: str, nodes: int | None = None, acks: str | None = None, timeout: float = 10.0,
                 log_retain_entries: int | None = None, log_retain_bytes: int | None = None,
                 compaction_interval: float | None = None, force: bool = False) -> dict[str, Any]:
    """Create the cluster's znodes (``tstreams cluster init``), or change an existing
    cluster's configuration. Returns the configuration: the size, ``acks``, the log retention
    (:mod:`.retention`) and the compaction interval in seconds (0: never; :mod:`.compaction`).

    A new cluster needs ``nodes``; every option left out (``None``) takes its default
    (:data:`CONFIG_DEFAULTS`). On an existing cluster only the options given change: the
    others keep their current values (an init that names only ``--acks`` never resets the
    retention). ``config`` is rewritten with a version check (a concurrent rewrite fails
    this one), and the size may change by one node at a time (:mod:`.membership`); a bigger
    step raises ``InvalidArgument`` unless ``force`` (for a cluster that is down)."""
    from kazoo.exceptions import BadVersionError, NodeExistsError

    from .membership import check_size_change

    addr = ZkAddress.parse(url)
    given = checked_config({"nodes": nodes, "acks": acks, "log_retain_entries": log_retain_entries,
                            "log_retain_bytes": log_retain_bytes, "compaction_interval": compaction_interval})
    timeout = check_seconds("timeout", timeout)
    client = start_client(addr, timeout)
    zk = BoundedZk(client, timeout)
    try:
        for p in (addr.election, addr.nodes):
            zk.ensure_path(p)
        if zk.exists(addr.epoch) is None:
            zk.create(addr.epoch, b"0")
        ensure_cluster_id(zk, addr)
        if zk.exists(addr.config) is None:
            if "nodes" not in given:
                raise errors.InvalidArgument(f"{addr} has no cluster yet: give its size (--nodes) to create it")
            config = {**CONFIG_DEFAULTS, **given}
            try:
                zk.create(addr.config, encode_json(config))
                return config
            except NodeExistsError:
                pass  # created meanwhile: changed as an existing cluster's below
        raw, stat = zk.get(addr.config)
        existing = decode_json(raw)
        config = {**CONFIG_DEFAULTS, **existing, **given}
        current = existing.get("nodes")
        if isinstance(current, int) and "nodes" in given:
            check_size_change(current, given["nodes"], force, f"the cluster at {addr}")
        elif not isinstance(config.get("nodes"), int):
            raise errors.InvalidArgument(f"the configuration of {addr} has no size: give it (--nodes)")
        try:
            zk.set(addr.config, encode_json(config), version=stat.version)
        except BadVersionError:
            raise errors.InvalidArgument(
                f"the configuration of {addr} changed while this init ran: run it again") from None
    except errors.TStreamsError:
        raise
    except Exception as exc:  # noqa: BLE001 - kazoo's errors about the request
        raise zk_error(exc, addr, "create the cluster's znodes") from exc
    finally:
        client.stop()
        client.close()
    return config


def cluster_status(url: str, timeout: float = 10.0) -> dict[str, Any]:
    """What ``tstreams cluster status`` prints: leader, epoch, and each node's role, log
    position, commit and applied indexes, and lag behind the leader's log."""
    addr = ZkAddress.parse(url)
    timeout = check_seconds("timeout", timeout)
    client = start_client(addr, timeout)
    zk = BoundedZk(client, timeout)
    try:
        return read_status(zk, addr)
    except errors.TStreamsError:
        raise
    except Exception as exc:  # noqa: BLE001 - kazoo's errors about the request
        raise zk_error(exc, addr, "read the cluster's status") from exc
    finally:
        client.stop()
        client.close()


def read_status(zk: Any, addr: ZkAddress) -> dict[str, Any]:
    """:func:`cluster_status` through an open kazoo client ``zk`` (a node's own session)."""
    from kazoo.exceptions import NoNodeError

    if zk.exists(addr.config) is None:
        raise errors.InvalidArgument(f"no cluster at {addr}: run 'tstreams cluster init' first")
    config = decode_json(zk.get(addr.config)[0])
    epoch_raw = zk.get(addr.epoch)[0] if zk.exists(addr.epoch) else b"0"
    leader = decode_json(zk.get(addr.leader)[0]) if zk.exists(addr.leader) else {}
    nodes: dict[str, dict[str, Any]] = {}
    for child in sorted(zk.get_children(addr.nodes)):
        try:
            nodes[child] = decode_json(zk.get(addr.node(child))[0])
        except NoNodeError:  # gone meanwhile
            continue
    head = int(nodes.get(str(leader.get("node")), {}).get("last_index", 0)) if leader else 0
    for info in nodes.values():
        info["lag"] = max(0, head - int(info.get("last_index", 0))) if leader else None
    return {
        "cluster": str(addr),
        "config": config,
        "epoch": int(epoch_raw or b"0"),
        "leader": leader.get("node"),
        "leader_endpoint": leader.get("endpoint"),
        "nodes": nodes,
    }
