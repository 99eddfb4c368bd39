"""Schedules attacked as a hostile user would: many due at the same instant (more than one
firing write holds), cancels racing the firer thread, the clock jumping back and forth,
and a restart right after the firings returned. Each schedule fires exactly once or, if
its cancel said so, never."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.protocol import schedules as S
from tstreams_embedded.testing import FakeClock, eventually

from .test_schedules import delivered


def test_cancels_racing_the_firer_on_many_schedules_due_at_once(tmp_path: Path) -> None:
    rng = random.Random(7)
    clock = FakeClock()
    n = 3 * S.FIRE_BATCH + 17  # due at the same millisecond: several firing writes
    with ts.open(tmp_path / "db", clock=clock, compaction_interval=None, keepalive_interval=None) as engine:
        engine.create_stream("s", partitions=3)
        ids = {engine.schedule("s", [b"%d" % k], delay=1, partition=k % 3): b"%d" % k for k in range(n)}
        order = list(ids)
        rng.shuffle(order)
        said: dict[int, bool] = {}
        go = threading.Event()

        def cancel_all() -> None:
            go.wait()
            for sid in order[: n // 2]:
                said[sid] = engine.cancel_schedule(sid)

        canceller = threading.Thread(target=cancel_all)
        canceller.start()
        clock.advance(1_000)  # all due at once; the firer fires while the cancels come
        go.set()
        canceller.join()
        eventually(lambda: not engine.schedules(limit=1), timeout=30)
        items = [i for _, _, txn in delivered(engine, "s") for i in txn]
        assert len(items) == len(set(items)), "a schedule fired twice"
        cancelled = {ids[sid] for sid, ok in said.items() if ok}
        assert set(items) == set(ids.values()) - cancelled, "a cancelled schedule fired, or one was lost"
        assert all(not engine.cancel_schedule(sid) for sid in ids)


def test_a_clock_behind_after_a_restart_neither_fires_early_nor_twice(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "db"
    start = clock()
    with ts.open(path, clock=clock, compaction_interval=None, keepalive_interval=None) as engine:
        engine.create_stream("s")
        for k in range(50):
            engine.schedule("s", [b"%d" % k], delay=k / 10)
        clock.advance(2_450)
        eventually(lambda: len(delivered(engine, "s")) == 25, timeout=30)
    behind = FakeClock(start - 60_000)  # the host's clock went back a minute
    with ts.open(path, clock=behind, compaction_interval=None, keepalive_interval=None) as engine:
        engine.schedule("s", [b"late"], delay=0)  # due on this clock: fires at once
        eventually(lambda: len(delivered(engine, "s")) == 26, timeout=30)
        assert len(engine.schedules()) == 25  # nothing else is due on this clock
        behind.set(start + 10_000)
        eventually(lambda: not engine.schedules(limit=1), timeout=30)
        items = sorted(i for _, _, txn in delivered(engine, "s") for i in txn)
        assert items == sorted([b"%d" % k for k in range(50)] + [b"late"])


def test_firings_are_synced_even_when_schedules_keep_coming_due(tmp_path: Path) -> None:
    """Schedules due every 10 ms for three seconds of the engine's clock: something is
    always due within 50 ms, so the firer never synced its firings until the load ended (a
    power failure would lose them all, however long the load). It syncs at least every
    second of firing."""
    clock = FakeClock()
    with ts.open(tmp_path / "data", durability="sync", clock=clock, compaction_interval=None,
                 keepalive_interval=None) as engine:
        engine.create_stream("s")
        engine.backend.submit([O.Schedule("s", 0, O.pack_items([b"%d" % k]), delay_ms=10 * k)
                               for k in range(1, 301)])
        store = engine.backend.store  # type: ignore[attr-defined]
        real_sync, syncs = store.sync, []

        def counted_sync() -> None:
            syncs.append(clock())
            real_sync()

        store.sync = counted_sync
        reader = engine.consumer("s", "r")
        fired = 0
        try:
            for _ in range(300):  # the clock moves 10 ms once the schedule due then has fired
                clock.advance(10)
                eventually(reader.get_transaction, timeout=10)
                fired += 1
        finally:
            store.sync = real_sync
        assert fired == 300
        during = [at for at in syncs if at < clock()]
        assert len(during) >= 2, f"the firings of three seconds were synced {len(during)} times while they came"
