"""The replicated cluster with a real ZooKeeper and real node processes (SIGKILL, SIGSTOP).

Each test starts a fresh 3-node cluster (``conftest.Cluster``, ZooKeeper session 2 s) and
proves one guarantee of docs/CLUSTER.md; every test ends by checking that all nodes reached
the same state (digest of streams, visible transactions with their items, offsets, markers).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import pytest

from tstreams_embedded import errors
from tstreams_embedded.cluster.zk import init_cluster
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.net import framing
from tstreams_embedded.net.client import RemoteBackend, encode_submit
from tstreams_embedded.testing import eventually

from .conftest import SESSION, Cluster, ClusterNode

pytestmark = pytest.mark.timeout(120)


def instant(stream: str, item: str) -> list[Any]:
    return [O.Instant(stream, 0, O.pack_items([item.encode()]))]


def submit_with_id(remote: RemoteBackend, ops: list[Any], client_id: str, seq: int, timeout: float = 10) -> Any:
    """A raw cluster submit carrying a request ID (what ClusterBackend sends)."""
    import msgpack

    body = encode_submit(ops, True)
    wire = msgpack.unpackb(body[0], raw=False, strict_map_key=False)
    frames = [framing.pack([wire[0], True, client_id, seq]), *body[1:]]
    return remote.connection.call_frames("submit", frames, timeout, retry_safe=False)


def items_on(node: ClusterNode) -> list[str]:
    items: list[str] = node.state(items=True)["items"]
    return items


def converged(c: Cluster, timeout: float = 20) -> dict[str, Any]:
    state: dict[str, Any] = eventually(c.converged, timeout, 0.1, message="all nodes reach the same state",
                                       ignore=(OSError,))
    return state


def test_durable_write_needs_a_quorum(zk: Any, tmp_path: Any) -> None:
    # (a long session: the leader keeps leading without followers for seconds, which
    # CheckQuorum allows only for an election timeout, 3/4 of the session)
    cluster = Cluster(zk, tmp_path, session=9.0).start()
    try:
        _durable_write_needs_a_quorum(cluster)
    finally:
        cluster.stop()


def _durable_write_needs_a_quorum(cluster: Cluster) -> None:
    leader = cluster.leader()
    engine = cluster.connect(timeout=60)
    engine.create_stream("s")
    followers = cluster.followers(leader)
    for f in followers:
        f.pause()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        top = max(int(leader.status()["match"].get(f.node_id, 0)) for f in followers)  # frozen: both stopped
        fut = pool.submit(engine.producer("s").instant, [b"needs-quorum"])
        # the leader appends (the write, then clock entries, each followed by a commit check)
        eventually(lambda: leader.status()["last_index"] >= top + 3, 30, 0.05, message="the leader appends")
        st = leader.status()
        assert st["commit"] <= top < st["last_index"], st  # held by the leader alone: not committed
        assert not fut.done()  # so not acknowledged
        assert "needs-quorum" not in items_on(leader)  # and not visible either
        for f in followers:
            f.resume()
        assert fut.result(timeout=30) > 0
    finally:
        for f in followers:
            if f.alive():
                f.resume()
        pool.shutdown()
    state = converged(cluster)
    assert state["transactions"] == 1
    assert items_on(cluster.nodes[0]).count("needs-quorum") == 1
    engine.close()


def test_failover_after_sigkill_loses_no_acknowledged_write(cluster: Cluster) -> None:
    leader = cluster.leader()
    engine = cluster.connect(timeout=60)
    engine.create_stream("s")
    producer = engine.producer("s")
    acked: list[str] = []
    for i in range(50):
        producer.instant([f"a{i}".encode()])
        acked.append(f"a{i}")
    leader.kill()
    t0 = time.monotonic()
    producer.instant([b"after-kill"])  # retried by the client until a new leader serves it
    failover = time.monotonic() - t0
    acked.append("after-kill")
    new_leader = cluster.leader()
    assert new_leader is not leader
    assert failover <= SESSION + 3, f"failover took {failover:.2f} s"
    for i in range(20):
        producer.instant([f"b{i}".encode()])
        acked.append(f"b{i}")
    leader.start()  # the old leader rejoins as a follower and catches up
    state = converged(cluster)
    items = items_on(new_leader)
    assert sorted(items) == sorted(acked), "every acknowledged write, exactly once"
    assert state["transactions"] == len(acked)
    engine.close()


def test_more_concurrent_writers_than_the_dedup_window_across_a_sigkill(cluster: Cluster) -> None:
    """80 threads write through one client (more than the cluster's window of a client's
    last 64 requests) while the leader is SIGKILLed: every write succeeds, exactly once
    (a write retried after the failover was answered RetryWindowExceeded when the others had
    taken 64 newer sequence numbers meanwhile)."""
    leader = cluster.leader()
    engine = cluster.connect(timeout=60)
    engine.create_stream("s")
    producer = engine.producer("s")
    killed = threading.Event()

    def writer(w: int) -> list[str]:
        written, i, after_kill = [], 0, 0
        while after_kill < 4:
            item = f"w{w}-{i}"
            producer.instant([item.encode()])
            written.append(item)
            i += 1
            after_kill += killed.is_set()
        return written

    with concurrent.futures.ThreadPoolExecutor(80) as pool:
        writers = [pool.submit(writer, w) for w in range(80)]
        eventually(lambda: sum(1 for _ in items_on(leader)) >= 80, 30, 0.05, message="writes before the kill")
        leader.kill()
        killed.set()
        acked = [item for f in writers for item in f.result(timeout=90)]
    new_leader = cluster.leader()
    eventually(lambda: sorted(items_on(new_leader)) == sorted(acked), 20, 0.1,
               message="every acknowledged write, exactly once")
    engine.close()


def test_paused_leader_is_fenced(cluster: Cluster) -> None:
    old = cluster.leader()
    engine = cluster.connect(timeout=60)
    engine.create_stream("s")
    engine.producer("s").instant([b"before"])
    direct = RemoteBackend(old.endpoint, timeout=30, failover_retries=False)
    direct.ping()
    old.pause()
    # a write sent to the paused leader waits in its socket
    pool = concurrent.futures.ThreadPoolExecutor(1)
    late = pool.submit(submit_with_id, direct, instant("s", "to-paused-leader"), "fence-test", 1, 30)
    new = eventually(lambda: next((n for n in cluster.followers(old) if n.is_leader()), None), SESSION + 10, 0.05,
                     message="a new leader once the paused one's session expired")
    engine.producer("s").instant([b"moved-on"])
    old.resume()
    with pytest.raises((errors.NotLeader, errors.ClusterUnavailable, errors.RemoteError)):
        late.result(timeout=30)  # acknowledged nothing after waking
    with pytest.raises(errors.NotLeader):
        direct.get_stream("s")  # and serves no (possibly stale) read
    pool.shutdown()
    direct.close()
    state = converged(cluster)
    assert "to-paused-leader" not in items_on(old)
    assert sorted(items_on(new)) == ["before", "moved-on"]
    assert state["transactions"] == 2
    assert cluster.leader() is not old or old.status()["epoch"] > 0
    engine.close()


def test_no_dirty_reads(zk: Any, tmp_path: Any) -> None:
    # a long session: the leader keeps leading without followers while the write is appended
    # (CheckQuorum allows that only for an election timeout, 3/4 of the session; a loaded
    # machine can take longer than 1.5 s to get the write there)
    cluster = Cluster(zk, tmp_path, session=9.0).start()
    try:
        _no_dirty_reads(cluster)
    finally:
        cluster.stop()


def _no_dirty_reads(cluster: Cluster) -> None:
    leader = cluster.leader()
    engine = cluster.connect(timeout=60)
    engine.create_stream("s")
    engine.producer("s").instant([b"committed"])
    followers = cluster.followers(leader)
    for f in followers:
        f.kill()  # (not paused: a paused follower could still receive the entry and later commit it)
    direct = RemoteBackend(leader.endpoint, timeout=60, failover_retries=False)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    fut = pool.submit(direct.submit, instant("s", "dirty"), True)
    before = leader.status()["commit"]
    eventually(lambda: leader.status()["last_index"] > before, 10, 0.05, message="the write is in the leader's log")
    assert "dirty" not in items_on(leader)  # in the log, not committed: not readable
    reader = RemoteBackend(leader.endpoint, timeout=5, failover_retries=False)  # a client reading from the leader
    assert [t.items for t in reader.transactions_range("s", 0, 0, 2**63 - 1)] == [[b"committed"]]
    reader.close()
    leader.kill()  # the only copy of the uncommitted entry is on its disk
    for f in followers:
        f.start()
    new = cluster.leader()
    with pytest.raises((errors.RemoteError, errors.ClusterUnavailable)):
        fut.result(timeout=60)
    pool.shutdown()
    direct.close()
    engine.producer("s").instant([b"after"])
    leader.start()  # rejoins: truncates its uncommitted suffix, never applies it
    converged(cluster)
    for node in cluster.nodes:
        assert sorted(items_on(node)) == ["after", "committed"], node.node_id
    assert new is not leader
    assert "truncated 1 uncommitted log entries" in leader.log()
    engine.close()


def test_retried_request_is_applied_once_across_failover(cluster: Cluster) -> None:
    leader = cluster.leader()
    engine = cluster.connect(timeout=60)
    engine.create_stream("s")
    direct = RemoteBackend(leader.endpoint, timeout=30, failover_retries=False)
    first = submit_with_id(direct, instant("s", "once"), "client-x", 7)
    again = submit_with_id(direct, instant("s", "once"), "client-x", 7)  # a retry on the same leader
    assert again == first
    direct.close()
    leader.kill()
    new = cluster.leader()
    direct = RemoteBackend(new.endpoint, timeout=30, failover_retries=False)
    after_failover = submit_with_id(direct, instant("s", "once"), "client-x", 7)  # a retry after failover
    assert after_failover == first
    other = submit_with_id(direct, instant("s", "once"), "client-x", 8)  # a new request is applied
    assert other != first
    direct.close()
    leader.start()
    state = converged(cluster)
    assert items_on(new).count("once") == 2
    assert state["transactions"] == 2
    engine.close()


def test_killed_follower_catches_up(cluster: Cluster) -> None:
    leader = cluster.leader()
    engine = cluster.connect(timeout=60)
    engine.create_stream("s", partitions=2)
    follower = cluster.followers(leader)[0]
    follower.kill()
    producer = engine.producer("s")
    for i in range(100):
        producer.instant([f"i{i}".encode()])
    consumer = engine.consumer("s", "g")
    got = list(iter(consumer.get_transaction, None))
    consumer.checkpoint()
    assert len(got) == 100
    follower.start()
    state = converged(cluster)
    assert state["transactions"] == 100 and state["offsets"] == 2
    assert leader.status()["last_index"] == follower.status()["last_index"]
    engine.close()


def test_leader_cut_off_from_zookeeper_stops_acknowledging(cluster: Cluster, zk: Any) -> None:
    """A leader that loses its ZooKeeper session stops acknowledging at once (within its
    lease): ZooKeeper itself is SIGSTOPped, the leader's /health/leader turns 503 and a write
    sent to it is refused; once ZooKeeper runs again the cluster recovers with every
    acknowledged write."""
    leader = cluster.leader()
    engine = cluster.connect(timeout=60)
    engine.create_stream("s")
    acked = []
    for i in range(5):
        engine.producer("s").instant([f"a{i}".encode()])
        acked.append(f"a{i}")
    direct = RemoteBackend(leader.endpoint, timeout=30, failover_retries=False)
    direct.ping()
    zk.pause()
    try:
        eventually(lambda: leader.http_get("/health/leader")[0] == 503, SESSION, 0.02,
                   message="the leader stops serving within its lease (0.75 x session timeout)")
        with pytest.raises((errors.NotLeader, errors.ClusterUnavailable)):
            submit_with_id(direct, instant("s", "cut-off"), "zk-paused", 1, 30)
        assert "cut-off" not in items_on(leader)
    finally:
        zk.resume()
    direct.close()
    cluster.ready(60)  # sessions come back (or expire and are renewed); a leader serves again
    engine.producer("s").instant([b"after"])
    acked.append("after")
    converged(cluster, 30)
    for node in cluster.nodes:
        assert sorted(items_on(node)) == sorted(acked), node.node_id
    engine.close()


def test_open_transaction_survives_failover(cluster: Cluster) -> None:
    """An open transaction is replicated state: items sent before the leader is SIGKILLed
    and after are all in it, exactly once, when it is checkpointed on the new leader."""
    leader = cluster.leader()
    engine = cluster.connect(timeout=60, txn_ttl=10.0)
    engine.create_stream("s")
    txn = engine.producer("s").new_transaction(partition=0)
    before = [f"before-{i}".encode() for i in range(5)]
    for item in before:
        txn.send(item)
    txn.flush()  # OPEN + DATA committed on a quorum
    leader.kill()
    after = [f"after-{i}".encode() for i in range(5)]
    for item in after:
        txn.send(item)
    txn.checkpoint()  # on the new leader
    new = cluster.leader()
    assert new is not leader
    got = [t.items for t in engine.backend.transactions_range("s", 0, 0, 2**63 - 1)]
    assert got == [before + after], got
    leader.start()
    state = converged(cluster)
    assert state["transactions"] == 1
    assert sorted(items_on(leader)) == sorted(i.decode() for i in before + after)
    engine.close()


def test_acks_leader_loses_a_write_held_by_the_leader_alone(zk: Any, tmp_path: Any) -> None:
    """``--acks leader`` (docs/CLUSTER.md): a write is acknowledged once the leader alone has
    it (here: with both followers down), so it is lost if the leader dies before a follower
    fetched it; the old leader then
    reports itself diverged when it rejoins and re-syncs from a snapshot (its applied suffix
    is discarded), and all nodes end equal."""
    c = Cluster(zk, tmp_path)
    init_cluster(c.url, 3, acks="leader")  # the cluster's setting (a node's --acks may only strengthen it)
    c.start()
    try:
        old = c.ready()
        engine = c.connect(timeout=60)
        c.closers.append(engine.close)
        engine.create_stream("s")
        engine.producer("s").instant([b"everywhere"])
        converged(c)
        followers = c.followers(old)
        for f in followers:
            # killed, not paused: a paused follower's parked fetch could still receive the entry
            f.kill()
        direct = RemoteBackend(old.endpoint, timeout=30, failover_retries=False)
        try:
            assert submit_with_id(direct, instant("s", "leader-only"), "acks-leader", 1, 30)  # acknowledged alone
            assert "leader-only" in items_on(old)
            old.kill()
        finally:
            direct.close()
        for f in followers:
            f.start()
        new = c.leader(60)
        assert new is not old
        assert "leader-only" not in items_on(new)  # lost: as documented for --acks leader
        engine.producer("s").instant([b"after"])
        old.start()
        eventually(lambda: old.status()["snapshots_installed"] >= 1, 60, 0.1,
                   message="the old leader re-syncs from a snapshot", ignore=(OSError,))
        assert "diverges below this node's applied index" in old.log()
        converged(c)
        for node in c.nodes:
            assert sorted(items_on(node)) == ["after", "everywhere"], node.node_id
    finally:
        c.stop()
