"""Observability of a real 3-node cluster: ``/metrics`` (parsed with prometheus-client's own
parser) follows real traffic and a real failover, and ``/overview`` (what the status page
polls) reports the nodes, their roles and lag, and the streams with consumer lag."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tstreams_embedded.ids import txn_millis
from tstreams_embedded.testing import eventually

from .conftest import SESSION, Cluster, ClusterNode

pytestmark = pytest.mark.timeout(180)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(node: ClusterNode) -> Samples:
    """Every sample of the node's ``/metrics``, keyed by (name, labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def overview(node: ClusterNode) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/overview", timeout=5) as r:
        out: dict[str, Any] = json.loads(r.read())
    return out


def test_metrics_follow_traffic_and_failover(cluster: Cluster, connect: Callable[..., Any]) -> None:
    leader = cluster.leader()
    followers = cluster.followers(leader)
    before = scrape(leader)
    assert value(before, "tstreams_cluster_role", role="leader") == 1
    assert value(before, "tstreams_cluster_serving") == 1
    epoch = value(before, "tstreams_cluster_epoch")
    assert epoch is not None and epoch >= 1
    assert (value(before, "tstreams_cluster_elections_total") or 0) >= 1  # it ran at least the one it won
    sessions = {state: value(before, "tstreams_cluster_zookeeper_session", state=state)
                for state in ("connected", "suspended", "lost")}
    assert sessions == {"connected": 1, "suspended": 0, "lost": 0}

    engine = connect()
    engine.create_stream("orders", partitions=1)
    engine.create_stream("wide", partitions=3)
    producer = engine.producer("orders", partition=0)
    ids = [producer.instant([f"item-{i}".encode()]) for i in range(5)]
    for p in range(3):
        engine.producer("wide", partition=p).instant([b"x"])
    consumer = engine.consumer("orders", name="billing", start="oldest")
    for _ in range(2):
        assert consumer.get_transaction() is not None
    consumer.checkpoint()
    writes = 2 + 5 + 3 + 1  # stream creations, instants, the offsets checkpoint

    after = scrape(leader)
    for name in ("tstreams_cluster_group_size_count", "tstreams_cluster_ack_seconds_count"):
        assert (value(after, name) or 0) - (value(before, name) or 0) >= writes, name
    for name in ("tstreams_cluster_commits_total", "tstreams_cluster_log_syncs_total",
                 "tstreams_engine_commits_total", "tstreams_server_received_total"):
        assert (value(after, name) or 0) > (value(before, name) or 0), name
    assert (value(after, "tstreams_cluster_ack_seconds_sum") or 0) > 0
    # partition heads and consumer lag, read from the engine at scrape time
    assert value(after, "tstreams_partition_head_timestamp_seconds", stream="orders", partition="0") == \
        txn_millis(ids[-1]) / 1000
    for p in range(3):
        assert (value(after, "tstreams_partition_head_timestamp_seconds", stream="wide", partition=str(p)) or 0) > 0
    lag_labels = {"stream": "orders", "consumer": "billing", "partition": "0"}
    assert value(after, "tstreams_consumer_offset_timestamp_seconds", **lag_labels) == txn_millis(ids[1]) / 1000
    assert value(after, "tstreams_consumer_lag_transactions", **lag_labels) == 3
    lag_s = value(after, "tstreams_consumer_lag_seconds", **lag_labels)
    assert lag_s is not None and lag_s >= 0
    assert value(after, "tstreams_overview_truncated") == 0

    # replication lag per follower, on the leader: both followers catch up to 0
    def caught_up() -> Samples | None:
        s = scrape(leader)
        lags = [value(s, "tstreams_cluster_replication_lag_entries", follower=f.node_id) for f in followers]
        return s if lags == [0, 0] else None

    eventually(caught_up, 20, 0.1, message="both followers acknowledged everything")

    # followers: their role, and the same stream metrics from their own applied state
    def follower_view(f: ClusterNode) -> Samples | None:
        s = scrape(f)
        ok = (value(s, "tstreams_cluster_role", role="follower") == 1 and value(s, "tstreams_cluster_serving") == 0
              and value(s, "tstreams_consumer_lag_transactions", **lag_labels) == 3
              and value(s, "tstreams_cluster_apply_lag_entries") == 0)
        return s if ok else None

    elections = {}
    for f in followers:
        s = eventually(lambda f=f: follower_view(f), 20, 0.1, message=f"{f.node_id} reports as a follower")
        assert value(s, "tstreams_cluster_replication_lag_entries", follower=leader.node_id) is None
        elections[f.node_id] = value(s, "tstreams_cluster_elections_total") or 0

    # the consumer moves on: its lag drops
    while consumer.get_transaction() is not None:
        pass
    consumer.checkpoint()
    assert value(scrape(leader), "tstreams_consumer_lag_transactions", **lag_labels) == 0

    # failover: the new leader's election and the new epoch show
    leader.kill()
    engine.producer("orders", partition=0).instant([b"after-failover"])  # retried until a new leader serves it
    new = cluster.leader(timeout=SESSION + 15)
    s = scrape(new)
    assert value(s, "tstreams_cluster_role", role="leader") == 1
    assert (value(s, "tstreams_cluster_elections_total") or 0) > elections[new.node_id]
    assert (value(s, "tstreams_cluster_epoch") or 0) > epoch
    assert value(s, "tstreams_consumer_lag_transactions", **lag_labels) == 1
    engine.close()


def test_overview_reports_nodes_roles_lag_and_streams(cluster: Cluster, connect: Callable[..., Any]) -> None:
    leader = cluster.leader()
    engine = connect()
    engine.create_stream("events", partitions=2)
    for p in (0, 1):
        for _ in range(3):
            engine.producer("events", partition=p).instant([b"e"])
    consumer = engine.consumer("events", name="reader", start="oldest", partitions=[0])
    assert consumer.get_transaction(0) is not None
    consumer.checkpoint()

    followers = {f.node_id for f in cluster.followers(leader)}

    def complete(node: ClusterNode) -> dict[str, Any] | None:
        o = overview(node)
        cluster_view = o["cluster"]
        if cluster_view is None or len(cluster_view["nodes"]) != 3:
            return None
        roles = sorted(n["role"] for n in cluster_view["nodes"].values())
        streams = {s["name"]: s for s in o["streams"]}
        if roles != ["follower", "follower", "leader"] or "events" not in streams:
            return None
        if [c["lag_txns"] for c in streams["events"]["consumers"]] != [2]:
            return None
        if o["this"]["role"] == "leader" and set(o.get("replication", {})) != followers:
            return None  # the leader knows a follower once it fetched in this epoch
        return o

    o = eventually(lambda: complete(leader), 20, 0.1, message="the leader's overview is complete")
    assert o["this"]["node"] == leader.node_id and o["this"]["serving"] is True
    assert o["cluster"]["leader"] == leader.node_id
    assert all(n["lag"] is not None and n["lag"] >= 0 for n in o["cluster"]["nodes"].values())
    events = next(s for s in o["streams"] if s["name"] == "events")
    assert events["partitions"] == 2 and len(events["heads"]) == 2 and all(h > 0 for h in events["heads"])
    (lag,) = events["consumers"]
    assert (lag["consumer"], lag["partition"]) == ("reader", 0)
    # a follower's page shows the same cluster, from its own session and state
    f = cluster.followers(leader)[0]
    fo = eventually(lambda: complete(f), 20, 0.1, message="a follower's overview is complete")
    assert fo["this"]["role"] == "follower" and "replication" not in fo
    engine.close()


def test_health_checks_log_at_debug(cluster: Cluster) -> None:
    """A follower answers HAProxy's ``/health/leader`` check with 503; Tornado logged each one
    at ERROR, a few times a second. Health checks now log at DEBUG (absent from the node's
    INFO log), while other requests still log as before."""
    follower = cluster.followers(cluster.leader())[0]
    for _ in range(5):
        assert follower.http_get("/health/leader")[0] == 503
        follower.http_get("/health/ready")
    assert follower.http_get("/status")[0] == 200
    eventually(lambda: "GET /status" in follower.log(), 10, 0.05, message="the access log shows /status")
    health_lines = [line for line in follower.log().splitlines() if "/health/" in line]
    assert health_lines == []
