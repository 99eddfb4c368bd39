"""Several processes on one data directory: IDs stay unique and strictly increasing per
partition, and every transaction either process acknowledged is readable; a fork()ed child
opens its own environment."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import threading
import time

import pytest

import tstreams_embedded as ts

from .procs import start_worker

pytestmark = pytest.mark.slow


def test_two_processes_produce_to_one_directory_at_the_same_time(tmp_path) -> None:
    path = str(tmp_path / "data")
    with ts.open(path) as e:
        e.create_stream("shared", partitions=2)
    procs = {tag: start_worker("produce", path, tag, 400, durability, stdin=subprocess.PIPE)
             for tag, durability in (("A", "sync"), ("B", "async"))}
    for p in procs.values():
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    for p in procs.values():  # go: both write at the same time
        p.stdin.write("go\n")
        p.stdin.flush()
    acked: dict[str, list[tuple[str, int, str]]] = {}
    for tag, p in procs.items():
        out, err = p.communicate(timeout=120)  # (closes stdin)
        assert p.returncode == 0, err
        acked[tag] = [(line.split()[0], int(line.split()[1]), line.split()[2]) for line in out.splitlines()]
        assert len(acked[tag]) == 400

    with ts.open(path, compaction_interval=None) as e:
        c = e.consumer("shared", "check")
        read: dict[str, tuple[int, int]] = {}  # item -> (partition, id)
        per_partition: dict[int, list[int]] = {0: [], 1: []}
        for p in (0, 1):
            while (t := c.get_transaction(p)) is not None:
                per_partition[p].append(t.id)
                assert len(t.items) == 1
                read[t.items[0].decode()] = (p, t.id)
            assert e.backend.last_txn_id("shared", p) == max(per_partition[p])
    for p, ids in per_partition.items():
        assert ids == sorted(ids) and len(set(ids)) == len(ids), f"IDs of partition {p} not unique/increasing"
    # every acknowledged transaction is readable, with the ID its producer was given
    for tag, rows in acked.items():
        last: dict[int, int] = {}
        for part, tid, item in rows:
            assert item in read, f"{item} acknowledged by {tag} but not readable"
            p, rid = read[item]
            assert rid == tid and (part == "?" or int(part) == p)
            assert tid > last.get(p, 0), "a process sees its own IDs increase"
            last[p] = tid
    assert len(read) == 800
    # the two processes really interleaved in the same partitions
    owners = [read_item[0] for read_item in sorted(read, key=lambda i: read[i])]
    assert len({owners[i] != owners[i + 1] for i in range(len(owners) - 1)}) == 2


def _forked_child(path: str, parent_backend_id: int, results) -> None:  # runs in a fork()ed child
    try:
        with ts.open(path, compaction_interval=None) as e:
            own = id(e.backend) != parent_backend_id
            tid = e.producer("s").instant([b"child %d" % os.getpid()])
            with ts.open(path, compaction_interval=None) as again:  # the child's registry works too
                shared = again.backend is e.backend
            results.put((own, shared, tid))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        results.put(repr(exc))


def test_a_forked_child_opens_its_own_environment_while_a_parent_thread_writes(tmp_path) -> None:
    path = str(tmp_path / "data")
    parent = ts.open(path, compaction_interval=None)
    parent.create_stream("s")
    stop = threading.Event()
    written: list[int] = []

    def write() -> None:
        producer = parent.producer("s")
        while not stop.is_set():
            txn = producer.new_transaction()
            txn.send(b"parent")
            txn.checkpoint()
            written.append(txn.id)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        ctx = multiprocessing.get_context("fork")
        results = ctx.Queue()
        children = []
        for _ in range(6):  # forks land at random points of the parent's commits
            time.sleep(0.02)
            children.append(ctx.Process(target=_forked_child, args=(path, id(parent.backend), results)))
            children[-1].start()
        got = [results.get(timeout=60) for _ in children]
        for c in children:
            c.join(30)
            assert c.exitcode == 0
    finally:
        stop.set()
        writer.join(30)
    assert all(r[:2] == (True, True) for r in got), got
    assert written and not parent.closed
    child_ids = sorted(r[2] for r in got)
    c = parent.consumer("s", "check")
    seen = [t.id for t in iter(c.get_transaction, None)]
    assert seen == sorted(seen) and set(child_ids) <= set(seen) and set(written) <= set(seen)
    parent.close()


PRODUCE_ON_CUE = r"""
import sys
import tstreams_embedded as ts
with ts.open(sys.argv[1], compaction_interval=None) as e:
    p = e.producer("cue", partition=0)
    print("ready", flush=True)
    for line in sys.stdin:
        print(p.instant([line.strip().encode()]), flush=True)
"""


def test_another_process_commit_wakes_wait_for_commit_before_its_timeout(tmp_path) -> None:
    """``wait_for_commit`` with a 60 s timeout returns because another process committed
    (the engine's inotify waker), not because the timeout ran out; five times in a row.
    Closing the engine stops the waker's thread."""
    from tstreams_embedded.testing import eventually
    from tstreams_embedded.testing.server_process import child_environment

    path = str(tmp_path / "data")
    engine = ts.open(path, compaction_interval=None)
    engine.create_stream("cue", partitions=1)
    child = subprocess.Popen([__import__("sys").executable, "-c", PRODUCE_ON_CUE, path], text=True, bufsize=1,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_environment())
    try:
        assert child.stdout.readline().strip() == "ready"
        core = engine.backend
        core.wait_for_commit(core.wait_for_commit(-1, 0), 0.001)  # the first wait starts the waker
        for n in range(5):
            seen = core.wait_for_commit(-1, 0)
            before = core.external_commits
            woke: list[tuple[int, float]] = []
            started = threading.Event()

            def wait(seen: int, woke: list[tuple[int, float]], started: threading.Event) -> None:
                started.set()
                t0 = time.monotonic()
                woke.append((core.wait_for_commit(seen, 60.0), time.monotonic() - t0))

            waiter = threading.Thread(target=wait, args=(seen, woke, started))
            waiter.start()
            started.wait()
            child.stdin.write(f"item {n}\n")
            tid = int(child.stdout.readline())
            waiter.join(60)
            (sequence, waited), = woke
            assert sequence > seen
            assert waited < 30, f"woken by the timeout ({waited:.1f} s), not by the commit"
            eventually(lambda before=before: core.external_commits > before, 30, message="the waker saw the commit")
            assert engine.backend.get_transaction("cue", 0, tid).items == [f"item {n}".encode()]
    finally:
        child.stdin.close()
        assert child.wait(60) == 0
        engine.close()
    assert not [t for t in threading.enumerate() if t.name == "tstreams-commit-waker"]
