"""HAProxy in front of a cluster (``cluster/haproxy-leader.cfg``): a plain ``tcp://`` client
on HAProxy carries on by itself when the leader is SIGKILLed, and every acknowledged item
is present exactly once (its submits carry a client ID and sequence number, which the
cluster deduplicates: :mod:`tstreams_embedded.net.client`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.testing import HAProxyProcess, ZooKeeperServer, eventually
from tstreams_embedded.testing.haproxy import haproxy_executable, write_leader_only_config

from .conftest import SESSION, Cluster
from .writers import ItemWriter, items_on

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(haproxy_executable() is None, reason="haproxy is not installed")]


def test_tcp_client_behind_haproxy_carries_on_after_leader_sigkill(cluster: Cluster, tmp_path: Path) -> None:
    leader = cluster.ready()
    config = write_leader_only_config(tmp_path / "haproxy-leader.cfg", [n.http_port for n in cluster.nodes])
    proxy = HAProxyProcess([n.port for n in cluster.nodes], tmp_path / "haproxy", config=config).start()
    engine: Any = None
    try:
        up = {f"n{i}" for i, n in enumerate(cluster.nodes, 1) if n is leader}
        eventually(lambda: {n for n, st in proxy.server_status().items() if st == "UP"} == up, 20, 0.05,
                   message=lambda: f"HAProxy routes to the leader only: {proxy.server_status()}")
        engine = ts.connect(proxy.endpoint, timeout=60)
        assert engine.backend.cluster_node  # server_info says so: submits carry (client_id, seq)
        engine.create_stream("s")
        writer = ItemWriter(engine, txn_every=10, stop_on_error=True)
        writer.start()
        eventually(lambda: len(writer.acked) >= 30 or writer.failed, 30, 0.05, message="writes flow")
        leader.kill()
        before = len(writer.acked)
        new = cluster.leader(60)
        assert new is not leader
        eventually(lambda: len(writer.acked) >= before + 30 or writer.failed, 60, 0.05,
                   message="the client carries on through HAProxy on the new leader")
        writer.stop()
        assert not writer.failed, f"an error reached the application: {writer.failed!r}"
        items = items_on(new)
        assert sorted(items) == sorted(writer.acked), "every acknowledged item, exactly once"
        assert len(items) == len(set(items))
        leader.start()
        state = eventually(cluster.converged, 30, 0.1, message="all nodes reach the same state", ignore=(OSError,))
        assert state is not None
    finally:
        if engine is not None:
            engine.close()
        proxy.stop()


def test_tcp_client_behind_haproxy_during_a_zookeeper_outage_is_told_no_leader(
        cluster: Cluster, zk: ZooKeeperServer, tmp_path: Path) -> None:
    """With ZooKeeper SIGSTOPped no node leads, so HAProxy has no server up and closes every
    connection at once. A ``tcp://`` client's write used to time out saying only "protocol
    error"; it now fails with ``ClusterUnavailable`` saying the cluster has no leader
    (ZooKeeper unavailable), and carries on once ZooKeeper is back."""
    cluster.ready()
    config = write_leader_only_config(tmp_path / "haproxy-leader.cfg", [n.http_port for n in cluster.nodes])
    proxy = HAProxyProcess([n.port for n in cluster.nodes], tmp_path / "haproxy", config=config).start()
    engine: Any = None
    try:
        eventually(lambda: "UP" in proxy.server_status().values(), 20, 0.05, message="HAProxy routes to the leader")
        engine = ts.connect(proxy.endpoint, timeout=SESSION + 3)
        assert engine.backend.cluster_node
        engine.create_stream("s")
        producer = engine.producer("s")
        producer.instant([b"before"])
        zk.pause()
        try:
            eventually(lambda: "UP" not in proxy.server_status().values(), SESSION + 15, 0.05,
                       message=lambda: f"HAProxy has no server up: {proxy.server_status()}")
            with pytest.raises(errors.ClusterUnavailable) as caught:
                producer.instant([b"during"])
            message = str(caught.value)
            assert "no leader" in message and "ZooKeeper unavailable" in message, message
            assert "protocol error" not in message, message
        finally:
            zk.resume()
        cluster.ready(60)
        eventually(lambda: "UP" in proxy.server_status().values(), 30, 0.05, message="HAProxy routes again")
        producer.instant([b"after"])
    finally:
        if engine is not None:
            engine.close()
        proxy.stop()


def test_aio_client_behind_haproxy_carries_on_after_leader_sigkill(cluster: Cluster, tmp_path: Path) -> None:
    """The asyncio client over ``tcp://`` (a ``zmq.asyncio`` socket, every call on the event
    loop) on HAProxy: 8 coroutines writing instants carry on through the leader's SIGKILL
    (the requests' deduplicated retries run on the loop too), and every acknowledged item is
    present exactly once."""
    import asyncio

    from tstreams_embedded import aio

    leader = cluster.ready()
    config = write_leader_only_config(tmp_path / "haproxy-leader.cfg", [n.http_port for n in cluster.nodes])
    proxy = HAProxyProcess([n.port for n in cluster.nodes], tmp_path / "haproxy", config=config).start()
    try:
        up = {f"n{i}" for i, n in enumerate(cluster.nodes, 1) if n is leader}
        eventually(lambda: {n for n, st in proxy.server_status().items() if st == "UP"} == up, 20, 0.05,
                   message=lambda: f"HAProxy routes to the leader only: {proxy.server_status()}")

        async def main() -> tuple[list[str], Any]:
            async with await aio.connect(proxy.endpoint, timeout=60) as engine:
                assert engine.native is not None  # on the loop, not in the pool
                await engine.create_stream("s")
                producer = await engine.producer("s")
                acked: list[str] = []
                progress = asyncio.Event()
                stop = asyncio.Event()

                async def write(w: int) -> None:
                    n = 0
                    while not stop.is_set():
                        item = f"a{w}-{n}"
                        await producer.instant([item.encode()])
                        acked.append(item)
                        progress.set()
                        n += 1

                async def until(count: int) -> None:
                    while len(acked) < count:
                        progress.clear()
                        await progress.wait()

                writers = asyncio.gather(*(write(w) for w in range(8)))
                try:
                    await asyncio.wait_for(until(30), 30)
                    leader.kill()
                    before = len(acked)
                    new = await asyncio.to_thread(cluster.leader, 60)
                    assert new is not leader
                    await asyncio.wait_for(until(before + 30), 60)
                finally:
                    stop.set()
                await writers  # an error that reached the application fails the test here
                return acked, new

        acked, new = asyncio.run(main())
        items = items_on(new)
        assert sorted(items) == sorted(acked), "every acknowledged item, exactly once"
        assert len(items) == len(set(items))
        leader.start()
        state = eventually(cluster.converged, 30, 0.1, message="all nodes reach the same state", ignore=(OSError,))
        assert state is not None
    finally:
        proxy.stop()
