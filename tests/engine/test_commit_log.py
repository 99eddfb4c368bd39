"""The commit log: every state change appends exactly one entry (in the same LMDB write as
its effects), reads append nothing, the log is trimmable, and replaying it into another
directory (``Core.apply_log``) reproduces the same visible state."""

from __future__ import annotations

from collections.abc import Callable

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.storage.core import Core


def _last_ops(core: Core) -> list[type]:
    seq = core.log_seq()
    ((got_seq, _, ops),) = core.read_log(seq, 10)
    assert got_seq == seq
    return [type(op) for op in ops]


def test_every_state_change_appends_one_entry(make_engine, clock) -> None:
    engine = make_engine(clock=clock, txn_ttl=1.0, keepalive_interval=None, fire_schedules=False)
    core: Core = engine.backend
    state: dict = {}

    def step(expected: type, action: Callable[[], object]) -> None:
        seq = core.log_seq()
        action()
        assert core.log_seq() == seq + 1, expected.__name__
        assert expected in _last_ops(core), expected.__name__

    step(O.CreateStream, lambda: engine.create_stream("s", partitions=2))
    engine.create_stream("short", ttl=1)
    engine.producer("short").instant([b"expires with its stream's TTL"])
    producer = engine.producer("s", batch_size=1)
    state["t"] = producer.new_transaction(0)
    step(O.Open, lambda: state["t"].id)
    state["t"].send(b"a")
    step(O.Data, lambda: state["t"].send(b"b"))  # flushes b"a"
    step(O.Checkpoint, lambda: state["t"].checkpoint())
    step(O.Instant, lambda: producer.instant([b"i"]))
    state["c"] = producer.new_transaction(0)
    state["c"].send(b"x")
    state["c"].flush()
    step(O.CancelIfOpen, lambda: state["c"].cancel())
    state["k"] = producer.new_transaction(1)
    assert state["k"].id > 0
    step(O.KeepAlive, lambda: engine.keep_alive())
    clock.advance(5_000)
    consumer = engine.consumer("s", "c")
    step(O.Invalidate, lambda: consumer.get_transaction(1))  # the reader passes over the expired one
    step(O.SetOffsets, lambda: consumer.checkpoint())
    step(O.ResetOffsets, lambda: core.submit([O.ResetOffsets("s", "c", core.get_offsets("s", "c"), {0: 0})]))
    step(O.DeleteConsumer, lambda: core.submit([O.DeleteConsumer("s", "c")]))
    step(O.SetMarker, lambda: core.submit([O.SetMarker("m", 1, True)]))
    step(O.Compact, lambda: engine.compact())  # "short" is past its TTL
    opened = core.submit([O.Open("s", 0, 1000)])[0]
    step(O.Cancel, lambda: core.submit([O.Cancel("s", 0, opened)]))
    g_out = engine.producer("s", partition=1)
    g_txn = g_out.new_transaction()
    g_txn.send(b"g")
    step(O.Instant, lambda: ts.CheckpointGroup(g_out, consumer).checkpoint())
    assert sorted(t.__name__ for t in _last_ops(core)) == ["Instant", "SetOffsets"]  # one entry for the group
    step(O.StoreWrite, lambda: core.submit([O.StoreWrite("app/0/counts", [[b"k", b"v"]], [b"gone"])]))
    step(O.Lease, lambda: core.submit([O.Lease("app/__group", b"task/0", "me", 1, 1000)]))
    step(O.CheckLease, lambda: core.submit([O.CheckLease("app/__group", b"task/0", "me", 1),
                                           O.StoreWrite("app/0/counts", [[b"k", b"w"]])]))
    q = engine.work_queue("s", "q", ack_timeout=60)  # QueueDeclare; "s" has items of the steps above
    step(O.QueueDeclare, lambda: engine.work_queue("s", "q", ack_timeout=30))
    state["d"] = None
    step(O.QueueReceive, lambda: state.__setitem__("d", q.receive(1, timeout=0)[0]))
    step(O.QueueSettle, lambda: state["d"].ack())
    state["due"] = engine.schedule("s", [b"due"], delay=1)
    step(O.Schedule, lambda: engine.schedule("s", [b"cancelled"], delay=1))
    step(O.CancelSchedule, lambda: engine.cancel_schedule(state["due"] + 1))
    clock.advance(1_000)
    step(O.FireSchedule, lambda: core.fire_due_schedules())
    step(O.DeleteStream, lambda: engine.delete_stream("s"))
    covered = {O.CreateStream, O.Open, O.Data, O.Checkpoint, O.Instant, O.CancelIfOpen, O.KeepAlive, O.Invalidate,
               O.SetOffsets, O.SetMarker, O.Compact, O.Cancel, O.DeleteStream, O.ResetOffsets, O.DeleteConsumer,
               O.StoreWrite, O.Lease, O.CheckLease, O.QueueDeclare, O.QueueReceive, O.QueueSettle, O.Schedule,
               O.CancelSchedule, O.FireSchedule}
    assert covered == set(O.RECORDS), "every operation record has a step here"


def test_reads_append_nothing(embedded: ts.Engine) -> None:
    embedded.create_stream("s")
    ids = [embedded.producer("s").instant([b"%d" % i]) for i in range(3)]
    core: Core = embedded.backend
    seq = core.log_seq()
    c = embedded.consumer("s", "c")
    while c.get_transaction() is not None:
        pass
    c.get_transaction_by_id(0, ids[0])
    c.get_transactions_from_to(0, 0, 2**62)
    c.get_last_transaction(0)
    embedded.list_streams()
    embedded.get_stream("s")
    embedded.stats()
    core.read_log(1)
    assert core.log_seq() == seq


def test_failed_batches_append_nothing(embedded: ts.Engine) -> None:
    embedded.create_stream("s")
    core: Core = embedded.backend
    seq = core.log_seq()
    for bad in ([O.CreateStream("s", 1, 60)], [O.Instant("s", 0, O.pack_items([b"x"])), (99,)]):
        try:
            core.submit(bad)
        except ts.errors.TStreamsError:
            pass
    assert core.log_seq() == seq and len(core.read_log(1)) == seq


def test_trim_log(embedded: ts.Engine) -> None:
    embedded.create_stream("s")
    producer = embedded.producer("s")
    for i in range(20):
        producer.instant([b"%d" % i])
    core: Core = embedded.backend
    assert [e[0] for e in core.read_log(0, 1000)] == list(range(1, 22))
    assert [e[0] for e in core.read_log(5, 3)] == [5, 6, 7]
    assert core.trim_log(10) == 10
    assert core.trim_log(10) == 0
    assert [e[0] for e in core.read_log(0, 1000)] == list(range(11, 22))
    assert core.log_seq() == 21
    assert embedded.stats()["log_entries"] == 11
    producer.instant([b"after"])
    assert core.read_log(22)[0][0] == 22  # sequence numbers continue after a trim
    # trimming the log never touches the data
    assert len(embedded.consumer("s", "c").get_transactions_from_to(0, 0, 2**62)) == 21


def _snapshot(engine: ts.Engine) -> dict:
    """Everything a user can see: streams, every visible transaction, offsets, markers."""
    core: Core = engine.backend
    out: dict = {"streams": [(s.name, s.id, s.partitions, s.ttl, s.description, s.created)
                             for s in engine.list_streams()]}
    for s in engine.list_streams():
        c = engine.consumer(s.name, "snapshot-reader", use_last_offset=False)
        for p in range(s.partitions):
            out[(s.name, p)] = (core.last_txn_id(s.name, p),
                                [(t.id, t.items) for t in c.get_transactions_from_to(p, 0, 2**62)],
                                _txn_tuple(c.get_last_transaction(p)))
        out[(s.name, "offsets")] = {n: core.get_offsets(s.name, n) for n in ("c1", "c2", "snapshot-reader")}
    out["markers"] = {k: core.get_marker(k) for k in ("m1", "m2")}
    out["state"] = core.store_range("app/0/s")
    return out


def _txn_tuple(t: ts.Transaction | None) -> tuple | None:
    return None if t is None else (t.id, t.items)


def test_replaying_the_log_into_another_directory_reproduces_the_data(tmp_path) -> None:
    a = ts.open(tmp_path / "a", keepalive_interval=None, compaction_interval=None)
    b_core = Core(tmp_path / "b", "async", compaction_interval=None)
    try:
        a.create_stream("clicks", partitions=3, ttl=3600, description="d")
        a.create_stream("gone", partitions=1)
        a.create_stream("views", partitions=2)
        p = a.producer("clicks", batch_size=2)
        for i in range(30):
            with p.transaction() as txn:
                txn.send_many([b"c%d-%d" % (i, j) for j in range(i % 5 + 1)])
        p.new_transaction(0).cancel()
        c = p.new_transaction(1)
        c.send_many([b"x", b"y", b"z"])
        c.cancel()
        open_txn = p.new_transaction(2)
        open_txn.send_many([b"open-1", b"open-2", b"open-3"])  # two flushed (batch_size=2), still open
        a.producer("gone").instant([b"bye"])
        a.delete_stream("gone")
        views = a.producer("views")
        consumer = a.consumer("clicks", "c1")
        for _ in range(10):
            t = consumer.get_transaction()
            with views.transaction() as out:
                out.send_many([b"v:" + i for i in t.items])
        ts.CheckpointGroup(views, consumer).checkpoint()
        a.consumer("views", "c2").checkpoint()
        a.backend.submit([O.SetMarker("m1", 5, True)])
        a.backend.submit([O.StoreWrite("app/0/s", [[b"a", b"1"], [b"b", b"2"], [b"c", b"3"], [b"d", b"4"]])])
        a.backend.submit([O.StoreWrite("app/0/s", [[b"e", b"5"]], [b"a"], [[b"b", b"d"]])])

        core_a: Core = a.backend
        log = core_a.read_log(0, 100_000)
        half = len(log) // 2
        assert b_core.apply_log(log[:half]) == half  # a replica catching up in two steps
        assert b_core.apply_log(core_a.read_log(log[half][0], 100_000)) == len(log) - half
        b = ts.Engine(b_core, keepalive_interval=None)
        assert _snapshot(b) == _snapshot(a)
        assert _snapshot(a)["state"] == [(b"d", b"4"), (b"e", b"5")]
        assert b_core.read_log(0, 100_000) == log  # the replica's log is the same log
        # the open transaction is open on the replica too: checkpoint it on both, same result
        a.backend.submit([O.Checkpoint("clicks", 2, open_txn.id)])
        b_core.apply_log(core_a.read_log(core_a.log_seq(), 10))
        assert _snapshot(b) == _snapshot(a)
        assert [t.items for t in b.consumer("clicks", "z").get_transactions_from_to(2, open_txn.id - 1, open_txn.id)] \
            == [[b"open-1", b"open-2"]]
    finally:
        a.close()
        b_core.close()
