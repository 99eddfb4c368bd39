"""Cluster nodes in one process over the in-memory coordinator and network
(tstreams_embedded.testing.{coordinator,network,memory_cluster}): the node's I/O is injected."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tstreams_embedded import errors
from tstreams_embedded.cluster.coordinator import SessionState
from tstreams_embedded.cluster.messages import Fetch, FetchReply, ReplyStatus, pack, unpack
from tstreams_embedded.testing import eventually
from tstreams_embedded.testing.coordinator import MemoryCoordinator, MemoryZooKeeper
from tstreams_embedded.testing.memory_cluster import MemoryCluster
from tstreams_embedded.testing.network import Faults, MemoryNetwork


def test_network_cuts_links_one_way(tmp_path: Path) -> None:
    net = MemoryNetwork(seed=1)
    server = net.transport("a").listen("mem://a")
    link = net.transport("b").connect("mem://a")
    net.partition(["b"], ["a"], both_ways=False)
    link.send(b"lost")
    assert server.poll(0.05) == []
    net.heal()
    link.send(b"req")
    [(peer, body)] = server.poll(1.0)
    assert body == b"req"
    net.partition(["a"], ["b"], both_ways=False)  # replies cut, requests pass
    server.reply(peer, b"rep")
    assert link.receive(0.05) is None
    link.send(b"req2")
    assert [b for _, b in server.poll(1.0)] == [b"req2"]


def test_network_drops_duplicates_and_reorders_from_its_seed() -> None:
    def run(seed: int) -> list[bytes]:
        net = MemoryNetwork(seed=seed)
        server = net.transport("a").listen("mem://a")
        link = net.transport("b").connect("mem://a")
        net.set_faults(Faults(drop=0.2, duplicate=0.2, reorder=0.3))
        for i in range(200):
            link.send(b"%d" % i)
        got: list[bytes] = []
        while batch := server.poll(0.01):
            got += [b for _, b in batch]
        return got

    got = run(7)
    assert got == run(7)  # the same seed, the same faults
    assert len(set(got)) < 200  # some lost
    assert len(got) > len(set(got))  # some twice
    assert got != sorted(got, key=int)  # some out of order


def test_coordinator_session_expiry_drops_what_it_owned() -> None:
    zk = MemoryZooKeeper(nodes=3)
    a, b = MemoryCoordinator(zk, "a"), MemoryCoordinator(zk, "b")
    states: list[SessionState] = []
    a.add_state_listener(states.append)
    for c in (a, b):
        c.start(1.0)
    a.publish_node("a", {"x": 1})
    assert a.election_lock("a").acquire()
    a.publish_leader({"node": "a"})
    assert b.read_leader() == {"node": "a"} and b.live_nodes() == {"a"}
    zk.expire("a")
    assert states == [SessionState.LOST, SessionState.CONNECTED]
    assert b.read_leader() == {} and b.live_nodes() == set()
    assert b.election_lock("b").acquire()  # the lock went with the session
    zk.cut("b")
    with pytest.raises(errors.ClusterUnavailable):
        b.read_epoch()


def test_writes_replicate_and_nodes_converge(tmp_path: Path) -> None:
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        ids = [c.instant("s", 0, [b"x%d" % i]) for i in range(10)]
        assert ids == sorted(set(ids))
        c.converged()


def test_leader_session_expiry_fails_over_without_losing_acknowledged_writes(tmp_path: Path) -> None:
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        acked = [c.instant("s", 0, [b"before"])]
        old = c.leader()
        epoch = old.epoch
        c.zk.expire(old.node_id)
        assert not old.serving()  # at once, not after its lease
        new = eventually(lambda: (n := c.leader()).epoch > epoch and n, 20)  # (it may be the old one again)
        acked.append(c.instant("s", 0, [b"after"], node=new))
        c.converged()
        for node in c.nodes.values():
            got = [t.id for t in node.core.transactions_range("s", 0, 0, 2**63 - 1)]
            assert got == acked


def test_a_stopped_node_catches_up_from_its_disk(tmp_path: Path) -> None:
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        leader = c.leader()
        follower = c.others(leader.node_id)[0]
        c.stop(follower)
        for i in range(5):
            c.instant("s", 0, [b"%d" % i])
        c.start(follower)
        c.converged()


def test_check_quorum_a_leader_cut_from_its_followers_only_steps_down(tmp_path: Path) -> None:
    """The leader reaches ZooKeeper but no follower: it must step down and release the lock
    so that the majority elects another leader (#20). The bound, within the session timeout +
    1 s, is checked on simulated time (test_simulation_schedules.py::
    test_check_quorum_a_majority_acknowledges_within_the_session_plus_one_second) and with
    real processes in network namespaces (test_netns_partition.py): here real threads share
    a possibly loaded machine, so only the outcome is checked."""
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        acked = [c.instant("s", 0, [b"before"])]
        old = c.leader()
        epoch = old.epoch
        c.network.isolate(old.node_id, c.others(old.node_id))  # both ways, ZooKeeper untouched
        new = c.leader(timeout=c.session_timeout + 30, exclude=old.node_id)
        acked.append(c.instant("s", 0, [b"during"], node=new))
        assert new.epoch > epoch and not old.leading
        c.network.heal()
        acked.append(c.instant("s", 0, [b"after"]))
        c.converged()
        assert old.role == "follower"
        for node in c.nodes.values():
            assert [t.id for t in node.core.transactions_range("s", 0, 0, 2**63 - 1)] == acked


def test_check_quorum_a_leader_that_still_hears_one_follower_keeps_leading(tmp_path: Path) -> None:
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        leader = c.leader()
        epoch = leader.epoch
        a, b = c.others(leader.node_id)
        c.network.isolate(a, [leader.node_id, b])
        until = time.monotonic() + 3 * leader.lease_seconds  # three election timeouts of writes
        while time.monotonic() < until:
            c.instant("s", 0, [b"x"], node=leader)
        assert leader.serving() and leader.epoch == epoch


def test_a_data_directory_of_another_cluster_is_refused(tmp_path: Path) -> None:
    """#20: a directory from another cluster was followed silently (its log happened to pass
    the consistency check). The cluster's id is now kept in the directory on first join."""
    with MemoryCluster(tmp_path / "a", 3) as a:
        a.create_stream("s")
        a.instant("s", 0, [b"a-only"])
        moved = a.others(a.leader().node_id)[0]
        a.stop(moved)
        with MemoryCluster(tmp_path / "b", 3) as b:
            with pytest.raises(errors.InvalidArgument, match="belongs to another cluster"):
                b.start("n4", data=tmp_path / "a" / moved)
            assert "n4" not in b.nodes
        a.start(moved)  # its own cluster takes it back
        a.converged()


def test_a_stopped_node_leaves_the_leaders_lag_tracking(tmp_path: Path) -> None:
    """#20: after a shrink the leader kept reporting a growing replication lag for the
    removed node until the next leader change. A node without a ZooKeeper session now
    leaves ``match`` (the lag of /status and /metrics); its next fetch brings it back."""
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        leader = c.leader()
        gone = c.others(leader.node_id)[0]
        eventually(lambda: gone in leader.match, 10)
        c.stop(gone)
        c.instant("s", 0, [b"x"])
        eventually(lambda: gone not in leader.match, 10)
        c.start(gone)
        eventually(lambda: gone in leader.match, 10)


def test_a_duplicate_node_id_refuses_to_start(tmp_path: Path) -> None:
    """#20: a second process with a running node's ``--node-id`` was accepted, and the
    leader counted its acknowledgements as the real node's (888 acknowledged writes lost).
    A node claims its id with its ZooKeeper session; a duplicate waits for the holder's
    session to end (a crashed process's would) and refuses to start."""
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        taken = c.others(c.leader().node_id)[0]
        with pytest.raises(errors.InvalidArgument, match="in use by another running node"):
            c.start(taken, data=tmp_path / "copy", endpoint="copy")
        c.instant("s", 0, [b"still-fine"])
        c.converged()


def test_a_fetch_from_a_session_that_does_not_own_the_node_id_is_not_counted(tmp_path: Path) -> None:
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        leader = c.leader()
        victim = c.others(leader.node_id)[0]
        before = eventually(lambda: leader.match.get(victim), 10)
        link = c.network.transport("forger").connect(leader.repl_endpoint)
        forged = Fetch(victim, leader.epoch, leader.log.last_index + 1, leader.log.last_epoch, 0, 1, "bogus")
        link.send(pack(forged.to_wire()))
        reply = FetchReply.from_wire(unpack(eventually(lambda: link.receive(0.1), 10)))
        assert reply.status is ReplyStatus.NOT_LEADER
        assert leader.match.get(victim, 0) <= max(before, leader.log.last_index)
        assert leader.replication.foreign_fetches == 1


def test_a_follower_is_ready_only_once_it_reached_its_leader(tmp_path: Path) -> None:
    """#20: a brand-new node reported ready before it had applied anything (it knew the
    leader from ZooKeeper, and had no commit index to lag behind)."""
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        leader = c.leader()
        late = c.others(leader.node_id)[0]
        c.stop(late)
        c.instant("s", 0, [b"x"])
        c.network.isolate(late, c.others(late))
        node = c.start(late)
        eventually(lambda: node.leader_info.get("node") == leader.node_id, 10)
        assert not node.ready()
        c.network.heal()
        eventually(node.ready, 10)
        assert node.applied > 0


def test_faults_reach_a_restarted_node_not_its_stopped_process(tmp_path: Path) -> None:
    """The nemesis expires and cuts nodes by id: after a restart that must be the new session."""
    with MemoryCluster(tmp_path, 3) as c:
        c.stop("n3")
        c.start("n3")
        eventually(lambda: "n3" in c.zk.nodes, 5.0, message="n3 publishes its record")
        c.zk.expire("n3")
        assert c.zk.client_of("n3") is c.zk.clients[-1]
        c.zk.cut("n3")
        eventually(lambda: not c.nodes["n3"].zk_ok, 5.0, message="n3 hears its session is suspended")


def test_a_leader_whose_fsync_fails_does_not_acknowledge_and_steps_down(tmp_path: Path) -> None:
    with MemoryCluster(tmp_path, 3, ack_timeout=2.0) as c:
        c.create_stream("s", 1)
        old = c.leader()
        c.disks[old.node_id].failing = True
        with pytest.raises(errors.ClusterUnavailable, match="could not sync its log"):
            c.instant("s", 0, [b"unsynced"], node=old)
        new = c.leader(exclude=old.node_id)
        txn_id = c.instant("s", 0, [b"after"], node=new)
        assert not old.serving() and not old.leading
        c.disks[old.node_id].failing = False
        c.stop(old.node_id)
        c.start(old.node_id)  # restarted, it follows again
        c.converged()
        got = c.nodes[old.node_id].core.get_transaction("s", 0, txn_id)
        assert got is not None and [bytes(i) for i in got.items] == [b"after"]


def test_a_leader_crashed_after_applying_what_its_log_had_not_synced_restarts_and_converges(tmp_path: Path) -> None:
    """Its followers committed the entry while its own fsync stalled; the crash loses the
    entry from its log but not from its (synced) state: it restarts from the state."""
    with MemoryCluster(tmp_path, 3, ack_timeout=2.0) as c:
        c.create_stream("s", 1)
        old = c.leader()
        disk = c.disks[old.node_id]
        disk.stalled.set()
        before = old.applied
        outcome: list[object] = []
        writer = threading.Thread(target=lambda: outcome.append(_try(lambda: c.instant("s", 0, [b"x"], node=old))))
        writer.start()
        eventually(lambda: old.applied > before, 5.0, message="the leader applies the entry its log is syncing")
        assert old.log.durable_index < old.applied
        disk.failing = True
        disk.release()
        writer.join(10)
        assert isinstance(outcome[0], errors.ClusterUnavailable)  # not acknowledged
        assert c.crash(old.node_id) >= 1
        disk.failing = False
        c.start(old.node_id)
        c.converged()
        for node in c.nodes.values():
            [txn] = node.core.transactions_range("s", 0, 0, 2**63 - 1)
            assert [bytes(i) for i in txn.items] == [b"x"]


def _try(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        return exc


def test_a_node_that_lost_its_unsynced_applies_replays_them_from_its_log(tmp_path: Path) -> None:
    """Applies are not synced (cluster/applier.py): a power loss of a follower loses its last
    applies (StateDisk rolls its state back to its last fsync), and the log, trimmed to a
    small retention meanwhile, must still hold every entry after that point. Here the
    crashed follower and a stale node are all that is left when the leader is gone: only
    the replay of the crashed follower's own log keeps the acknowledged writes."""
    with MemoryCluster(tmp_path, 3, log_retain_entries=8) as c:
        c.create_stream("s")
        leader = c.leader()
        holder, stale = c.others(leader.node_id)
        c.stop(stale)
        acked = [c.instant("s", 0, [b"%d" % i]) for i in range(30)]
        node = c.nodes[holder]
        eventually(lambda: node.applied >= leader.log.commit_index, 10)
        while node.applier.synced_applied >= node.applied:  # a trim synced it just now: apply one more
            acked.append(c.instant("s", 0, [b"more"]))
            eventually(lambda: node.applied >= leader.log.commit_index, 10)
        assert node.log.base_index > 0, "the log was trimmed"
        applied, synced = node.applied, node.applier.synced_applied
        c.stop(leader.node_id)  # gone for good
        c.crash(holder)
        restarted = c.start(holder)
        assert restarted.applier.synced_applied == synced < applied  # the unsynced applies were lost
        c.start(stale)
        eventually(lambda: restarted.applied >= applied, 20, message="it replays its log")
        assert restarted.snapshots_installed == 0
        acked.append(c.instant("s", 0, [b"after"]))
        c.converged()
        for n in c.nodes.values():
            got = [t.id for t in n.core.transactions_range("s", 0, 0, 2**63 - 1)]
            assert got == acked


def test_followers_learn_a_commit_index_that_no_later_entry_carries(tmp_path: Path) -> None:
    """The commit index rides on the next entries to a follower (piggybacked); when none
    follow, a parked fetch still brings it alone (after COMMIT_LINGER), so an idle
    follower applies the last write."""
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        leader = c.leader()
        c.instant("s", 0, [b"last"])
        commit = leader.log.commit_index
        for node_id in c.others(leader.node_id):
            node = c.nodes[node_id]
            eventually(lambda node=node: node.applied >= commit, 5, message=f"{node_id} applies the last write")


def test_concurrent_writers_applying_on_their_own_threads_apply_each_entry_once(tmp_path: Path) -> None:
    """A leader's writer applies its committed entry itself when the apply lock is free
    (Applier.apply_now), racing the applier thread and the other writers: every entry is
    still applied once, in log order, and each writer gets its own outcome."""
    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        leader = c.leader()
        got: dict[int, list[int]] = {}

        def writer(w: int) -> None:
            got[w] = [c.instant("s", 0, [b"%d-%d" % (w, i)], node=leader) for i in range(10)]

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        ids = sorted(i for per in got.values() for i in per)
        assert len(ids) == 80 and len(set(ids)) == 80
        c.converged()
        for node in c.nodes.values():
            stored = {t.id: bytes(t.items[0]) for t in node.core.transactions_range("s", 0, 0, 2**63 - 1)}
            assert sorted(stored) == ids
            for w, per in got.items():
                assert [stored[i] for i in per] == [b"%d-%d" % (w, i) for i in range(10)]


def test_entries_in_flight_at_once_are_each_answered_with_their_own_outcome(tmp_path: Path) -> None:
    """The leader's write path appends an entry and returns a Deferred (Writes.submit_deferred):
    several entries replicate at once, and each call is answered with the transaction its
    own entry made, in log order; a retry of a call still in flight gets the same answer."""
    from tstreams_embedded.engine.protocol import ops as O
    from tstreams_embedded.net.deferred import Deferred

    with MemoryCluster(tmp_path, 3) as c:
        c.create_stream("s")
        leader = c.leader()

        def call(i: int) -> list[object]:
            return [[O.encode(O.Instant("s", 0, O.pack_items([b"%d" % i])))], True, "pipelined", i]

        pending = [leader.writes.submit_deferred([call(i)]) for i in range(20)]
        retry = leader.writes.submit_deferred([call(19)])
        answers = [d.wait() if isinstance(d, Deferred) else d for d in [*pending, retry]]
        ids = [value[0] for [(ok, value)] in answers[:20] if ok]
        assert len(ids) == 20 and ids == sorted(set(ids))
        assert answers[20] == answers[19]
        c.converged()
        for node in c.nodes.values():
            stored = [(t.id, bytes(t.items[0])) for t in node.core.transactions_range("s", 0, 0, 2**63 - 1)]
            assert stored == [(tid, b"%d" % i) for i, tid in enumerate(ids)]
