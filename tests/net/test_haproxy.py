"""A real HAProxy (cluster/haproxy.cfg) in front of two ``tstreams serve`` processes on
one data directory. A producer and an exactly-once read-process-write loop (consumer +
producer + CheckpointGroup) run through it while one server is SIGKILLed: nothing
acknowledged is lost, every input appears exactly once in the output, and both clients
carry on through the surviving server."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.testing import HAProxyProcess, eventually
from tstreams_embedded.testing.haproxy import haproxy_executable

pytestmark = pytest.mark.slow

@pytest.fixture
def cluster(make_server: Any, tmp_path: Path):
    if haproxy_executable() is None:
        pytest.fail("haproxy is not installed (make test installs Debian's haproxy package)")
    data = tmp_path / "shared-data"
    s1 = make_server(data, name="s1")
    s2 = make_server(data, name="s2")
    with HAProxyProcess([s1.port, s2.port], tmp_path) as proxy:
        proxy.wait_servers_up()
        yield proxy, s1, s2


def test_failover_through_haproxy_loses_nothing_acknowledged(cluster: Any) -> None:
    proxy, s1, s2 = cluster
    admin = ts.connect(proxy.endpoint, timeout=10)
    admin.create_stream("in", partitions=2)
    admin.create_stream("out", partitions=1)
    stop = threading.Event()
    acked: list[tuple[int, int, bytes]] = []  # (partition, txn id, payload) acknowledged to the producer
    produced_after_kill = threading.Event()
    etl_after_kill = threading.Event()
    killed = threading.Event()
    failures: list[BaseException] = []
    stats = {"producer_errors": 0, "etl_errors": 0, "groups": 0}

    conns: dict[str, Any] = {}

    def producer() -> None:
        e = ts.connect(proxy.endpoint, timeout=3)
        conns["producer"] = e.backend.connection
        try:
            p = e.producer("in")
            i = 0
            while not stop.is_set():
                payload = b"m%06d" % i
                try:
                    part = i % 2
                    tid = p.instant([payload], partition=part)
                except ConnectionError:  # outcome unknown: retry (a duplicate is allowed, a loss is not)
                    stats["producer_errors"] += 1
                    time.sleep(0.02)
                    continue
                acked.append((part, tid, payload))
                if killed.is_set():
                    produced_after_kill.set()
                i += 1
                time.sleep(0.002)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
        finally:
            e.close()

    def etl() -> None:
        """Exactly-once copy in -> out: consumer offsets and output in one CheckpointGroup."""
        e = ts.connect(proxy.endpoint, timeout=3, txn_ttl=1.0)
        conns["etl"] = e.backend.connection
        try:
            while not stop.is_set():
                try:
                    c = e.consumer("in", name="etl")
                    out = e.producer("out", partition=0)
                    while not stop.is_set():
                        batch = []
                        for part in (0, 1):
                            for _ in range(20):
                                t = c.get_transaction(part)
                                if t is None:
                                    break
                                batch.extend(t.items)
                        if not batch:
                            time.sleep(0.01)
                            continue
                        txn = out.new_transaction()
                        txn.send_many(batch)
                        ts.CheckpointGroup(out, c).checkpoint()
                        stats["groups"] += 1
                        if killed.is_set():
                            etl_after_kill.set()
                except ConnectionError:
                    # Unknown outcome: start over from the stored offsets. An output
                    # transaction left open is cancelled (or expires on its 1 s TTL).
                    stats["etl_errors"] += 1
                    try:
                        out.cancel()
                    except errors.TStreamsError:
                        pass
                    time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
        finally:
            e.close()

    threads = [threading.Thread(target=producer), threading.Thread(target=etl)]
    for t in threads:
        t.start()
    try:
        eventually(lambda: failures or (len(acked) >= 200 and stats["groups"] >= 5), 30, 0.05)
        assert len(acked) >= 200 and stats["groups"] >= 5, (len(acked), stats, failures)
        # SIGKILL the first server mid-run; then bring it back and SIGKILL the second, so
        # that each client loses its server at least once whichever one it was on.
        for victim, other in ((s1, s2), (s2, s1)):
            produced_after_kill.clear()
            etl_after_kill.clear()
            victim.kill()
            killed.set()
            eventually(lambda: failures or (produced_after_kill.is_set() and etl_after_kill.is_set()), 60, 0.05,
                       message=lambda: f"clients after the kill: {stats} {failures}")
            assert produced_after_kill.is_set(), f"the producer did not carry on: {stats}"
            assert etl_after_kill.is_set(), f"the read-process-write loop did not carry on: {stats}"
            assert other.alive()
            if victim is s1:
                s1.start()
                proxy.wait_servers_up(["s1"])  # HAProxy's health checks mark it up again
        n = len(acked)
        eventually(lambda: failures or len(acked) >= n + 20, 30, 0.05)  # still producing after both kills
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not failures, failures
    assert s1.alive()
    assert conns["producer"].disconnects >= 1 and conns["etl"].disconnects >= 1, stats

    # Nothing acknowledged is lost.
    for part, tid, payload in acked:
        (t,) = eventually(lambda: [admin.backend.get_transaction("in", part, tid)], 30,  # noqa: B023
                          ignore=(ConnectionError,))  # a list: truthy even when t is None
        assert t is not None and t.items == [payload], (part, tid)

    # Every input item appears exactly once in the output, once the loop has caught up.
    def all_items(stream: str, parts: range) -> list[bytes]:
        c = admin.consumer(stream, name=f"verify-{time.monotonic_ns()}", use_last_offset=False)
        items = []
        for p in parts:
            while (t := c.get_transaction(p)) is not None:
                items.extend(t.items)
        return items

    (inputs,) = eventually(lambda: [all_items("in", range(2))], 30, ignore=(ConnectionError,))
    finish = ts.connect(proxy.endpoint, timeout=10, txn_ttl=1.0)
    try:
        # output transactions abandoned by failed attempts expire (1 s TTL)
        eventually(lambda: _unblocked(finish, "out", 0), 30, 0.05, ignore=(ConnectionError,),
                   message="the abandoned output transactions expired")
        c = finish.consumer("in", name="etl")
        out = finish.producer("out", partition=0)
        while _copy_once(c, out):
            pass
        outputs = all_items("out", range(1))
    finally:
        finish.close()
    assert len(inputs) >= len(acked)
    assert sorted(outputs) == sorted(inputs)  # exactly once: same multiset
    admin.close()


def _unblocked(engine: Any, stream: str, partition: int) -> bool:
    """Whether no open transaction holds back the readers of ``partition`` of ``stream``."""
    position = 0
    while True:
        fetched = engine.backend.fetch(stream, partition, position, 1000)
        if not fetched.txns:
            return not fetched.blocked
        position = fetched.position


def _copy_once(c: Any, out: Any) -> int:
    batch: list[bytes] = []
    for p in (0, 1):
        while (t := c.get_transaction(p)) is not None:
            batch.extend(t.items)
    if batch:
        txn = out.new_transaction()
        txn.send_many(batch)
        ts.CheckpointGroup(out, c).checkpoint()
    return len(batch)
