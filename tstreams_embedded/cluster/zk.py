"""ZooKeeper addresses, the cluster's znode layout, ``cluster init`` and ``cluster status``.

Layout under the cluster path ``P`` (``zk://hosts/P``)::

    P/config          JSON {"nodes": N, "acks": "quorum"}        written by `cluster init`
    P/epoch           the current epoch, a decimal integer        bumped with a version check
    P/election/…      kazoo Lock nodes (the election)
    P/leader          ephemeral JSON {node, epoch, endpoint, repl, http}   the serving leader
    P/nodes/<id>      ephemeral JSON {node, role, endpoint, repl, http, epoch,
                                      last_index, last_epoch, commit, applied}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .. import errors

ACKS = ("quorum", "all", "leader")


@dataclass(frozen=True)
class ZkAddress:
    """A parsed ``zk://h1:2181,h2:2181/path``."""

    hosts: str
    path: str

    @classmethod
    def parse(cls, url: Any) -> ZkAddress:
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
            if not host or not port.isdigit():
                raise errors.InvalidArgument(f"bad ZooKeeper host {h!r} in {url!r} (expected host:port)")
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


def init_cluster(url: str, nodes: int, acks: str = "quorum", timeout: float = 10.0) -> dict[str, Any]:
    """Create the cluster's znodes (``tstreams cluster init``); existing ones keep their data
    except ``config``, which is rewritten. Returns the configuration."""
    from kazoo.client import KazooClient

    addr = ZkAddress.parse(url)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= 99:
        raise errors.InvalidArgument(f"nodes must be an integer from 1 to 99, got {nodes!r}")
    if acks not in ACKS:
        raise errors.InvalidArgument(f"acks must be one of {ACKS}, got {acks!r}")
    config = {"nodes": nodes, "acks": acks}
    zk = KazooClient(hosts=addr.hosts, timeout=timeout)
    try:
        zk.start(timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - kazoo raises its own timeout class
        raise errors.ClusterUnavailable(f"cannot reach ZooKeeper at {addr.hosts}: {exc}") from exc
    try:
        for p in (addr.election, addr.nodes):
            zk.ensure_path(p)
        if zk.exists(addr.epoch) is None:
            zk.create(addr.epoch, b"0")
        if zk.exists(addr.config) is None:
            zk.create(addr.config, encode_json(config))
        else:
            zk.set(addr.config, encode_json(config))
    finally:
        zk.stop()
        zk.close()
    return config


def cluster_status(url: str, timeout: float = 10.0) -> dict[str, Any]:
    """What ``tstreams cluster status`` prints: leader, epoch, and each node's role, log
    position, commit and applied indexes, and lag behind the leader's log."""
    from kazoo.client import KazooClient

    addr = ZkAddress.parse(url)
    zk = KazooClient(hosts=addr.hosts, timeout=timeout)
    try:
        zk.start(timeout=timeout)
    except Exception as exc:  # noqa: BLE001
        raise errors.ClusterUnavailable(f"cannot reach ZooKeeper at {addr.hosts}: {exc}") from exc
    try:
        return read_status(zk, addr)
    finally:
        zk.stop()
        zk.close()


def read_status(zk: Any, addr: ZkAddress) -> dict[str, Any]:
    """:func:`cluster_status` through an open kazoo client ``zk`` (a node's own session)."""
    if zk.exists(addr.config) is None:
        raise errors.InvalidArgument(f"no cluster at {addr}: run 'tstreams cluster init' first")
    config = decode_json(zk.get(addr.config)[0])
    epoch_raw = zk.get(addr.epoch)[0] if zk.exists(addr.epoch) else b"0"
    leader = decode_json(zk.get(addr.leader)[0]) if zk.exists(addr.leader) else {}
    nodes: dict[str, dict[str, Any]] = {}
    for child in sorted(zk.get_children(addr.nodes)):
        try:
            nodes[child] = decode_json(zk.get(addr.node(child))[0])
        except Exception:  # noqa: BLE001 - gone meanwhile
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
