"""Scheduled delivery (issue 22 §3): ``engine.schedule`` / ``cancel_schedule`` /
``schedules``, embedded and remote alike; thousands of schedules at random times against a
model on the engine's fake clock, across restarts; SIGKILLs of the process that fires them."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.protocol.schedules import NAMESPACE
from tstreams_embedded.engine.storage.core import Core
from tstreams_embedded.ids import ID_MULTIPLIER
from tstreams_embedded.testing import FakeClock, ServeProcess, eventually, kill_process

from .procs import start_worker

UTC = dt.timezone.utc


def delivered(engine: ts.Engine, stream: str) -> list[tuple[int, int, list[bytes]]]:
    """``(partition, transaction ID, items)`` of every transaction of ``stream``."""
    return [(p, t.id, t.items) for p in range(engine.get_stream(stream).partitions)
            for t in engine.backend.transactions_range(stream, p, 0, 2**63 - 1)]


def test_a_schedule_becomes_one_checkpointed_transaction_at_its_time(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    sid = engine.schedule("s", [b"a", b"b"], delay=0.2, partition=1)
    (pending,) = engine.schedules()
    assert (pending.id, pending.stream, pending.partition, pending.items) == (sid, "s", 1, 2)
    assert pending.due_ms - pending.created_ms == 200
    ((partition, txn_id, items),) = eventually(lambda: delivered(engine, "s"), timeout=10)
    assert (partition, items) == (1, [b"a", b"b"])
    assert txn_id // ID_MULTIPLIER >= pending.due_ms  # at or after its time
    assert engine.schedules() == []
    assert engine.cancel_schedule(sid) is False  # fired: nothing to cancel
    txn = engine.consumer("s", "reader", partitions=[1]).get_transaction()
    assert txn is not None and txn.items == [b"a", b"b"]  # an ordinary checkpointed transaction


def test_at_takes_a_datetime_naive_meaning_utc(engine: ts.Engine) -> None:
    engine.create_stream("s")
    at = dt.datetime.now(UTC) + dt.timedelta(milliseconds=150)
    at = at.replace(microsecond=at.microsecond // 1000 * 1000)  # whole milliseconds
    aware = engine.schedule("s", [b"aware"], at=at)
    naive = engine.schedule("s", [b"naive"], at=at.replace(tzinfo=None))
    assert {i.id: i.due_ms for i in engine.schedules()} == {aware: int(at.timestamp() * 1000),
                                                            naive: int(at.timestamp() * 1000)}
    eventually(lambda: len(delivered(engine, "s")) == 2, timeout=10)


def test_cancelled_schedules_never_fire_and_pending_ones_block_no_reader(engine: ts.Engine) -> None:
    engine.create_stream("s")
    later = engine.schedule("s", [b"later"], delay=3600)
    gone = engine.schedule("s", [b"gone"], delay=0.1)
    assert engine.cancel_schedule(gone) is True
    assert engine.cancel_schedule(gone) is False
    engine.producer("s").instant([b"now"])
    txn = engine.consumer("s", "reader").get_transaction()  # not held back by the pending schedule
    assert txn is not None and txn.items == [b"now"]
    engine.schedule("s", [b"marker"], delay=0.3)  # due after the cancelled one: fired after it would have
    eventually(lambda: [i for _, _, i in delivered(engine, "s")] == [[b"now"], [b"marker"]], timeout=10)
    assert [i.id for i in engine.schedules()] == [later]
    assert engine.schedules(stream="other") == []


BAD_SCHEDULES: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"items": [b"x"]}, errors.InvalidArgument, "exactly one of at= .* and delay="),
    ({"items": [b"x"], "delay": 1, "at": dt.datetime(2030, 1, 1)}, errors.InvalidArgument, "exactly one"),
    ({"items": [b"x"], "delay": -1}, errors.InvalidArgument, "delay must be a non-negative"),
    ({"items": [b"x"], "delay": float("nan")}, errors.InvalidArgument, "delay must be"),
    ({"items": [b"x"], "delay": True}, errors.InvalidArgument, "delay must be"),
    ({"items": [b"x"], "at": "tomorrow"}, errors.InvalidArgument, "at must be a datetime"),
    ({"items": [b"x"], "at": dt.datetime(1960, 1, 1)}, errors.InvalidArgument, "at must be between"),
    ({"items": [], "delay": 1}, errors.InvalidArgument, "at least one item"),
    ({"items": b"x", "delay": 1}, errors.InvalidArgument, "iterable of bytes"),
    ({"items": ["text"], "delay": 1}, errors.InvalidArgument, "must be bytes"),
    ({"items": [b"x"], "delay": 1, "partition": 2}, errors.PartitionOutOfRange, "out of range"),
    ({"items": [b"x"], "delay": 1, "stream": "nope"}, errors.StreamNotFound, "nope"),
]


def test_bad_schedules_are_refused_and_write_nothing(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    for kwargs, error, match in BAD_SCHEDULES:
        args = {"stream": "s", **kwargs}
        with pytest.raises(error, match=match):
            engine.schedule(args.pop("stream"), args.pop("items"), **args)
    assert engine.schedules() == []


def test_due_times_are_exact_milliseconds_rounded_up(tmp_path: Path) -> None:
    clock = FakeClock()
    with ts.open(tmp_path / "db", compaction_interval=None, clock=clock, fire_schedules=False) as engine:
        engine.create_stream("s")
        now = clock()
        base = dt.datetime.fromtimestamp(now / 1000, UTC)
        cases = [(dict(delay=4.041), now + 4041), (dict(delay=0.0001), now + 1), (dict(delay=0), now),
                 (dict(at=base + dt.timedelta(microseconds=1)), now + 1), (dict(at=base), now),
                 (dict(at=(base + dt.timedelta(milliseconds=7)).replace(tzinfo=None)), now + 7)]
        for kwargs, due in cases:
            sid = engine.schedule("s", [b"x"], **kwargs)  # type: ignore[arg-type]
            assert {i.id: i.due_ms for i in engine.schedules()}[sid] == due, kwargs


def test_schedule_records_are_guarded(engine: ts.Engine) -> None:
    engine.create_stream("s")
    for bad in (0, -1, "1", True, 2**63):
        with pytest.raises(errors.InvalidArgument, match="schedule ID"):
            engine.cancel_schedule(bad)
    with pytest.raises(errors.InvalidArgument, match="engine only"):
        engine.backend.submit([O.FireSchedule(1)])
    with pytest.raises(errors.InvalidArgument, match="set by the engine"):
        engine.backend.submit([O.Schedule("s", 0, O.pack_items([b"x"]), delay_ms=1, schedule_id=7)])
    with pytest.raises(errors.InvalidArgument, match="reserved for scheduled delivery"):
        engine.backend.submit([O.StoreWrite(NAMESPACE, [[b"d", b"x"]])])
    with pytest.raises(errors.InvalidArgument, match="exactly one of at_ms and delay_ms"):
        engine.backend.submit([O.Schedule("s", 0, O.pack_items([b"x"]))])


def test_a_schedule_of_a_deleted_stream_is_dropped(engine: ts.Engine) -> None:
    engine.create_stream("s")
    engine.schedule("s", [b"x"], delay=0.2)
    engine.delete_stream("s")
    engine.create_stream("s")  # a new incarnation: not the schedule's target
    eventually(lambda: engine.schedules() == [], timeout=10)
    assert delivered(engine, "s") == []


# --------------------------------------------------------------------------- the model
OPS = st.lists(st.one_of(
    st.tuples(st.just("schedule"), st.integers(0, 5_000), st.booleans(), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("cancel"), st.integers(0, 10_000)),
    st.tuples(st.just("advance"), st.integers(0, 2_000)),
    st.tuples(st.just("fire")),
    st.tuples(st.just("restart")),
), min_size=1, max_size=200)


@settings(max_examples=30, deadline=None)
@given(OPS)
def test_thousands_of_schedules_against_a_model(ops: list[tuple[Any, ...]]) -> None:
    """Random schedules (relative and absolute, three partitions), cancels, clock moves,
    firing passes and restarts, on the engine's fake clock; after each firing pass the stream
    holds exactly the model's fired schedules, each once, each at or after its time, and
    ``schedules()`` lists exactly the pending ones in due order."""
    clock = FakeClock()
    with tempfile.TemporaryDirectory(prefix="schedules-") as root:
        def open_engine() -> ts.Engine:
            return ts.open(root, durability="async", compaction_interval=None, clock=clock, fire_schedules=False)

        engine = open_engine()
        try:
            engine.create_stream("s", partitions=3)
            pending: dict[int, tuple[int, int, list[bytes]]] = {}  # id -> (due, partition, items)
            fired: dict[int, tuple[int, int, list[bytes]]] = {}
            made: list[int] = []
            for op in ops:
                if op[0] == "schedule":
                    _, ms, absolute, partition, n = op
                    items = [b"%d.%d" % (len(made), j) for j in range(n)]
                    if absolute:
                        due = clock() + ms - 1_000
                        sid = engine.schedule("s", items, at=dt.datetime.fromtimestamp(due / 1000, UTC),
                                              partition=partition)
                    else:
                        due = clock() + ms
                        sid = engine.schedule("s", items, delay=ms / 1000, partition=partition)
                    assert sid not in pending and sid not in fired and sid not in made
                    made.append(sid)
                    pending[sid] = (due, partition, items)
                elif op[0] == "cancel" and made:
                    sid = made[op[1] % len(made)]
                    assert engine.cancel_schedule(sid) is (sid in pending)
                    pending.pop(sid, None)
                elif op[0] == "advance":
                    clock.advance(op[1])
                elif op[0] == "restart":
                    engine.close()
                    engine = open_engine()
                elif op[0] == "fire":
                    now = clock()
                    due_now = {sid for sid, (due, _, _) in pending.items() if due <= now}
                    assert engine.backend.fire_due_schedules() == len(due_now)  # type: ignore[attr-defined]
                    fired.update((sid, pending.pop(sid)) for sid in due_now)
                    got = delivered(engine, "s")
                    assert sorted((p, items) for p, _, items in got) == sorted((p, i) for _, p, i in fired.values())
                    due_of = {tuple(items): due for due, _, items in fired.values()}
                    assert all(txn_id // ID_MULTIPLIER >= due_of[tuple(items)] for _, txn_id, items in got)
                assert [(i.id, i.due_ms, i.partition) for i in engine.schedules()] == sorted(
                    ((sid, due, p) for sid, (due, p, _) in pending.items()), key=lambda e: (e[1], e[0]))
        finally:
            engine.close()


def test_three_thousand_schedules_at_random_times_fire_once_each_in_due_order(tmp_path: Path) -> None:
    """3,000 schedules due at random times within a minute of the fake clock, some cancelled;
    the clock moves in random steps with a firing pass after each: after every pass the
    stream holds exactly those due by then, each once, and the firing order follows the due
    times (a transaction fired in a later pass has a later ID)."""
    rng = random.Random(3000)
    clock = FakeClock()
    with ts.open(tmp_path / "db", durability="async", compaction_interval=None, clock=clock,
                 fire_schedules=False) as engine:
        engine.create_stream("s", partitions=4)
        start = clock()
        due: dict[bytes, int] = {}
        ids: dict[bytes, int] = {}
        for k in range(3_000):
            item = b"%d" % k
            ms = rng.randint(0, 60_000)
            ids[item] = engine.schedule("s", [item], delay=ms / 1000)
            due[item] = start + ms
        cancelled = set(rng.sample(sorted(due), 300))
        for item in cancelled:
            assert engine.cancel_schedule(ids[item])
        passes: list[set[bytes]] = []
        while clock() < start + 61_000:
            clock.advance(rng.randint(1, 5_000))
            engine.backend.fire_due_schedules()  # type: ignore[attr-defined]
            got = delivered(engine, "s")
            items = [t[2][0] for t in got]
            assert len(items) == len(set(items))  # each once
            assert set(items) == {i for i, d in due.items() if d <= clock() and i not in cancelled}
            assert all(txn_id // ID_MULTIPLIER >= due[txn[0]] for _, txn_id, txn in got)
            passes.append(set(items) - set().union(*passes) if passes else set(items))
        first_id = {t[2][0]: t[1] for t in delivered(engine, "s")}
        for earlier, later in zip(passes, passes[1:], strict=False):
            if earlier and later:
                assert max(first_id[i] for i in earlier) < min(first_id[i] for i in later)
        assert engine.schedules() == []


# --------------------------------------------------------------------------- SIGKILL
@pytest.mark.timeout(240)
def test_each_schedule_fires_exactly_once_across_sigkills_of_the_firing_process(tmp_path: Path) -> None:
    """300 schedules due over five seconds, written in one write once a worker process
    (``workers.py fire``: its engine's firer) runs; the worker is SIGKILLed again and again
    while it fires them, each time after it made progress (and half of the time a little
    more), and restarted; a last one fires the rest. Every schedule is delivered exactly
    once, at or after its time."""
    rng = random.Random(22)
    data = str(tmp_path / "data")
    with ts.open(data, compaction_interval=None, fire_schedules=False) as engine:
        engine.create_stream("s", partitions=2)
        first = start_worker("fire", data, stdin=subprocess.PIPE)
        assert first.stdout is not None and first.stdout.readline().strip() == "ready"
        now = int(dt.datetime.now(UTC).timestamp() * 1000)
        due = {b"%d" % k: now + rng.randint(200, 5_000) for k in range(300)}
        engine.backend.submit([O.Schedule("s", k % 2, O.pack_items([item]), at_ms=at)
                               for k, (item, at) in enumerate(due.items())])

        def count() -> int:
            return len(delivered(engine, "s"))

        kills = 0
        worker: subprocess.Popen[str] | None = first
        while engine.schedules(limit=1) and kills < 8:
            if worker is None:
                worker = start_worker("fire", data, stdin=subprocess.PIPE)
                assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
            try:
                before = count()
                eventually(lambda b=before: count() > b or not engine.schedules(limit=1), timeout=60, interval=0.001)
                if rng.random() < 0.5:
                    target = count() + rng.randint(1, 30)
                    eventually(lambda t=target: count() >= t or not engine.schedules(limit=1), timeout=60,
                               interval=0.001)
                os.kill(worker.pid, signal.SIGKILL)
                kills += 1
            finally:
                kill_process(worker)
                for f in (worker.stdin, worker.stdout, worker.stderr):
                    if f is not None:
                        f.close()
                worker = None
        worker = start_worker("fire", data, stdin=subprocess.PIPE)
        try:
            eventually(lambda: not engine.schedules(limit=1), timeout=60)
        finally:
            kill_process(worker)
            for f in (worker.stdin, worker.stdout, worker.stderr):
                if f is not None:
                    f.close()
        got = delivered(engine, "s")
        items = [i for _, _, txn_items in got for i in txn_items]
        assert sorted(items) == sorted(due)  # each exactly once
        assert all(txn_id // ID_MULTIPLIER >= due[txn_items[0]] for _, txn_id, txn_items in got)
        assert kills >= 2


def test_replaying_the_log_reproduces_the_schedules_and_their_firings(tmp_path: Path) -> None:
    """A replica applying the commit log (as a cluster follower does) ends with the same
    pending schedules and the same fired transactions, with the same IDs."""
    clock = FakeClock()
    a = ts.open(tmp_path / "a", compaction_interval=None, clock=clock, fire_schedules=False)
    b_core = Core(tmp_path / "b", "async", compaction_interval=None, clock=clock, fire_schedules=False)
    try:
        a.create_stream("s", partitions=2)
        fired = a.schedule("s", [b"fired", b"too"], delay=1, partition=1)
        cancelled = a.schedule("s", [b"cancelled"], delay=1)
        pending = a.schedule("s", [b"pending"], delay=60)
        assert a.cancel_schedule(cancelled)
        clock.advance(1_000)
        assert a.backend.fire_due_schedules() == 1  # type: ignore[attr-defined]
        core_a: Core = a.backend  # type: ignore[assignment]
        assert b_core.apply_log(core_a.read_log(0, 1000)) == core_a.log_seq()
        b = ts.Engine(b_core, keepalive_interval=None)
        assert [i.id for i in b.schedules()] == [pending] and b.schedules() == a.schedules()
        assert delivered(b, "s") == delivered(a, "s") != []
        assert fired not in {i.id for i in b.schedules()}
    finally:
        a.close()
        b_core.close()


@pytest.mark.timeout(240)
def test_a_server_fires_each_schedule_once_across_sigkills_of_the_server(tmp_path: Path) -> None:
    """Over the network: 150 schedules written through ``ts.connect`` to a ``tstreams serve``
    whose engine fires them; the server is SIGKILLed three times while it fires (each time
    after progress) and restarted on the same data; the client reconnects by itself. Every
    schedule is delivered exactly once."""
    rng = random.Random(7)
    with ServeProcess(tmp_path / "data", tmp_path / "serve") as server:
        engine = server.connect(timeout=30)
        try:
            engine.create_stream("s", partitions=2)
            now = int(dt.datetime.now(UTC).timestamp() * 1000)
            due = {b"%d" % k: now + 500 + rng.randint(0, 8_000) for k in range(150)}
            engine.backend.submit([O.Schedule("s", k % 2, O.pack_items([item]), at_ms=at)
                                   for k, (item, at) in enumerate(due.items())])

            def count() -> int:
                return len(delivered(engine, "s"))

            def pending() -> bool:
                return bool(engine.schedules(limit=1))

            mid_firing = 0
            for _ in range(3):
                before = count()
                eventually(lambda b=before: count() > b or not pending(), timeout=60, interval=0.005,
                           ignore=(errors.TStreamsError,))
                mid_firing += pending()
                server.kill()
                server.start()
            assert mid_firing >= 1  # at least one kill with schedules left to fire
            eventually(lambda: not pending(), timeout=60, ignore=(errors.TStreamsError,))
            items = [i for _, _, txn_items in delivered(engine, "s") for i in txn_items]
            assert sorted(items) == sorted(due)  # each exactly once
        finally:
            engine.close()


def test_a_due_schedule_is_delivered_while_another_writers_fsync_is_stuck(tmp_path: Path) -> None:
    """The firer's write does not queue behind an fsync (a durable write arriving during
    one waits for it before it commits): on a slow disk under a durable write load, that
    made deliveries late by one or two fsyncs. Here one fsync hangs until the schedule has
    been read; the firing still commits, and is synced once the disk answers."""
    import threading

    with ts.open(tmp_path / "data", durability="sync", compaction_interval=None) as engine:
        engine.create_stream("s")
        engine.create_stream("other")
        engine.schedule("s", [b"due"], delay=0.3)
        store = engine.backend.store  # type: ignore[attr-defined]
        real_sync, stuck, release = store.sync, threading.Event(), threading.Event()

        def slow_disk_sync() -> None:
            stuck.set()
            release.wait(30)
            real_sync()

        store.sync = slow_disk_sync
        writer = threading.Thread(target=lambda: engine.producer("other").instant([b"w"]))  # durable: fsyncs
        writer.start()
        try:
            assert stuck.wait(10)
            reader = engine.consumer("s", "r")
            txn = eventually(reader.get_transaction, timeout=5, message="the schedule fired behind the fsync")
            assert txn.items == [b"due"]
        finally:
            release.set()
            writer.join(30)
            store.sync = real_sync
        assert engine.schedules() == []
