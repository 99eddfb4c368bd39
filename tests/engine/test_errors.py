"""Every error path of the public API raises its specific exception, and no error leaves a
partial write. Runs on every backend of the ``engine`` fixture (embedded and remote)."""

from __future__ import annotations

import datetime as dt

import msgpack
import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O


def _visible(engine: ts.Engine, stream: str) -> list[tuple[int, int, list[bytes]]]:
    c = engine.consumer(stream, "probe", use_last_offset=False)
    out = []
    for p in c.partitions:
        out += [(p, t.id, t.items) for t in c.get_transactions_from_to(p, 0, 2**62)]
    return out


# --------------------------------------------------------------------------- streams
def test_stream_exists(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    with pytest.raises(errors.StreamExists):
        engine.create_stream("s", partitions=3)
    assert engine.get_stream("s").partitions == 2


def test_stream_not_found_on_every_api_taking_a_stream(engine: ts.Engine) -> None:
    b = engine.backend
    calls = {
        "get_stream": lambda: engine.get_stream("nope"),
        "delete_stream": lambda: engine.delete_stream("nope"),
        "producer": lambda: engine.producer("nope"),
        "consumer": lambda: engine.consumer("nope", "c"),
        "subscribe": lambda: engine.subscribe("nope", "s", callback=print),
        "fetch": lambda: b.fetch("nope", 0, 0),
        "get_transaction": lambda: b.get_transaction("nope", 0, 1),
        "transactions_range": lambda: b.transactions_range("nope", 0, 0, 10),
        "last_transaction": lambda: b.last_transaction("nope", 0),
        "last_txn_id": lambda: b.last_txn_id("nope", 0),
        "get_offsets": lambda: b.get_offsets("nope", "c"),
    }
    for op in [O.Open("nope", 0, 1000), O.Instant("nope", 0, O.pack_items([b"x"])),
               O.Data("nope", 0, 1, O.pack_items([b"x"])), O.Checkpoint("nope", 0, 1),
               O.Cancel("nope", 0, 1), O.CancelIfOpen("nope", 0, 1), O.SetOffsets("nope", "c", {0: 1}),
               O.DeleteStream("nope")]:
        calls[f"submit {type(op).__name__}"] = lambda op=op: b.submit([op])
    for name, call in calls.items():
        with pytest.raises(errors.StreamNotFound):
            call()
            pytest.fail(f"{name} did not raise StreamNotFound")
    assert isinstance(errors.StreamNotFound("x"), KeyError)


def test_handles_of_a_deleted_stream_raise_stream_not_found(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=1)
    producer = engine.producer("s")
    consumer = engine.consumer("s", "c")
    txn = producer.new_transaction()
    txn.send(b"a")
    registered = producer.new_transaction()
    assert registered.id > 0
    engine.delete_stream("s")
    with pytest.raises(errors.StreamNotFound):
        producer.instant([b"x"])
    with pytest.raises(errors.StreamNotFound):
        txn.checkpoint()
    with pytest.raises(errors.StreamNotFound):
        registered.checkpoint()
    with pytest.raises(errors.StreamNotFound):
        consumer.get_transaction(0)
    with pytest.raises(errors.StreamNotFound):
        consumer.checkpoint()
    with pytest.raises(errors.StreamNotFound):
        engine.producer("s")


def test_handles_of_a_deleted_stream_do_not_act_on_a_new_stream_of_the_same_name(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=3)
    old_info = engine.get_stream("s")
    producer = engine.producer("s")  # round-robin over 3 partitions
    pinned = engine.producer("s", partition=0)
    consumer = engine.consumer("s", "c")
    registered = pinned.new_transaction()
    assert registered.id > 0
    buffered = pinned.new_transaction()
    buffered.send(b"stale")
    engine.delete_stream("s")
    engine.create_stream("s", partitions=1)
    assert engine.get_stream("s").id != old_info.id
    fresh = engine.producer("s")
    fresh_id = fresh.instant([b"new"])
    stale_calls = {
        "instant": lambda: pinned.instant([b"x"]),
        "round-robin instant": lambda: producer.instant([b"x"]),
        "new_transaction + checkpoint": lambda: (lambda t: (t.send(b"x"), t.checkpoint()))(producer.new_transaction()),
        "registered.checkpoint": registered.checkpoint,
        "buffered.checkpoint": buffered.checkpoint,
        "consumer.get_transaction": lambda: consumer.get_transaction(0),
        "consumer.get_transaction_by_id": lambda: consumer.get_transaction_by_id(0, fresh_id),
        "consumer.get_last_transaction": lambda: consumer.get_last_transaction(0),
        "consumer.get_transactions_from_to": lambda: consumer.get_transactions_from_to(0, 0, 2**62),
        "consumer.checkpoint": consumer.checkpoint,
        "group": lambda: ts.CheckpointGroup(pinned, consumer).checkpoint(),
    }
    for name, call in stale_calls.items():
        with pytest.raises(errors.StreamNotFound):
            call()
            pytest.fail(f"{name} acted on the new stream")
    for op in [O.Instant("s", 0, O.pack_items([b"x"]), stream_id=old_info.id),
               O.Open("s", 0, 1000, stream_id=old_info.id),
               O.SetOffsets("s", "c", {0: 1}, stream_id=old_info.id)]:
        with pytest.raises(errors.StreamNotFound):
            engine.backend.submit([op])
    assert [items for _, _, items in _visible(engine, "s")] == [[b"new"]]
    assert engine.backend.get_offsets("s", "c") == {}


def test_ids_never_repeat_in_a_partition_of_a_recreated_stream(make_engine, clock) -> None:
    engine = make_engine(clock=clock)  # a frozen clock: every ID below is of the same millisecond
    engine.create_stream("s")
    before = [engine.producer("s").instant([b"%d" % i]) for i in range(3)]
    other = engine.producer("s").new_transaction()
    assert other.id > before[-1]
    engine.delete_stream("s")
    engine.create_stream("s")
    after = engine.producer("s").new_transaction()
    after.send(b"new")
    assert after.id > other.id
    after.checkpoint()
    engine.create_stream("t")
    assert engine.producer("t").instant([b"t"]) > after.id - 1  # any stream: above every deleted ID
    engine.close()
    reopened = make_engine(engine.backend.path, clock=clock)  # the floor is stored
    reopened.delete_stream("s")
    reopened.create_stream("s")
    assert reopened.producer("s").instant([b"again"]) > after.id


def test_delete_stream_removes_its_data_and_offsets(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    engine.producer("s").instant([b"old"], partition=0)
    c = engine.consumer("s", "c")
    assert c.get_transaction(0).items == [b"old"]
    c.checkpoint()
    engine.delete_stream("s")
    assert [s.name for s in engine.list_streams()] == []
    engine.create_stream("s", partitions=2)
    assert engine.backend.get_offsets("s", "c") == {}
    assert engine.backend.last_txn_id("s", 0) == 0
    assert engine.consumer("s", "c").get_transaction(0) is None


def test_partition_out_of_range(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    producer = engine.producer("s")
    consumer = engine.consumer("s", "c")
    b = engine.backend
    calls = [
        lambda: engine.producer("s", partition=2),
        lambda: producer.new_transaction(2),
        lambda: producer.new_transaction(-1),
        lambda: producer.instant([b"x"], partition=2),
        lambda: engine.consumer("s", "c", partitions=[0, 2]),
        lambda: engine.subscribe("s", "x", callback=print, partitions=[5]),
        lambda: consumer.get_transaction(2),
        lambda: consumer.get_transaction_by_id(2, 1),
        lambda: consumer.get_transactions_from_to(2, 0, 10),
        lambda: consumer.get_last_transaction(2),
        lambda: consumer.set_offset(2, 0),
        lambda: b.fetch("s", 2, 0),
        lambda: b.last_txn_id("s", 2),
        lambda: b.submit([O.Instant("s", 2, O.pack_items([b"x"]))]),
        lambda: b.submit([O.Open("s", 7, 1000)]),
        lambda: b.submit([O.SetOffsets("s", "c", {3: 1})]),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(errors.PartitionOutOfRange):
            call()
            pytest.fail(f"call #{i} did not raise")
    assert producer.instant([b"ok"], partition=1) > 0


# --------------------------------------------------------------------------- items
def test_item_too_large_with_a_configurable_limit(make_engine) -> None:
    engine = make_engine(max_item_size=100)
    engine.create_stream("s")
    producer = engine.producer("s")
    assert producer.instant([b"x" * 100]) > 0  # exactly at the limit is fine
    txn = producer.new_transaction()
    with pytest.raises(errors.ItemTooLarge):
        txn.send(b"x" * 101)
    with pytest.raises(errors.ItemTooLarge):
        txn.send_many([b"ok", b"x" * 101])
    txn.send(b"fits")
    txn.checkpoint()  # the transaction is still usable, and holds only what was accepted
    with pytest.raises(errors.ItemTooLarge):
        producer.instant([b"a", b"x" * 101])
    with pytest.raises(errors.ItemTooLarge):  # the engine checks too, whatever the client sends
        engine.backend.submit([O.Instant("s", 0, O.pack_items([b"x" * 101]))])
    assert [items for _, _, items in _visible(engine, "s")] == [[b"x" * 100], [b"fits"]]
    assert issubclass(errors.ItemTooLarge, ValueError)


@pytest.mark.parametrize("items", [["text"], [1], [b"ok", "text"], [None, b"ok"], [[b"nested"]]])
def test_a_chunk_of_non_bytes_items_is_refused(engine: ts.Engine, items: list) -> None:
    """One item or several (the one-item case is checked on its own fast path), whatever
    the client sends: nothing is written."""
    engine.create_stream("s")
    chunk = msgpack.packb(items, use_bin_type=True)
    with pytest.raises(errors.InvalidArgument, match="items must be bytes, got"):
        engine.backend.submit([O.Instant("s", 0, chunk)])
    assert _visible(engine, "s") == []


def test_item_too_large_default_limit_is_reported(engine: ts.Engine) -> None:
    assert engine.backend.max_item_size == 10 * 1024 * 1024


# --------------------------------------------------------------------------- closed engine
def test_every_api_raises_engine_closed_after_close(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    producer = engine.producer("s")
    consumer = engine.consumer("s", "c")
    open_txn = producer.new_transaction(0)
    open_txn.send(b"a")
    group = ts.CheckpointGroup(producer, consumer)
    engine.close()
    engine.close()  # idempotent
    assert engine.closed
    calls = {
        "create_stream": lambda: engine.create_stream("t"),
        "get_stream": lambda: engine.get_stream("s"),
        "list_streams": lambda: engine.list_streams(),
        "delete_stream": lambda: engine.delete_stream("s"),
        "producer": lambda: engine.producer("s"),
        "consumer": lambda: engine.consumer("s", "c"),
        "subscribe": lambda: engine.subscribe("s", "x", callback=print),
        "compact": lambda: engine.compact(),
        "stats": lambda: engine.stats(),
        "keep_alive": lambda: engine.keep_alive(),
        "new_transaction": lambda: producer.new_transaction(),
        "instant": lambda: producer.instant([b"x"]),
        "send": lambda: open_txn.send(b"x"),
        "send_many": lambda: open_txn.send_many([b"x"]),
        "flush": lambda: open_txn.flush(),
        "checkpoint": lambda: open_txn.checkpoint(),
        "cancel": lambda: open_txn.cancel(),
        "id": lambda: open_txn.id,
        "get_transaction": lambda: consumer.get_transaction(),
        "get_transaction_by_id": lambda: consumer.get_transaction_by_id(0, 1),
        "get_transactions_from_to": lambda: consumer.get_transactions_from_to(0, 0, 1),
        "get_last_transaction": lambda: consumer.get_last_transaction(0),
        "consumer.checkpoint": lambda: consumer.checkpoint(),
        "set_offset": lambda: consumer.set_offset(0, 0),
        "group.checkpoint": lambda: group.checkpoint(),
        "submit": lambda: engine.backend.submit([O.Instant("s", 0, O.pack_items([b"x"]))]),
        "fetch": lambda: engine.backend.fetch("s", 0, 0),
    }
    for name, call in calls.items():
        with pytest.raises(errors.EngineClosed):
            call()
            pytest.fail(f"{name} did not raise EngineClosed")


def test_reads_of_a_closed_handle_raise_engine_closed_while_another_handle_is_open(tmp_path) -> None:
    with ts.open(tmp_path, compaction_interval=None) as other:
        other.create_stream("s")
        tid = other.producer("s").instant([b"x"])
        engine = ts.open(tmp_path, compaction_interval=None)
        consumer = engine.consumer("s", "c")
        engine.close()
        for call in (lambda: consumer.get_transaction_by_id(0, tid), lambda: consumer.get_last_transaction(0),
                     lambda: consumer.get_transactions_from_to(0, 0, tid), lambda: consumer.get_transaction(0)):
            with pytest.raises(errors.EngineClosed):
                call()
        assert other.consumer("s", "c").get_last_transaction(0).id == tid  # the other handle still reads


# --------------------------------------------------------------------------- transactions
@pytest.mark.parametrize("finish", ["checkpoint", "cancel"])
def test_transaction_finished(engine: ts.Engine, finish: str) -> None:
    engine.create_stream("s")
    txn = engine.producer("s").new_transaction()
    txn.send(b"a")
    getattr(txn, finish)()
    for call in (lambda: txn.send(b"b"), lambda: txn.send_many([b"b"]), txn.flush, txn.checkpoint, txn.cancel):
        with pytest.raises(errors.TransactionFinished):
            call()
    assert [items for _, _, items in _visible(engine, "s")] == ([[b"a"]] if finish == "checkpoint" else [])


def test_checkpointing_an_empty_transaction_cancels_it(engine: ts.Engine) -> None:
    engine.create_stream("s")
    producer = engine.producer("s")
    txn = producer.new_transaction()
    assert txn.id > 0  # registered (blocks consumers until resolved)
    c = engine.consumer("s", "c")
    producer.instant([b"after"])
    assert c.get_transaction(0) is None
    txn.checkpoint()
    assert c.get_transaction(0).items == [b"after"]
    with pytest.raises(errors.TransactionFinished):
        txn.send(b"x")


def test_transaction_expired(make_engine, clock) -> None:
    engine = make_engine(clock=clock, txn_ttl=1.0, keepalive_interval=None)
    engine.create_stream("s")
    producer = engine.producer("s", batch_size=1)
    txns = []
    for name in (b"a", b"b", b"c", b"d"):
        t = producer.new_transaction()
        t.send(name)
        t.flush()  # registered now: its TTL runs
        txns.append(t)
    a, b, c, d = txns
    clock.advance(999)
    assert engine.keep_alive() == 4  # refreshed just before expiry: a new full TTL
    clock.advance(999)
    d.checkpoint()  # 1998 ms after opening: alive thanks to the keep-alive
    clock.advance(1)  # 1000 ms after the keep-alive: expired
    with pytest.raises(errors.TransactionExpired):
        a.checkpoint()
    assert not a.is_open
    b.send(b"b2")  # buffered
    with pytest.raises(errors.TransactionExpired):
        b.send(b"b3")  # needs a flush of b2: expired
    consumer = engine.consumer("s", "x")
    assert consumer.get_transaction(0).items == [b"d"]  # passes over the expired ones
    with pytest.raises(errors.TransactionExpired):  # also once a reader invalidated it
        c.checkpoint()
    assert [items for _, _, items in _visible(engine, "s")] == [[b"d"]]


def test_an_unregistered_transaction_has_nothing_to_expire(make_engine, clock) -> None:
    """Documented: a transaction is registered (gets its ID and TTL) at its first flush,
    checkpoint or ``txn.id`` read; before that nothing is stored, so nothing can expire."""
    engine = make_engine(clock=clock, txn_ttl=1.0, keepalive_interval=None)
    engine.create_stream("s")
    txn = engine.producer("s").new_transaction()
    txn.send(b"late but fine")
    clock.advance(10_000)
    txn.checkpoint()
    assert txn.id == clock.ms * 100_000
    assert [items for _, _, items in _visible(engine, "s")] == [[b"late but fine"]]


def test_group_with_an_expired_transaction_writes_nothing(make_engine, clock) -> None:
    engine = make_engine(clock=clock, txn_ttl=1.0, keepalive_interval=None)
    engine.create_stream("in")
    engine.create_stream("out", partitions=2)
    engine.producer("in").instant([b"input"])
    consumer = engine.consumer("in", "c")
    assert consumer.get_transaction().items == [b"input"]
    fresh_producer = engine.producer("out", partition=1)
    old_producer = engine.producer("out", partition=0)
    old = old_producer.new_transaction()
    old.send(b"old")
    old.flush()  # registered: it has a TTL from now
    clock.advance(1500)
    fresh = fresh_producer.new_transaction()
    fresh.send(b"fresh")
    seq = engine.stats()["log_seq"]
    group = ts.CheckpointGroup(fresh_producer, consumer, old_producer)
    with pytest.raises(errors.TransactionExpired):
        group.checkpoint()
    after = [type(op) for _, _, ops in engine.backend.read_log(seq + 1) for op in ops]
    assert set(after) <= {O.KeepAlive}  # nothing of the group; only the probe of which transaction expired
    assert engine.backend.get_offsets("in", "c") == {}
    assert _visible(engine, "out") == []
    assert fresh.is_open and not old.is_open  # the expired one is finished, as by old.checkpoint()
    with pytest.raises(errors.TransactionFinished):
        old.cancel()
    group.checkpoint()  # the group works again
    assert [items for _, _, items in _visible(engine, "out")] == [[b"fresh"]]
    assert engine.backend.get_offsets("in", "c") == {0: consumer.offsets[0]}


def test_group_checkpoints_work_after_one_raised_transaction_expired(make_engine, clock) -> None:
    engine = make_engine(clock=clock, txn_ttl=1.0, keepalive_interval=None)
    engine.create_stream("out")
    producer = engine.producer("out")
    group = ts.CheckpointGroup(producer)
    expired = producer.new_transaction()
    expired.send(b"late")
    expired.flush()
    clock.advance(1500)
    with pytest.raises(errors.TransactionExpired):
        group.checkpoint()
    assert not expired.is_open and producer.open_transactions() == []
    for i in range(2):  # later group checkpoints, with new transactions, work
        txn = producer.new_transaction()
        txn.send(b"next %d" % i)
        group.checkpoint()
        assert txn.state == "checkpointed"
    assert [items for _, _, items in _visible(engine, "out")] == [[b"next 0"], [b"next 1"]]


def test_send_during_a_group_checkpoint_raises_instead_of_losing_the_item(engine: ts.Engine) -> None:
    engine.create_stream("s")
    producer = engine.producer("s")
    txn = producer.new_transaction()
    txn.send(b"a")
    ops, done = producer.prepare_group_checkpoint()  # what CheckpointGroup does first
    with pytest.raises(errors.TransactionFinished):
        txn.send(b"would be missed")
    done(engine.backend.submit(ops))
    assert [items for _, _, items in _visible(engine, "s")] == [[b"a"]]


def test_transaction_already_opened(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    producer = engine.producer("s")
    t0 = producer.new_transaction(0)
    with pytest.raises(errors.TransactionAlreadyOpened):
        producer.new_transaction(0, policy=ts.ErrorIfOpened)
    t1 = producer.new_transaction(1, policy=ts.ErrorIfOpened)  # another partition is fine
    t0.cancel()
    t0b = producer.new_transaction(0, policy=ts.ErrorIfOpened)
    assert t0b.partition == 0 and t1.partition == 1


def test_opening_policies(engine: ts.Engine) -> None:
    engine.create_stream("s")
    producer = engine.producer("s")
    a = producer.new_transaction()
    a.send(b"a")
    b = producer.new_transaction(policy=ts.CheckpointIfOpened)
    assert not a.is_open
    b.send(b"b")
    c = producer.new_transaction(policy=ts.CancelIfOpened)
    assert not b.is_open
    c.send(b"c")
    d = producer.new_transaction(policy=ts.EnqueueIfOpened)
    d.send(b"d")
    assert [t for t in producer.open_transactions()] == [c, d]
    producer.checkpoint()
    assert [items for _, _, items in _visible(engine, "s")] == [[b"a"], [b"c"], [b"d"]]


# --------------------------------------------------------------------------- bad arguments
def test_invalid_arguments(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    producer = engine.producer("s")
    consumer = engine.consumer("s", "c")
    txn = producer.new_transaction()
    b = engine.backend
    bad = {
        "name ''": lambda: engine.create_stream(""),
        "name int": lambda: engine.create_stream(1),
        "name None": lambda: engine.create_stream(None),
        "name NUL": lambda: engine.create_stream("a\x00b"),
        "name too long": lambda: engine.create_stream("x" * 300),
        "partitions 0": lambda: engine.create_stream("t", partitions=0),
        "partitions -1": lambda: engine.create_stream("t", partitions=-1),
        "partitions str": lambda: engine.create_stream("t", partitions="2"),
        "partitions bool": lambda: engine.create_stream("t", partitions=True),
        "partitions float": lambda: engine.create_stream("t", partitions=1.5),
        "ttl 0": lambda: engine.create_stream("t", ttl=0),
        "ttl str": lambda: engine.create_stream("t", ttl="60"),
        "description": lambda: engine.create_stream("t", description=5),
        "get_stream int": lambda: engine.get_stream(5),
        "list_streams limit": lambda: engine.list_streams(limit=-1),
        "list_streams prefix": lambda: engine.list_streams(prefix=3),
        "serializer name": lambda: engine.producer("s", serializer="yaml"),
        "serializer int": lambda: engine.producer("s", serializer=42),
        "serializer pair": lambda: engine.consumer("s", "c", serializer=(1, 2)),
        "producer partition str": lambda: engine.producer("s", partition="0"),
        "batch_size 0": lambda: engine.producer("s", batch_size=0),
        "batch_size bool": lambda: engine.producer("s", batch_size=True),
        "batch_size str": lambda: engine.producer("s", batch_size="10"),
        "txn_ttl": lambda: engine.producer("s", txn_ttl=-1),
        "policy": lambda: producer.new_transaction(policy="error"),
        "new_transaction partition": lambda: producer.new_transaction(partition=0.5),
        "item str without serializer": lambda: txn.send("text"),
        "item int": lambda: txn.send(5),
        "send_many bytes": lambda: txn.send_many(b"abc"),
        "send_many mixed": lambda: txn.send_many([b"ok", 5]),
        "instant empty": lambda: producer.instant([]),
        "instant str": lambda: producer.instant(["a"]),
        "consumer name ''": lambda: engine.consumer("s", ""),
        "consumer name int": lambda: engine.consumer("s", 7),
        "start word": lambda: engine.consumer("s", "c", start="yesterday"),
        "start negative": lambda: engine.consumer("s", "c", start=-1),
        "start float": lambda: engine.consumer("s", "c", start=1.5),
        "start bool": lambda: engine.consumer("s", "c", start=True),
        "partitions empty": lambda: engine.consumer("s", "c", partitions=[]),
        "consumer partitions str": lambda: engine.consumer("s", "c", partitions=["0"]),
        "prefetch": lambda: engine.consumer("s", "c", prefetch=0),
        "set_offset negative": lambda: consumer.set_offset(0, -1),
        "set_offset str": lambda: consumer.set_offset(0, "1"),
        "get_transaction str": lambda: consumer.get_transaction("0"),
        "from_to str": lambda: consumer.get_transactions_from_to(0, "a", 5),
        "by_id negative": lambda: consumer.get_transaction_by_id(0, -5),
        "callback": lambda: engine.subscribe("s", "x", callback=None),
        "poll_interval": lambda: engine.subscribe("s", "x", callback=print, poll_interval=0),
        "submit not a list": lambda: b.submit("ops"),
        "submit unknown opcode": lambda: b.submit([(999, "s")]),
        "submit empty op": lambda: b.submit([()]),
        "submit bad chunk": lambda: b.submit([O.Instant("s", 0, b"\xc1not msgpack")]),
        "submit chunk of ints": lambda: b.submit([O.Instant("s", 0, O.pack_items([1, 2]))]),
        "submit bad ttl": lambda: b.submit([O.Open("s", 0, -5)]),
        "submit ttl None": lambda: b.submit([O.Open("s", 0, None)]),  # type: ignore[arg-type]
        "submit a bare tuple": lambda: b.submit([(3, "s", 0, 1000)]),
        "fetch after": lambda: b.fetch("s", 0, -1),
        "txn_id_at": lambda: ts.txn_id_at("noon"),
        "txn_id_at nan": lambda: ts.txn_id_at(float("nan")),
        "txn_id_at inf": lambda: ts.txn_id_at(float("inf")),
        "txn_id_at 1e300": lambda: ts.txn_id_at(1e300),
        "txn_id_at negative": lambda: ts.txn_id_at(-1.0),
        "txn_time str": lambda: ts.txn_time("1"),
        "txn_time None": lambda: ts.txn_time(None),
        "txn_time float": lambda: ts.txn_time(1.5),
        "txn_time 2**64": lambda: ts.txn_time(2**64),
        "surrogate stream": lambda: engine.create_stream("\udc80"),
        "surrogate get_stream": lambda: engine.get_stream("\udc80"),
        "surrogate delete_stream": lambda: engine.delete_stream("a\udc80"),
        "surrogate producer": lambda: engine.producer("\udc80"),
        "surrogate consumer stream": lambda: engine.consumer("\udc80", "c"),
        "surrogate consumer name": lambda: engine.consumer("s", "\udc80"),
        "surrogate prefix": lambda: engine.list_streams(prefix="\udc80"),
        "surrogate batch": lambda: engine.batch().create_stream("\udc80"),
        "consumer partitions int": lambda: engine.consumer("s", "c", partitions=5),
        "consumer partitions str 01": lambda: engine.consumer("s", "c", partitions="01"),
        "send_many None": lambda: txn.send_many(None),
        "send_many int": lambda: txn.send_many(5),
        "instant None": lambda: producer.instant(None),
        "batch instant None": lambda: engine.batch().instant("s", None),
        "batch set_offsets None": lambda: engine.batch().set_offsets("s", "c", None),
        "batch set_offsets bad offset": lambda: engine.batch().set_offsets("s", "c", {0: -1}),
        "set_offset 2**64": lambda: consumer.set_offset(0, 2**64),
        "prefetch 2**30": lambda: engine.consumer("s", "c", prefetch=2**30),
        "poll_interval nan": lambda: engine.subscribe("s", "x", callback=print, poll_interval=float("nan")),
        "poll_interval inf": lambda: engine.subscribe("s", "x", callback=print, poll_interval=float("inf")),
        "group member": lambda: ts.CheckpointGroup(producer, "not an agent"),
        "wait_for_commit seen str": lambda: b.wait_for_commit("x", 0),  # type: ignore[arg-type]
        "wait_for_commit timeout str": lambda: b.wait_for_commit(0, "x"),  # type: ignore[arg-type]
        "wait_for_commit seen None": lambda: b.wait_for_commit(None, 0),  # type: ignore[arg-type]
        "wait_for_commit timeout negative": lambda: b.wait_for_commit(0, -1),
        "wait_for_commit timeout nan": lambda: b.wait_for_commit(0, float("nan")),
        "wait_for_commit timeout inf": lambda: b.wait_for_commit(0, float("inf")),
        "str serializer lone surrogate": lambda: engine.producer("s", serializer="str").instant(["a\ud800"]),
        "json serializer lone surrogate": lambda: engine.producer("s", serializer="json").instant(["a\ud800"]),
    }
    for what, call in bad.items():
        with pytest.raises(errors.InvalidArgument):
            call()
            pytest.fail(f"{what}: no InvalidArgument")
    # nothing of it was created or written
    assert [s.name for s in engine.list_streams()] == ["s"]
    assert _visible(engine, "s") == []


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 1e308, -1, 0, "10", True])
def test_a_connect_timeout_that_is_not_a_finite_number_of_seconds_is_refused(timeout: object) -> None:
    """nan, inf and 1e308 were accepted, and every request then waited forever."""
    with pytest.raises(errors.InvalidArgument, match="timeout must be a finite number of seconds"):
        ts.connect("tcp://127.0.0.1:1", timeout=timeout).close()  # type: ignore[arg-type]


def test_invalid_open_arguments(tmp_path) -> None:
    bad = [
        lambda: ts.open(tmp_path / "a", durability="eventually"),
        lambda: ts.open(5),
        lambda: ts.open(tmp_path / "b", map_size=10),
        lambda: ts.open(tmp_path / "c", max_item_size=0),
        lambda: ts.open(tmp_path / "d", txn_ttl=0),
        lambda: ts.open(tmp_path / "e", log_retention=-1),
    ]
    for i, call in enumerate(bad):
        with pytest.raises(errors.InvalidArgument):
            call().close()
            pytest.fail(f"#{i}: no InvalidArgument")


def test_invalid_options_are_refused_at_open_and_leave_nothing_behind(tmp_path) -> None:
    import threading

    from tstreams_embedded.engine import embedded

    (tmp_path / "a-file").write_bytes(b"not a directory")
    threads = set(threading.enumerate())
    bad = {
        "compaction_interval -1": {"compaction_interval": -1},
        "compaction_interval 0": {"compaction_interval": 0},
        "compaction_interval str": {"compaction_interval": "60"},
        "compaction_interval nan": {"compaction_interval": float("nan")},
        "compaction_interval inf": {"compaction_interval": float("inf")},
        "keepalive_interval negative": {"keepalive_interval": -0.001},
        "keepalive_interval nan": {"keepalive_interval": float("nan")},
        "keepalive_interval str": {"keepalive_interval": "1"},
        "flush_interval -1": {"flush_interval": -1, "durability": "async"},
        "flush_interval None": {"flush_interval": None},
        "txn_ttl -1": {"txn_ttl": -1},
        "txn_ttl nan": {"txn_ttl": float("nan")},
        "max_map_size below map_size": {"max_map_size": 1 << 20},
        "clock": {"clock": 5},
        "unknown option": {"max_itme_size": 5},
    }
    for what, options in bad.items():
        with pytest.raises(errors.InvalidArgument):
            ts.open(tmp_path / "d", **options).close()
            pytest.fail(f"{what}: no InvalidArgument")
        assert not embedded._registry, what  # nothing registered
    with pytest.raises(errors.InvalidArgument, match="not a directory"):
        ts.open(tmp_path / "a-file")
    assert set(threading.enumerate()) == threads  # no maintenance or keep-alive thread left
    with ts.open(tmp_path / "d", compaction_interval=0.5, durability="async", flush_interval=0.5) as e:
        e.create_stream("s")  # and the directory opens normally afterwards
    with ts.open(tmp_path / "d", keepalive_interval=None, compaction_interval=None) as e:
        assert e.has_stream("s")


def test_a_second_open_with_other_storage_options_raises_engine_busy(tmp_path, clock) -> None:
    with ts.open(tmp_path, max_item_size=100, compaction_interval=None) as first:
        for option, value in [("max_item_size", 200), ("map_size", 1 << 21), ("compaction_interval", 30.0),
                              ("clock", clock), ("log_retention", 5)]:
            options = {"max_item_size": 100, "compaction_interval": None, option: value}
            with pytest.raises(errors.EngineBusy, match=option):
                ts.open(tmp_path, **options)
        with pytest.raises(errors.EngineBusy, match="max_item_size"):
            ts.open(tmp_path, compaction_interval=None)  # the default differs from the first open's
        # per-handle options may differ
        with ts.open(tmp_path, max_item_size=100, compaction_interval=None, txn_ttl=5,
                     keepalive_interval=None) as second:
            assert second.backend is first.backend and second.txn_ttl == 5
        assert first.backend.max_item_size == 100


def test_engine_busy_for_a_conflicting_second_open(tmp_path) -> None:
    with ts.open(tmp_path, durability="sync") as e:
        with ts.open(tmp_path, durability="sync") as same:  # shares the environment
            e.create_stream("s")
            assert same.get_stream("s").name == "s"
        assert e.get_stream("s").name == "s"  # still open after the other handle closed
        with pytest.raises(errors.EngineBusy):
            ts.open(tmp_path, durability="async")


# --------------------------------------------------------------------------- markers, atomicity
def test_marker_conflict_applies_nothing(engine: ts.Engine) -> None:
    engine.create_stream("s")
    b = engine.backend
    chunk = O.pack_items([b"batch-1"])
    b.submit([O.SetMarker("sink", 1, True), O.Instant("s", 0, chunk)])
    assert b.get_marker("sink") == 1
    seq = engine.stats()["log_seq"]
    for replay in (1, 0):
        with pytest.raises(errors.MarkerConflict):
            b.submit([O.Instant("s", 0, O.pack_items([b"dup"])), O.SetMarker("sink", replay, True)])
    assert engine.stats()["log_seq"] == seq
    assert [items for _, _, items in _visible(engine, "s")] == [[b"batch-1"]]
    b.submit([O.SetMarker("sink", 0, False)])  # unguarded: always applies
    assert b.get_marker("sink") == 0
    assert b.get_marker("other") is None


@pytest.mark.parametrize("bad_op", [
    O.Instant("s", 5, O.pack_items([b"x"])),  # partition out of range
    O.Instant("missing", 0, O.pack_items([b"x"])),  # unknown stream
    O.Checkpoint("s", 0, 12345),  # unknown transaction
    O.CreateStream("s", 1, 60),  # stream exists
    O.Instant("s", 0, O.pack_items(["not bytes"])),  # bad item type
    (42,),  # unknown opcode
])
def test_a_failing_batch_leaves_nothing(engine: ts.Engine, bad_op: tuple) -> None:
    engine.create_stream("s", partitions=2)
    producer = engine.producer("s")
    producer.instant([b"before"], partition=0)
    open_txn = producer.new_transaction(1)
    open_txn.send(b"pending")
    assert open_txn.id > 0
    c = engine.consumer("s", "c")
    assert c.get_transaction(0).items == [b"before"]
    stats = engine.stats()
    last = [engine.backend.last_txn_id("s", p) for p in (0, 1)]
    batch = [
        O.CreateStream("new", 1, 60),
        O.Instant("s", 0, O.pack_items([b"should not appear"])),
        O.Checkpoint("s", 1, open_txn.id, O.pack_items([b"more"])),
        O.SetOffsets("s", "c", {0: 2**40}),
        O.SetMarker("m", 7, True),
        bad_op,
    ]
    with pytest.raises(errors.TStreamsError):
        engine.backend.submit(batch)
    after = engine.stats()
    assert (after["log_seq"], after["transactions"], after["streams"]) == (
        stats["log_seq"], stats["transactions"], stats["streams"])
    assert [engine.backend.last_txn_id("s", p) for p in (0, 1)] == last
    assert not engine.has_stream("new")
    assert engine.backend.get_offsets("s", "c") == {}
    assert engine.backend.get_marker("m") is None
    assert [items for _, _, items in _visible(engine, "s")] == [[b"before"]]
    open_txn.checkpoint()  # the open transaction is intact
    assert [items for _, _, items in _visible(engine, "s")] == [[b"before"], [b"pending"]]


def test_error_classes_are_rebuilt_from_the_wire() -> None:
    for cls in (errors.StreamExists, errors.StreamNotFound, errors.TransactionExpired, errors.MarkerConflict,
                errors.StorageFull, errors.EngineClosed, errors.ItemTooLarge):
        exc = errors.error_from_wire(*errors.error_to_wire(cls("msg")))
        assert type(exc) is cls and str(exc) == "msg"
    assert type(errors.error_from_wire(*errors.error_to_wire(TypeError("t")))) is errors.InvalidArgument


def test_txn_id_at_and_time_round_trip() -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc)
    tid = ts.txn_id_at(when)
    assert tid == 1767323045678 * 100_000
    assert ts.txn_time(tid + 99_999) == when
    assert ts.txn_id_at(when.replace(tzinfo=None)) == tid  # naive means UTC


def test_list_streams_prefix_and_limit(engine: ts.Engine) -> None:
    for name in ("b", "a2", "a1", "c", "a3"):
        engine.create_stream(name, partitions=2, ttl=120, description=f"about {name}")
    assert [s.name for s in engine.list_streams()] == ["a1", "a2", "a3", "b", "c"]
    assert [s.name for s in engine.list_streams(prefix="a")] == ["a1", "a2", "a3"]
    assert [s.name for s in engine.list_streams(prefix="a", limit=2)] == ["a1", "a2"]
    assert engine.list_streams(prefix="zz") == [] and engine.list_streams(limit=0) == []
    info = engine.get_stream("b")
    assert (info.partitions, info.ttl, info.description) == (2, 120, "about b")
    assert engine.has_stream("b") and not engine.has_stream("nope")


def test_a_checkpoint_group_spans_one_engine_only(make_engine) -> None:
    e1, e2 = make_engine(), make_engine()
    for e in (e1, e2):
        e.create_stream("s")
    with pytest.raises(errors.InvalidArgument):
        ts.CheckpointGroup(e1.producer("s"), e2.consumer("s", "c"))
    group = ts.CheckpointGroup(e1.producer("s"))
    with pytest.raises(errors.InvalidArgument):
        group.add(e2.producer("s"))


def test_clients_cannot_forge_engine_resolved_fields_or_engine_records(engine: ts.Engine) -> None:
    """Only log replay may carry resolved IDs and deadlines; compaction and invalidation
    are the engine's own records. A client submit of any of them is refused whole."""
    engine.create_stream("s", partitions=2)
    engine.create_stream("keep", ttl=3600)
    producer = engine.producer("s")
    existing = producer.instant([b"committed"], partition=0)
    engine.producer("keep").instant([b"unexpired"])
    open_txn = producer.new_transaction(1)
    open_txn.send(b"pending")
    open_txn.flush()
    before = (_visible(engine, "s"), _visible(engine, "keep"), engine.stats()["log_seq"])
    chunk = O.pack_items([b"FORGED"])
    forged = {
        "instant over a committed id": O.Instant("s", 0, chunk, existing),
        "instant far behind consumers": O.Instant("s", 0, chunk, 12345),
        "open with a chosen id": O.Open("s", 0, 1000, txn_id=existing + 1),
        "open that never expires": O.Open("s", 0, 1000, deadline=2**63 - 1),
        "keep-alive forever": O.KeepAlive([["s", 1, open_txn.id]], 1000, 2**63 - 1),
        "compaction of unexpired data": O.Compact("keep", 0, 2**63 - 1),
        "invalidation": O.Invalidate("s", 1, open_txn.id),
    }
    for what, op in forged.items():
        with pytest.raises(errors.InvalidArgument, match="engine"):
            engine.backend.submit([O.Instant("s", 0, O.pack_items([b"innocent"])), op])
            pytest.fail(f"{what}: accepted")
    assert (_visible(engine, "s"), _visible(engine, "keep"), engine.stats()["log_seq"]) == before
    open_txn.send(b"more")
    open_txn.checkpoint()  # the open transaction was not touched either
    assert engine.backend.get_transaction("s", 1, open_txn.id).items == [b"pending", b"more"]


@pytest.mark.parametrize("where", ["/proc/no-such-dir", "parent-is-a-file/data", "data-mdb-is-a-dir",
                                   "lock-mdb-is-a-dir"])
def test_a_path_that_cannot_be_a_data_directory_is_data_directory_unusable(tmp_path, where: str) -> None:
    (tmp_path / "parent-is-a-file").write_bytes(b"x")
    (tmp_path / "data-mdb-is-a-dir" / "data.mdb").mkdir(parents=True)
    (tmp_path / "lock-mdb-is-a-dir" / "lock.mdb").mkdir(parents=True)
    path = where if where.startswith("/") else tmp_path / where
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(errors.DataDirectoryUnusable, match="cannot be"):
        ts.open(path).close()
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing created
