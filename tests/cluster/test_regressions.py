"""Regression tests for cluster bugs found by the Jepsen-style test (test_jepsen.py), each
on a real ZooKeeper with real node processes."""

from __future__ import annotations

import concurrent.futures
import json
import time
from pathlib import Path

from tstreams_embedded import errors
from tstreams_embedded.cluster.zk import ZkAddress
from tstreams_embedded.net.client import RemoteBackend
from tstreams_embedded.testing import ZooKeeperServer, eventually

from .conftest import SESSION, Cluster
from .test_cluster import converged, items_on

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


def test_expiry_seen_by_a_read_agrees_with_the_replicated_apply(cluster: Cluster) -> None:
    """Bug: readers judged an open transaction's expiry by the leader's wall clock, and the
    leader marked it INVALID in its own state, while the apply step judges it by the time of
    the log entry. A checkpoint logged before the deadline but applied after a read past the
    deadline (here: the followers are paused meanwhile) then failed on the leader and
    succeeded on the followers: diverged nodes, and a transaction visible behind a consumer
    that had skipped it. Reads now use the state machine's clock (the time of the last
    applied entry), which every later entry is at or past."""
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
