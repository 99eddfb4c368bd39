"""Subscribers: ordered per partition, woken by commits, resuming from stored offsets,
and fed by other processes within the poll interval. No timing is asserted: each wait is a
generous upper bound that only a lost or stuck delivery would reach."""

from __future__ import annotations

import threading
import time

import pytest

import tstreams_embedded as ts
from tstreams_embedded.testing import eventually

from .procs import start_worker

WAIT = 30.0


class Collector:
    """A subscriber callback that records transactions and signals when ``n`` arrived."""

    def __init__(self) -> None:
        self.txns: list[ts.Transaction] = []
        self._cv = threading.Condition()

    def __call__(self, txn: ts.Transaction) -> None:
        with self._cv:
            self.txns.append(txn)
            self._cv.notify_all()

    def wait_for(self, n: int, timeout: float = WAIT) -> list[ts.Transaction]:
        with self._cv:
            self._cv.wait_for(lambda: len(self.txns) >= n, timeout)
            return list(self.txns)


def test_delivery_is_complete_and_ordered_per_partition(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=3)
    got = Collector()
    sub = engine.subscribe("s", "alerts", callback=got, start="oldest", poll_interval=3600)
    try:
        producer = engine.producer("s")
        expected: dict[int, list[tuple[int, list[bytes]]]] = {0: [], 1: [], 2: []}
        for i in range(45):
            if i % 3:
                p = i % 2
                expected[p].append((producer.instant([b"i%d" % i], partition=p), [b"i%d" % i]))
            else:
                with producer.transaction() as txn:
                    txn.send_many([b"t%d" % i, b"u%d" % i])
                expected[txn.partition].append((txn.id, [b"t%d" % i, b"u%d" % i]))
        txns = got.wait_for(45)
        assert len(txns) == 45
        for p in range(3):
            assert [(t.id, t.items) for t in txns if t.partition == p] == expected[p]
        assert sub.running and sub.error is None
    finally:
        sub.stop()
    assert not sub.running


def test_start_newest_skips_what_came_before(engine: ts.Engine) -> None:
    engine.create_stream("s")
    producer = engine.producer("s")
    producer.instant([b"before"])
    got = Collector()
    sub = engine.subscribe("s", "alerts", callback=got)  # start="newest" is the default
    try:
        producer.instant([b"after"])
        assert [t.items for t in got.wait_for(1)] == [[b"after"]]
    finally:
        sub.stop()


def test_resumes_from_the_stored_offset_after_a_restart(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    producer = engine.producer("s")
    first = [producer.instant([b"a%d" % i], partition=i % 2) for i in range(10)]
    got = Collector()
    sub = engine.subscribe("s", "resumer", callback=got, start="oldest")
    assert len(got.wait_for(10)) == 10
    sub.stop()
    assert engine.backend.get_offsets("s", "resumer") == {0: first[8], 1: first[9]}
    second = [producer.instant([b"b%d" % i]) for i in range(6)]
    again = Collector()
    sub = engine.subscribe("s", "resumer", callback=again, start="oldest")  # the stored offset wins
    try:
        txns = again.wait_for(6)
        assert sorted(t.id for t in txns) == sorted(second)
        producer.instant([b"c"])
        assert [t.items for t in again.wait_for(7)][6:] == [[b"c"]]
    finally:
        sub.stop()
    assert len(got.txns) == 10


def test_a_failing_callback_stops_the_subscriber_and_is_redelivered(engine: ts.Engine) -> None:
    engine.create_stream("s")
    producer = engine.producer("s")
    errors_seen: list[BaseException] = []
    done = threading.Event()

    def callback(txn: ts.Transaction) -> None:
        if txn.items == [b"bad"]:
            raise ValueError("cannot handle")

    def on_error(exc: BaseException) -> None:
        errors_seen.append(exc)
        done.set()

    producer.instant([b"good"])
    producer.instant([b"bad"])
    sub = engine.subscribe("s", "fragile", callback=callback, start="oldest", on_error=on_error)
    assert done.wait(WAIT)
    sub.join(WAIT)
    assert not sub.running and isinstance(sub.error, ValueError) and errors_seen == [sub.error]
    # nothing of the failed round was stored (at-least-once): a restarted subscriber gets it again
    assert engine.backend.get_offsets("s", "fragile") == {}
    got = Collector()
    sub = engine.subscribe("s", "fragile", callback=got, start="oldest")
    try:
        assert [t.items for t in got.wait_for(2)] == [[b"good"], [b"bad"]]
    finally:
        sub.stop()


def test_delivery_from_another_process_within_the_poll_interval(tmp_path) -> None:
    path = str(tmp_path / "data")
    with ts.open(path) as engine:
        engine.create_stream("s", partitions=2)
        got = Collector()
        sub = engine.subscribe("s", "cross", callback=got, start="oldest", poll_interval=0.2)
        try:
            writer = start_worker("instants", path, "s", 20, 0.01)
            out, err = writer.communicate(timeout=120)
            assert writer.returncode == 0, err
            txns = got.wait_for(20)
            assert sorted(t.items[0] for t in txns) == sorted(b"remote-%d" % i for i in range(20))
            for p in (0, 1):
                ids = [t.id for t in txns if t.partition == p]
                assert ids == sorted(ids)
        finally:
            sub.stop()


@pytest.mark.parametrize("n_subscribers", [3])
def test_several_subscribers_each_get_everything(engine: ts.Engine, n_subscribers: int) -> None:
    engine.create_stream("s")
    collectors = [Collector() for _ in range(n_subscribers)]
    subs = [engine.subscribe("s", f"sub{i}", callback=c, start="oldest") for i, c in enumerate(collectors)]
    try:
        ids = [engine.producer("s").instant([b"%d" % i]) for i in range(10)]
        for c in collectors:
            assert [t.id for t in c.wait_for(10)] == ids
    finally:
        for s in subs:
            s.stop()


@pytest.mark.slow
def test_keep_alive_thread_keeps_open_transactions_alive_until_the_handle_closes(tmp_path) -> None:
    """Real clock and the real keep-alive thread (txn_ttl=1 s, refreshed every 0.1 s)."""
    with ts.open(tmp_path, txn_ttl=1.0) as reader:
        reader.create_stream("s")
        writer = ts.open(tmp_path, txn_ttl=1.0)  # a second handle on the same directory
        txn = writer.producer("s").new_transaction()
        txn.send(b"slow")
        assert txn.id > 0  # registered: its TTL runs
        time.sleep(2.5)  # well past the TTL: alive only thanks to the keep-alive
        txn.checkpoint()
        open_txn = writer.producer("s").new_transaction()
        assert open_txn.id > txn.id
        reader.producer("s").instant([b"after"])
        c = reader.consumer("s", "c")
        assert c.get_transaction(0).items == [b"slow"]
        assert c.get_transaction(0) is None  # blocked by the open one
        writer.close()  # its handle is gone: nothing refreshes the open transaction any more
        t = eventually(lambda: c.get_transaction(0), 30, 0.1)  # the open one expired
        assert t.items == [b"after"]
