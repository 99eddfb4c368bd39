"""The console's costs are bounded: the lag sampler's ring holds a bounded memory whatever
the engine holds, a consumer page counts its lag up to a cap (reported as "at least"), and
the read budget answers repeated questions from what it read while its time share is
spent, within its bytes."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.console import views
from tstreams_embedded.console.budget import ReadBudget
from tstreams_embedded.console.sampler import SAMPLE_LIMITS, LagSampler

from .conftest import Console

pytestmark = pytest.mark.timeout(120)


def test_sampler_memory_is_bounded(tmp_path: Path) -> None:
    partitions, consumers, keep = 64, 12, 20
    assert partitions * consumers > SAMPLE_LIMITS.rows  # more lag rows than a sample keeps
    with ts.open(tmp_path, compaction_interval=None) as engine:
        engine.create_stream("s", partitions=partitions)
        producers = [engine.producer("s", partition=p) for p in range(partitions)]
        for producer in producers:
            producer.instant([b"x"])
        for c in range(consumers):
            consumer = engine.consumer("s", name=f"consumer-{c:02d}-" + "n" * 200)
            for p in range(partitions):
                consumer.get_transaction(p)
            consumer.checkpoint()
        sampler = LagSampler(engine.backend, interval=60, keep=keep)  # type: ignore[arg-type]
        for _ in range(keep):
            sampler.sample()
        full = sampler.ring_bytes()
        tracemalloc.start()
        try:
            traced = []
            for turn in range(3):  # the ring turns over three times, with traffic in between
                for i in range(keep):
                    producers[(turn * keep + i) % partitions].instant([b"y"])
                    sampler.sample()
                traced.append(tracemalloc.get_traced_memory()[0])
        finally:
            tracemalloc.stop()
        # (the first turn replaces samples allocated before tracing: the ring's own size)
        assert traced[0] < keep * (SAMPLE_LIMITS.rows * 16 + 1024) + 64 * 1024, traced
        grown = traced[2] - traced[1]
        assert len(sampler.ring) == keep
        assert all(len(s.rows) == len(s.txns) == SAMPLE_LIMITS.rows for s in sampler.ring)
        # the rows (and their long names) are kept once, the figures at 16 bytes a row per sample
        assert len({id(s.rows) for s in sampler.ring}) == 1
        assert sampler.ring_bytes() <= full + 1024
        assert full < keep * (SAMPLE_LIMITS.rows * 16 + 1024) + SAMPLE_LIMITS.rows * 1024
        assert grown < 16 * 1024, traced
        series = sampler.history("s", "consumer-00-" + "n" * 200)["partitions"]
        assert all(len(v) == keep for v in series.values()) and series


@pytest.mark.parametrize("console", ["embedded"], indirect=True)  # the views read a Core
def test_consumer_lag_is_counted_up_to_a_cap(console: Console) -> None:
    engine = console.engine
    engine.create_stream("s", partitions=2)
    consumer = engine.consumer("s", name="c")
    engine.producer("s", partition=0).instant([b"first"])
    consumer.get_transaction(0)
    consumer.checkpoint()
    producer = engine.producer("s", partition=0)
    for _ in range(7):
        producer.instant([b"a", b"b"])
    exact = views.consumer(engine.backend, "s", "c", lag_cap=100)
    capped = views.consumer(engine.backend, "s", "c", lag_cap=5)
    assert [(r["lag_transactions"], r["lag_items"], r["lag_capped"]) for r in exact["rows"]] == \
        [(7, 14, False), (0, 0, False)]
    assert [(r["lag_transactions"], r["lag_items"], r["lag_capped"]) for r in capped["rows"]] == \
        [(5, 10, True), (0, 0, False)]
    assert capped["lag_capped"] and capped["lag_cap"] == 5 and not exact["lag_capped"]
    # the time lag is exact either way: it is read from the first unread transaction's ID
    assert capped["rows"][0]["lag_ms"] >= exact["rows"][0]["lag_ms"]
    assert console.api("streams/s/consumers/c")["rows"][0]["lag_capped"] is False  # 7 < the console's cap


def test_read_budget_reuses_answers_within_its_share() -> None:
    now = [100.0]
    reads = []

    def read(value: int, seconds: float) -> dict[str, int]:
        now[0] += seconds  # the read takes that long
        reads.append(value)
        return {"v": value}

    budget = ReadBudget(share=0.1, max_bytes=1000, clock=lambda: now[0])
    assert json.loads(budget.answer("a", lambda: read(1, 0.2)))["v"] == 1
    now[0] += 1.0  # 0.2 s read at 10 %: the next fresh read 1.8 s after it
    assert json.loads(budget.answer("a", lambda: read(2, 0.2)))["v"] == 1
    assert json.loads(budget.answer("b", lambda: read(3, 0.2)))["v"] == 3  # first asked: read
    now[0] += 1.9  # past the 1.8 s after the read of "b"
    assert json.loads(budget.answer("a", lambda: read(4, 0.5)))["v"] == 4
    now[0] += 4.4  # within the 4.5 s after that read, however old "b" is
    assert json.loads(budget.answer("b", lambda: read(5, 0.0)))["v"] == 3
    now[0] += 0.2
    assert json.loads(budget.answer("b", lambda: read(5, 0.0)))["v"] == 5
    assert reads == [1, 3, 4, 5] and (budget.fresh_reads, budget.kept_answers) == (4, 2)
    assert budget.read_seconds == pytest.approx(0.2 + 0.2 + 0.5)
    # paid before too: "a" took 0.5 s, so it is read again only 4.5 s after the last fresh read
    now[0] += 4.4
    assert json.loads(budget.answer("a", lambda: read(8, 0.0)))["v"] == 4
    now[0] += 0.2
    assert json.loads(budget.answer("a", lambda: read(8, 0.0)))["v"] == 8
    assert "as_of_ms" in json.loads(budget.answer("b", lambda: read(6, 0.0)))
    assert reads == [1, 3, 4, 5, 8, 6]
    # bounded by bytes: the least recently used answers go first, a too large one is not kept
    budget.answer("a", lambda: read(7, 0.0))  # (kept: "a" now used after "b")
    big = budget.answer("big", lambda: {"x": "y" * 900})
    assert list(budget.kept) == ["a", "big"] and budget.kept_bytes <= 1000
    budget.answer("huge", lambda: {"x": "y" * 2000})
    assert list(budget.kept) == ["a", "big"] and len(big) > 900
    with pytest.raises(errors.InvalidArgument, match="share"):
        ReadBudget(share=0)


def test_partition_figures_are_read_up_to_a_cap(tmp_path: Path) -> None:
    """The stream page reads a partition from its newest end, at most ``cap`` records: under
    the cap its figures equal ``describe_partitions`` (``tstreams streams describe``);
    over it, the head, the last ID and the newest open transactions are still exact and the
    counts read "at least" (hypothesis picks the partition's history and the cap)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tstreams_embedded.console.partitions import describe_bounded

    with ts.open(tmp_path, compaction_interval=None) as engine:
        core = engine.backend
        made = [0]

        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.lists(st.sampled_from(["checkpoint", "checkpoint2", "open", "cancel"]), max_size=12),
               st.integers(1, 14))
        def check(history: list[str], cap: int) -> None:
            made[0] += 1
            name = f"s{made[0]}"
            engine.create_stream(name, partitions=1)
            producer = engine.producer(name, partition=0)
            held = []
            for step in history:
                if step.startswith("checkpoint"):
                    producer.instant([b"x"] * (2 if step == "checkpoint2" else 1))
                else:
                    txn = producer.new_transaction(0)
                    txn.send(b"o")
                    if step == "cancel":
                        txn.cancel()
                    else:
                        txn.flush()
                        held.append(txn)
            info = core.get_stream(name)
            now = core.now_ms()
            (exact,) = core.describe_partitions(name, 0, 1)
            (whole,) = describe_bounded(core.store, info, [0], now, cap=100)
            assert (whole.info, whole.counts_capped, whole.bytes_capped) == (exact, False, False)
            (part,) = describe_bounded(core.store, info, [0], now, cap=cap)
            b = part.info
            assert b.last_id == exact.last_id
            # head and first: exact, or 0 when not within their steps (open records before them)
            assert b.head == exact.head or (part.counts_capped and b.head == 0)
            assert b.first == exact.first or (part.counts_capped and b.first == 0)
            if history.count("open") < cap:
                assert (b.head, b.first) == (exact.head, exact.first)
            assert part.counts_capped == (len([s for s in history if s != "cancel"]) > cap)
            figures = ("checkpointed", "items", "expired", "open_count", "bytes")
            if part.counts_capped or part.bytes_capped:
                assert all(getattr(b, f) <= getattr(exact, f) for f in figures)
                assert [t.id for t in b.open] == [t.id for t in exact.open][len(exact.open) - len(b.open):]
            else:
                assert b == exact
            for txn in held:
                txn.cancel()

        check()


def test_stream_page_counts_read_at_least_past_the_cap(tmp_path: Path) -> None:
    with ts.open(tmp_path, compaction_interval=None) as engine:
        engine.create_stream("s", partitions=2)
        producer = engine.producer("s", partition=0)
        for _ in range(5):
            producer.instant([b"a", b"b"])
        engine.producer("s", partition=1).instant([b"c"])
        page = views.stream(engine.backend, "s", read_cap=3)  # type: ignore[arg-type]
        p0, p1 = page["rows"]
        assert (p0["transactions"], p0["items"], p0["counts_capped"], p0["bytes_capped"]) == (3, 6, True, True)
        assert p0["head"] == engine.backend.describe_partitions("s", 0, 1)[0].head
        assert (p1["transactions"], p1["counts_capped"], p1["bytes_capped"]) == (1, False, False)
        assert page["read_cap"] == 3


def test_work_queue_groups_are_listed_up_to_a_limit(tmp_path: Path) -> None:
    from tstreams_embedded.console.groups import queue_groups

    with ts.open(tmp_path, compaction_interval=None) as engine:
        engine.create_stream("a")
        engine.create_stream("b")
        for group in ("w3", "w1", "w2"):
            engine.work_queue("a", group)
        engine.work_queue("b", "other")
        core = engine.backend
        assert queue_groups(core, "a") == (["w1", "w2", "w3"], False)  # type: ignore[arg-type]
        assert queue_groups(core, "a", limit=2) == (["w1", "w2"], True)  # type: ignore[arg-type]
        assert queue_groups(core, "b") == (["other"], False)  # type: ignore[arg-type]
        with pytest.raises(errors.StreamNotFound):
            queue_groups(core, "nope")  # type: ignore[arg-type]
        listed = views.queues(core, None)  # type: ignore[arg-type]
        assert [(g["stream"], g["group"]) for g in listed["groups"]] == [("a", "w1"), ("a", "w2"), ("a", "w3"),
                                                                         ("b", "other")]
