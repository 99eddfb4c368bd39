"""The web console on the nodes of a real 3-node cluster (``tstreams serve --cluster --http``):
every node serves ``/console/`` and ``/api/`` next to its status page, each with its own
replicated view, which converges to the same figures on all nodes."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tstreams_embedded.testing import eventually

from .conftest import Cluster

pytestmark = pytest.mark.timeout(120)


def test_every_node_serves_the_console(cluster: Cluster, connect: Callable[..., Any]) -> None:
    engine = connect()
    engine.create_stream("orders", partitions=2)
    producer = engine.producer("orders", partition=0)
    for i in range(4):
        producer.instant([f"order-{i}".encode()])
    consumer = engine.consumer("orders", name="billing", partitions=[0])
    consumer.get_transaction(0)
    consumer.checkpoint()

    def lag(node: Any) -> Any:
        status, body = node.http_get("/api/streams/orders/consumers/billing")
        return [(r["partition"], r["lag_transactions"]) for r in body["rows"]] if status == 200 else status

    for node in cluster.nodes:
        eventually(lambda node=node: lag(node) == [(0, 3), (1, 0)], 20, 0.05,
                   message=lambda node=node: f"{node.node_id}: {lag(node)}")
        assert node.http_get("/api/streams/orders/partitions/5/messages")[0] == 400
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/console/", timeout=5) as r:
            assert b"tstreams console" in r.read()
    engine.close()
