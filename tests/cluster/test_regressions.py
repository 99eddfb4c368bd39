"""Regression tests for cluster bugs found by the Jepsen-style test (test_jepsen.py), each
on a real ZooKeeper with real node processes."""

from __future__ import annotations

import concurrent.futures
import json
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from tstreams_embedded import errors
from tstreams_embedded.cluster.zk import ZkAddress
from tstreams_embedded.net.client import RemoteBackend
from tstreams_embedded.testing import ZooKeeperServer, eventually

from .conftest import SESSION, Cluster, ClusterNode
from .test_cluster import converged, items_on
from .test_observe import scrape, value

#: A session long enough that a restart always comes before it expires, even on a loaded
#: machine (the test ZooKeeper's tickTime of 500 ms allows up to 10 s).
LONG_SESSION = 9.0


def test_a_node_restarted_within_the_session_timeout_owns_its_membership_node(zk: ZooKeeperServer,
                                                                              tmp_path: Path) -> None:
    """Bug: a node restarted before its previous process's ZooKeeper session expired
    updated that session's ephemeral ``P/nodes/<id>`` (a plain ``set``) instead of creating
    its own. When the old session expired the node vanished, and the next election did not
    ask this node ("only 1 of 3 nodes answered; not leading"), delaying failover."""
    cluster = Cluster(zk, tmp_path, session=LONG_SESSION).start()
    client = zk.client()
    client.start()
    try:
        leader = cluster.leader(timeout=60)
        follower = cluster.followers(leader)[0]
        path = ZkAddress.parse(cluster.url).node(follower.node_id)
        before = client.get(path)[1].ephemeralOwner
        follower.kill()
        t0 = time.monotonic()
        follower.start()
        assert time.monotonic() - t0 < LONG_SESSION, "restarted too slowly to reproduce the bug"
        data, stat = client.get(path)
        assert stat.ephemeralOwner != before, "the membership node still belongs to the killed process's session"
        assert json.loads(data)["node"] == follower.node_id
    finally:
        client.stop()
        client.close()
        cluster.stop()


def test_expiry_seen_by_a_read_agrees_with_the_replicated_apply(zk: ZooKeeperServer, tmp_path: Path) -> None:
    """Bug: readers judged an open transaction's expiry by the leader's wall clock, and the
    leader marked it INVALID in its own state, while the apply step judges it by the time of
    the log entry. A checkpoint logged before the deadline but applied after a read past the
    deadline (here: the followers are paused meanwhile) then failed on the leader and
    succeeded on the followers: diverged nodes, and a transaction visible behind a consumer
    that had skipped it. Reads now use the state machine's clock (the time of the last
    applied entry), which every later entry is at or past.

    (A long session: the leader must keep leading for seconds without hearing a follower,
    which CheckQuorum allows only for an election timeout, 3/4 of the session.)"""
    cluster = Cluster(zk, tmp_path, session=LONG_SESSION).start()
    try:
        _expiry_seen_by_a_read(cluster)
    finally:
        cluster.stop()


def _expiry_seen_by_a_read(cluster: Cluster) -> None:
    leader = cluster.leader()
    engine = cluster.connect(timeout=60, txn_ttl=2.0, keepalive_interval=None)
    engine.create_stream("s")
    producer = engine.producer("s", partition=0)
    txn = producer.new_transaction(partition=0)
    txn.send(b"late")
    txn.flush()  # OPEN + DATA committed; deadline = (the state clock) + 2 s
    flushed = leader.status()["clock_ms"]  # the time of the leader's last log entry: at or past the OPEN's
    followers = cluster.followers(leader)
    for f in followers:
        f.pause()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        before = leader.status()["last_index"]
        outcome = pool.submit(txn.checkpoint)  # logged at once (before the deadline), not committed
        eventually(lambda: leader.status()["last_index"] > before, 10, 0.02, message="the checkpoint is logged")
        # the leader's clock entries (logged, not committed) carry its time past the deadline
        eventually(lambda: leader.status()["clock_ms"] > flushed + 3000, 10, 0.05,
                   message="the leader logged a time past the deadline")
        reader = RemoteBackend(leader.endpoint, timeout=10, failover_retries=False)
        fetched = reader.fetch("s", 0, 0)  # a read past the deadline, on the leader
        reader.close()
    finally:
        for f in followers:
            f.resume()
    pool.shutdown(wait=True)
    state = converged(cluster)
    visible = "late" in items_on(leader)
    try:
        outcome.result()
        acknowledged = True
    except errors.TransactionExpired:
        acknowledged = False
    assert visible == acknowledged, "the client was told the opposite of what the cluster holds"
    if visible:  # the read must not have passed over a transaction that became visible
        assert fetched.position < txn.id and not fetched.txns, fetched
    assert state["transactions"] == int(visible)
    engine.close()


def test_an_abandoned_transaction_expires_for_readers_without_further_writes(cluster: Cluster) -> None:
    """Reads judge expiry by the state clock (the time of the last applied entry); the idle
    leader's clock entries move it on, so a transaction whose producer vanished stops
    blocking its partition after its TTL even if nobody writes."""
    cluster.leader()
    engine = cluster.connect(timeout=60, txn_ttl=1.0, keepalive_interval=None)
    engine.create_stream("s")
    producer = engine.producer("s", partition=0)
    abandoned = producer.new_transaction(partition=0)
    abandoned.send(b"never")
    abandoned.flush()
    producer.forget(abandoned)  # as if its producer died: nobody keeps it alive or cancels it
    producer.instant([b"after"], partition=0)  # behind the open transaction: blocked until it expires
    consumer = engine.consumer("s", "g")
    got = eventually(consumer.get_transaction, 15, 0.1, message="the reader passes the expired transaction")
    assert got.items == [b"after"]
    converged(cluster)
    engine.close()


def test_a_call_waiting_on_a_deposed_leader_moves_to_the_new_one(cluster: Cluster) -> None:
    """Bug (found as a 6 s failover in a loaded run): a write issued just as the leader was
    SIGKILLed waited, unsent, for the whole request timeout although ZooKeeper already named
    a new leader. Reproduced deterministically with SIGSTOP and a client heartbeat too long
    to notice the silence: the call waited for its 90 s timeout. The client now drops the
    old leader's connection as soon as a new leader is published and retries there (same
    request ID: applied once)."""
    old = cluster.leader()
    engine = cluster.connect(timeout=120, request_timeout=90, heartbeat=60)  # no silence detection meanwhile
    engine.create_stream("s")
    producer = engine.producer("s", partition=0)
    producer.instant([b"before"], partition=0)
    old.pause()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        late = pool.submit(producer.instant, [b"during"], 0)
        eventually(lambda: any(n.is_leader() for n in cluster.followers(old)), SESSION + 30, 0.05,
                   message="a new leader")
        # far less than the 90 s request timeout the call would otherwise wait
        assert late.result(timeout=30) > 0
    finally:
        old.resume()
        pool.shutdown()
    converged(cluster)
    assert sorted(items_on(cluster.leader())) == ["before", "during"]
    engine.close()


# ---------------------------------------------------------------------------- audit 10
def test_the_lease_comes_from_the_session_timeout_zookeeper_granted(tmp_path: Path) -> None:
    """Bug: the leader's lease was 0.75 x the *requested* session timeout. ZooKeeper caps a
    session at its maxSessionTimeout, so a node asking for more than the cap held a lease
    longer than its session: woken after the session expired (and another leader was
    elected), it still passed ``serving()``. The lease is now 0.75 x the granted timeout."""
    zk = ZooKeeperServer(tmp_path / "zk", extra_config={"maxSessionTimeout": "2000"})  # tickTime 500: 1 to 2 s
    zk.start()
    cluster = Cluster(zk, tmp_path / "c", n=1, session=3.0)
    try:
        cluster.start()
        leader = cluster.leader(timeout=60)
        status = leader.status()
        assert status["session_timeout"] == 3.0
        assert status["session_timeout_granted"] == 2.0
        assert status["lease_seconds"] == 1.5
        assert "granted a 2 s session for the 3 s asked" in leader.log()
    finally:
        cluster.stop()
        zk.cleanup()


def _repl_socket(endpoint: str) -> Any:
    import zmq

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def _ask(endpoint: str, request: dict[str, Any], timeout_ms: int = 5000) -> dict[str, Any] | None:
    """Send one request to a node's replication port; its answer, or None if none came."""
    sock = _repl_socket(endpoint)
    try:
        sock.send(msgpack.packb(request, use_bin_type=True))
        if not sock.poll(timeout_ms):
            return None
        return dict(msgpack.unpackb(sock.recv(), raw=False))
    finally:
        sock.close(0)


def test_a_forged_epoch_cannot_block_elections(cluster: Cluster) -> None:
    """Bug: a ``hello`` naming a huge epoch, sent to the (unauthenticated) replication port,
    set every receiving node's known epoch: all later real elections were refused until a
    restart. A ``fetch`` naming one deposed the leader. Such epochs are now believed only
    once ZooKeeper's ``P/epoch`` has reached them."""
    leader = cluster.leader(timeout=60)
    epoch = leader.status()["epoch"]
    followers = cluster.followers(leader)
    for follower in followers:
        answer = _ask(follower.status()["repl"], {"op": "hello", "epoch": 10**12, "node": "forger"})
        assert answer is not None and answer["ok"] is False
        assert follower.status()["known_epoch"] < 10**12
    # a forged fetch to the leader, then a hello on the same connection (answered after it)
    sock = _repl_socket(leader.status()["repl"])
    try:
        sock.send(msgpack.packb({"op": "fetch", "rid": 1, "node": "forger", "known": 10**12, "from": 1,
                                 "last_epoch": 0, "commit": 0}, use_bin_type=True))
        sock.send(msgpack.packb({"op": "hello", "epoch": 0, "node": "forger"}, use_bin_type=True))
        assert sock.poll(5000)
        assert msgpack.unpackb(sock.recv(), raw=False) == {"ok": False, "known": epoch}, "no answer to the fetch"
    finally:
        sock.close(0)
    assert leader.is_leader() and leader.status()["epoch"] == epoch, "the leader was not deposed"
    engine = cluster.connect(timeout=60)
    cluster.closers.append(engine.close)
    engine.create_stream("s")
    producer = engine.producer("s")
    producer.instant([b"before"])
    leader.kill()
    producer.instant([b"after"])  # a real election among the two followers the forger wrote to
    new_leader = cluster.leader(timeout=60)
    assert new_leader is not leader and new_leader.status()["epoch"] > epoch
    assert sorted(items_on(new_leader)) == ["after", "before"]


def test_an_oversized_frame_to_the_replication_port_is_dropped(cluster: Cluster) -> None:
    """Bug: the replication port had no message size limit (nor queue bounds): any client
    could make a node buffer frames of any size. A request larger than the largest real one
    is now dropped (with its connection) by ZeroMQ, and the node stays healthy."""
    leader = cluster.leader(timeout=60)
    follower = cluster.followers(leader)[0]
    repl = follower.status()["repl"]
    big = {"op": "hello", "epoch": 0, "node": "x", "pad": b"\0" * (1 << 20)}
    assert _ask(repl, big, timeout_ms=3000) is None, "a 1 MiB request was read and answered"
    small = _ask(repl, {"op": "hello", "epoch": 0, "node": "x"})
    assert small is not None and small["ok"] is False
    assert follower.alive() and follower.status()["role"] == "follower"
    engine = cluster.connect(timeout=60)
    cluster.closers.append(engine.close)
    engine.create_stream("s")
    engine.producer("s").instant([b"x"])
    eventually(lambda: follower.status()["applied"] >= leader.status()["commit"] > 0, 30, 0.05,
               message="the follower still replicates")


def test_a_data_directory_of_another_cluster_is_refused(zk: ZooKeeperServer, tmp_path: Path) -> None:
    """Bug (#20): a node started on a data directory from another cluster followed this one
    silently (its log happened to pass the consistency check) and held items no other node
    had. The id of the cluster a directory joined (``P/id``) is now kept in the directory
    (``cluster-id``), and a node of another cluster refuses to start on it."""
    first = Cluster(zk, tmp_path / "a", n=1).start()
    try:
        engine = first.connect(timeout=60)
        first.closers.append(engine.close)
        engine.create_stream("s")
        engine.producer("s").instant([b"first-cluster-only"])
    finally:
        first.stop()
    data = first.nodes[0].data
    assert (Path(data) / "cluster-id").exists()
    second = Cluster(zk, tmp_path / "b", n=1)
    stranger = second.add_node("n9")
    stranger.data = data
    try:
        with pytest.raises(RuntimeError, match="belongs to another cluster"):
            stranger.start(timeout=60)
    finally:
        second.stop()
    first.nodes[0].start(timeout=60)  # its own cluster still takes it
    first.nodes[0].stop()


def test_a_duplicate_node_id_refuses_to_start(cluster: Cluster) -> None:
    """Bug (#20): a second process started with a running node's ``--node-id`` was
    accepted, the leader counted its acknowledgements as the real node's, and 888
    acknowledged writes were lost after a failover. A node now claims its id with its
    ZooKeeper session (``P/nodes/<id>``); a duplicate waits for the holder's session to end
    (that of a crashed process would, within the session timeout) and refuses to start."""
    leader = cluster.leader(timeout=60)
    taken = cluster.followers(leader)[0].node_id
    duplicate = ClusterNode(taken, cluster.root / "duplicate", cluster.root / "logs", cluster.url,
                            session_timeout=cluster.session)
    with pytest.raises(RuntimeError, match="in use by another running node"):
        duplicate.start(timeout=60)
    engine = cluster.connect(timeout=60)
    cluster.closers.append(engine.close)
    engine.create_stream("s")
    engine.producer("s").instant([b"after"])
    converged(cluster)


def test_a_write_during_a_zookeeper_outage_fails_naming_it(cluster: Cluster, zk: ZooKeeperServer) -> None:
    """After a ZooKeeper outage, a ``zk://`` client's write timed out naming as leader a node
    that was not leading (the last one its node had seen). With ZooKeeper SIGSTOPped, the
    nodes report their session suspended in ``/metrics``, and the write fails saying that
    ZooKeeper is unavailable and no leader can be confirmed; after SIGCONT writes resume."""
    engine = cluster.connect(timeout=SESSION + 3)
    cluster.closers.append(engine.close)
    engine.create_stream("s")
    producer = engine.producer("s")
    producer.instant([b"before"])
    zk.pause()
    try:
        def suspended(node: ClusterNode) -> bool:
            return value(scrape(node), "tstreams_cluster_zookeeper_session", state="suspended") == 1

        eventually(lambda: all(suspended(n) for n in cluster.nodes), SESSION + 15, 0.05,
                   message="every node reports its ZooKeeper session suspended")
        assert not any(n.is_leader() for n in cluster.nodes)
        with pytest.raises(errors.ClusterUnavailable) as caught:
            producer.instant([b"during"])
        message = str(caught.value)
        assert "ZooKeeper" in message and "unavailable" in message and "no leader" in message, message
        assert "leader: n" not in message, message  # names no node as the leader
    finally:
        zk.resume()
    cluster.ready(60)
    producer.instant([b"after"])
    assert value(scrape(cluster.leader()), "tstreams_cluster_zookeeper_session", state="connected") == 1
