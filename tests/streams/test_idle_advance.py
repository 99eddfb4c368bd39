"""``App(idle_advance_ms=…)``: once no source of a task has had input for that long, its
stream time moves on by the wall clock, so the last window of a quiet input is emitted
(issue 21 §4, "Idle inputs"): through TestDriver's wall clock, through Apps with an
injected clock across restarts, and in a real app process SIGKILLed at random points."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.streams import App, Processor, Record, StreamsBuilder, TestDriver, TimeWindows
from tstreams_embedded.streams.records import partition_of
from tstreams_embedded.streams.serdes import serde
from tstreams_embedded.streams.topology import Topology
from tstreams_embedded.testing import eventually

from .harness import WorkerProcess, committed_transactions, envelope_transactions, read_envelopes

WORKER = Path(__file__).resolve().parent / "idle_advance_worker.py"
STR = serde("str")
KILLS = 4


def final_counts(size_ms: int = 1_000, grace_ms: int = 0, by_user: bool = False) -> Topology:
    """``in`` -> (re-keyed by ``value["user"]`` with ``by_user``) -> tumbling windows -> count
    -> suppressed -> ``out`` as ``"key@start"`` -> count."""
    b = StreamsBuilder()
    s = b.stream("in", key_serde="str", value_serde="json")
    grouped = s.group_by(lambda k, v: v["user"], key_serde="str") if by_user else s.group_by_key(key_serde="str")
    (grouped.windowed_by(TimeWindows(size_ms=size_ms, grace_ms=grace_ms)).count(store="n")
     .suppress_until_window_closes().to_stream()
     .map(lambda w, n: (f"{w.key}@{w.start}", n)).to("out", key_serde="str", value_serde="json"))
    return b.build()


def outputs(engine: ts.Engine) -> list[tuple[str, int]]:
    return [(STR.deserialize(kb), json.loads(vb)) for kb, vb, _, _ in read_envelopes(engine, "out")
            if kb is not None and vb is not None]


def emitted(driver: TestDriver) -> list[tuple[Any, Any]]:
    return [(r.key, r.value) for r in driver.read_output("out")]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_idle_advance_ms_must_be_none_or_a_positive_integer(bad: object, tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidArgument, match="idle_advance_ms"):
        TestDriver(final_counts(), idle_advance_ms=bad)  # type: ignore[arg-type]
    with ts.open(str(tmp_path / "db")) as engine, pytest.raises(errors.InvalidArgument, match="idle_advance_ms"):
        App(engine, application_id="a", topology=final_counts(), idle_advance_ms=bad)  # type: ignore[arg-type]


def test_without_the_option_the_last_window_of_a_quiet_input_never_closes() -> None:
    """The surprise the option is for."""
    with TestDriver(final_counts()) as driver:
        driver.pipe("in", "ann", {}, 100)
        driver.advance_wall_clock(86_400_000)
        assert emitted(driver) == []


def test_stream_time_moves_by_the_wall_clock_elapsed_since_the_input_stopped() -> None:
    with TestDriver(final_counts(size_ms=1_000, grace_ms=100), idle_advance_ms=500) as driver:
        driver.pipe("in", "ann", {}, 100)
        driver.pipe("in", "ann", {}, 300)
        driver.advance_wall_clock(499)
        assert emitted(driver) == []           # not idle for 500 ms yet
        driver.advance_wall_clock(1)
        assert emitted(driver) == []           # idle: stream time 300 + 500, [0, 1000) closes at 1100
        driver.advance_wall_clock(299)
        assert emitted(driver) == []           # 300 + 799
        driver.advance_wall_clock(1)
        assert emitted(driver) == [("ann@0", 2)]
        driver.advance_wall_clock(60_000)
        assert emitted(driver) == []           # once
        driver.pipe("in", "ann", {}, 61_000)   # a new record: the window of its own time, counted
        driver.pipe("in", "ann", {}, 1_500)    # before the advanced time minus the grace: late
        assert driver.metrics["late_dropped"] == 1
        driver.advance_wall_clock(1_000)
        assert emitted(driver) == [("ann@61000", 1)]


def test_input_restarts_the_idle_wait() -> None:
    with TestDriver(final_counts(), idle_advance_ms=500) as driver:
        driver.pipe("in", "ann", {}, 100)
        driver.advance_wall_clock(400)
        driver.pipe("in", "bob", {}, 200)       # the same task (one partition): input again
        driver.advance_wall_clock(400)
        assert emitted(driver) == []            # idle for 400 ms only
        driver.advance_wall_clock(900)          # idle 1300 ms: stream time 200 + 1300
        assert sorted(emitted(driver)) == [("ann@0", 1), ("bob@0", 1)]


def test_a_quiet_partition_of_a_repartitioned_stream_closes_while_another_keeps_getting_records() -> None:
    users = ("ann", "gus")
    assert [partition_of(STR.serialize(u), 2) for u in users] == [0, 1]
    with TestDriver(final_counts(size_ms=100, by_user=True), partitions=2, idle_advance_ms=1_000) as driver:
        driver.pipe("in", "ann", {"user": "ann"}, 10)
        for t in range(200, 2_000, 200):        # gus keeps task 1 busy (both its sources); ann's stays quiet
            driver.advance_wall_clock(200)
            driver.pipe("in", "gus", {"user": "gus"}, t)
        got = emitted(driver)
        assert ("ann@0", 1) in got                      # closed by the idle advance
        assert [k for k, _ in got].count("ann@0") == 1  # once


def test_filtered_records_do_not_move_the_aggregation_s_stream_time_but_idle_advance_does() -> None:
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json").filter(lambda k, v: v["ok"]).group_by_key(key_serde="str")
     .windowed_by(TimeWindows(size_ms=100)).count(store="n").suppress_until_window_closes().to_stream()
     .map(lambda w, n: (f"{w.key}@{w.start}", n)).to("out", key_serde="str", value_serde="json"))
    with TestDriver(b.build(), idle_advance_ms=1_000) as driver:
        driver.pipe("in", "ann", {"ok": True}, 10)
        for t in range(200, 1_000, 200):         # input, all filtered: the task is not idle
            driver.advance_wall_clock(200)
            driver.pipe("in", "ann", {"ok": False}, t)
        assert emitted(driver) == []
        driver.advance_wall_clock(1_000)
        assert emitted(driver) == [("ann@0", 1)]


class StreamTicker(Processor):
    def init(self, context: Any) -> None:
        super().init(context)
        context.schedule(1_000, "stream_time", lambda now: context.forward(Record("tick", now, now)))

    def process(self, record: Record) -> None:
        pass


def test_stream_time_punctuators_run_on_an_idle_advance() -> None:
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").process(StreamTicker).to(
        "out", key_serde="str", value_serde="json")
    with TestDriver(b.build(), idle_advance_ms=500) as driver:
        driver.pipe("in", "k", {}, 0)               # due at stream time 1000
        driver.advance_wall_clock(999)
        assert driver.read_output("out") == []
        driver.advance_wall_clock(1)
        assert [r.value for r in driver.read_output("out")] == [1_000]


def write(engine: ts.Engine, records: list[tuple[str, dict[str, Any], int]], partitions: int = 1,
          per_transaction: int = 1) -> None:
    engine.backend.submit(envelope_transactions(
        "in", [(STR.serialize(k), json.dumps(v).encode(), t) for k, v, t in records], partitions, per_transaction))


class Clock:
    def __init__(self, now: int, step: int = 0) -> None:
        self.now = now
        self.step = step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


def test_after_a_restart_the_advance_goes_on_from_the_committed_stream_time_and_emits_once(tmp_path: Path) -> None:
    clock = Clock(1_000)
    with ts.open(str(tmp_path / "db")) as engine:
        engine.create_stream("in")
        write(engine, [("ann", {}, 100), ("ann", {}, 300)])

        def app() -> App:
            return App(engine, application_id="a", topology=final_counts(grace_ms=100), clock=clock,
                       idle_advance_ms=500)

        with app() as first:
            first.run()                  # processed, idle since 1000 on its clock
            clock.now += 600             # idle 600 ms: stream time 900, nothing closes
            first.run()
        assert outputs(engine) == []
        with app() as second:            # a restart: idle from its start, from stream time 300
            second.run()
            clock.now += 499
            second.run()
            assert outputs(engine) == []
            clock.now += 301             # idle 800 ms: stream time 1100
            second.run()
        assert outputs(engine) == [("ann@0", 2)]
        with app() as third:             # the closed window is not emitted again
            third.run()
            clock.now += 10_000
            third.run()
        assert outputs(engine) == [("ann@0", 2)]


def test_the_advance_stays_within_max_future_ms_of_the_clock(tmp_path: Path) -> None:
    """A restart on a clock that went back: the committed stream time plus the idle time
    would pass the clock by more than ``max_future_ms``; the advance stops there."""
    with ts.open(str(tmp_path / "db")) as engine:
        engine.create_stream("in")
        write(engine, [("ann", {}, 1_000_500)])
        clock = Clock(1_000_000)
        with App(engine, application_id="a", topology=final_counts(), clock=clock, max_future_ms=1_000) as first:
            first.run()
        clock.now = 900_000              # 100 s back
        with App(engine, application_id="a", topology=final_counts(), clock=clock, max_future_ms=1_000,
                 idle_advance_ms=500) as second:
            second.run()
            clock.now += 10_000          # 1_000_500 + 10_000 would close [1_000_000, 1_001_000)
            second.run()
            assert outputs(engine) == []
            clock.now += 100_000         # the clock is back past it: 1_010_000 + 1_000
            second.run()
        assert outputs(engine) == [("ann@1000000", 1)]


def test_a_backlog_in_the_same_thread_holds_idle_tasks_back(tmp_path: Path) -> None:
    """A clock that jumps 1 s at every reading makes every task without input idle at once.
    Partition 0 of the input holds a backlog of old records; task 1 gets its records only
    through the repartition stream, between task 0's turns. Its stream time must not run
    ahead of the backlog it has still to receive: no record is late, every window is emitted
    once with its full count."""
    rng = random.Random(7)
    users = ["ann", "gus", "bob", "eve"]
    records = [("page", {"user": rng.choice(users)}, 1_000 + 7 * i + rng.randint(0, 5)) for i in range(300)]
    expected = Counter(f"{v['user']}@{t - t % 100}" for _, v, t in records)
    with ts.open(str(tmp_path / "db")) as engine:
        engine.create_stream("in", partitions=2)
        write(engine, records, partitions=2, per_transaction=3)   # "page" is in partition 0
        with App(engine, application_id="a", topology=final_counts(size_ms=100, grace_ms=100, by_user=True),
                 clock=Clock(5_000_000, step=1_000), idle_advance_ms=1, turn_records=10) as app:
            metrics = app.run()
        assert "late_dropped" not in metrics
        got = outputs(engine)
        assert len(got) == len(set(k for k, _ in got)) and dict(got) == dict(expected)


@pytest.mark.timeout(240)
def test_idle_advance_emits_each_window_exactly_once_across_sigkills(tmp_path: Path) -> None:
    """A real app process (``idle_advance_worker.py``, the real clock): each round writes
    records stamped just before now, waits until they are processed and, at random, until
    the idle advance emitted the round's last windows too, then SIGKILLs the worker. At the
    end a worker with no new input emits the last windows by the idle advance alone; every
    window is in the output once, with its full count."""
    rng = random.Random(22)
    data = str(tmp_path / "data")
    expected: Counter[str] = Counter()
    with ts.open(data, compaction_interval=None) as engine:
        engine.create_stream("in")
        written = 0
        for _ in range(KILLS):
            now = time.time_ns() // 1_000_000
            records = [(rng.choice("abc"), {}, now - 40 + rng.randint(0, 30)) for _ in range(rng.randint(5, 20))]
            records.sort(key=lambda r: r[2])
            expected.update(f"{k}@{t - t % 50}" for k, _, t in records)
            write(engine, records, per_transaction=2)
            written += (len(records) + 1) // 2
            worker = WorkerProcess(WORKER, data, "run")
            try:
                eventually(lambda n=written: committed_transactions(engine, "in", "idle") >= n, timeout=60,
                           interval=0.001)
                if rng.random() < 0.5:  # sometimes after the advance emitted the round's last windows
                    windows = {f"{k}@{t - t % 50}" for k, _, t in records}
                    eventually(lambda w=windows: {k for k, _ in outputs(engine)} >= w, timeout=60, interval=0.001)
            finally:
                worker.kill()
        worker = WorkerProcess(WORKER, data, "run")
        try:
            eventually(lambda: len(outputs(engine)) >= len(expected), timeout=60,
                       message=lambda: f"{len(outputs(engine))} of {len(expected)} windows emitted")
            assert worker.proc.stdin is not None
            worker.proc.stdin.close()  # stop: commit, leave
            assert worker.proc.wait(timeout=60) == 0
        finally:
            worker.kill()
        got = outputs(engine)
        assert sorted(k for k, _ in got) == sorted(expected)  # each window once
        assert dict(got) == dict(expected)
