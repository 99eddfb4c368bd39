"""The replicated cluster: ZooKeeper election, a replicated commit log with quorum acks,
epoch fencing, deterministic apply on every node. See ``docs/CLUSTER.md``.

* :class:`~.node.Node`: one member (``tstreams serve --cluster zk://…``, :mod:`.serve`);
* :class:`~.client.ClusterBackend`: what ``ts.connect("zk://…")`` uses to follow the leader
  (``read_from="follower"``: :mod:`.follower_reads`);
* ``--http``: health checks, ``/metrics`` (:mod:`.metrics`), the status page (:mod:`.status_page`);
* :func:`~.zk.init_cluster`, :func:`~.zk.cluster_status`: ``tstreams cluster init|status``.

Needs kazoo (``pip install tstreams-embedded[cluster]``).
"""

from __future__ import annotations

from .zk import ZkAddress, cluster_status, init_cluster

__all__ = ["ZkAddress", "cluster_status", "init_cluster"]
