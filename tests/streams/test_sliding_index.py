"""Sliding windows read their records from per-key slices (streams/record_slices.py):
against a brute-force model with many keys, lateness, retention, an order-sensitive
aggregate and a store cache too small to hold them (reads from the committed store)."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded.streams import App, SlidingWindows, StreamsBuilder, TestDriver, Windowed
from tstreams_embedded.streams.records import pack_envelope

from .harness import (
    chunks,
    committed_transactions,
    envelope_transactions,
    kill_at_random_points,
    run_to_completion,
    worker_command,
)

WORKER = Path(__file__).resolve().parent / "sliding_kill_worker.py"


def collect(size: int, grace: int) -> StreamsBuilder:
    """Every value of a key's window, in the order it was aggregated."""
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
     .windowed_by(SlidingWindows(size_ms=size, grace_ms=grace))
     .aggregate(list, lambda k, v, agg: [*agg, v], store="seen")
     .to_stream().to("out", key_serde="str", value_serde="json"))
    return b


def model(events: list[tuple[str, int, int]], size: int, grace: int) -> tuple[list[tuple[Windowed, list[int]]], int]:
    """Kafka's sliding windows record by record: (every update in order, late records)."""
    windows: dict[str, dict[tuple[int, int], list[int]]] = {}
    kept: dict[str, list[tuple[int, int]]] = {}  # key -> accepted (t, value), in arrival order
    updates: list[tuple[Windowed, list[int]]] = []
    observed: int | None = None
    late = 0
    for key, t, value in events:
        observed = t if observed is None else max(observed, t)
        mine = windows.setdefault(key, {})
        accepted = False
        own = (t - size, t + 1)
        for s, e in sorted(mine):
            if s <= t < e and (s, e) != own and e + grace > observed:
                mine[(s, e)] = [*mine[(s, e)], value]
                updates.append((Windowed(key, s, e), mine[(s, e)]))
                accepted = True
        if own[1] + grace > observed:
            accepted = True
            if own not in mine:
                span = sorted((u for u in kept.get(key, []) if own[0] <= u[0] <= t), key=lambda u: u[0])
                mine[own] = [v for _, v in span] + [value]
            else:
                mine[own] = [*mine[own], value]
            updates.append((Windowed(key, *own), mine[own]))
        if accepted:
            kept.setdefault(key, []).append((t, value))
        else:
            late += 1
        for w in [w for w in mine if w[1] + grace <= observed]:
            del mine[w]  # closed: never updated again
    return updates, late


many_keys = st.lists(st.tuples(st.integers(0, 299).map(str), st.integers(0, 40), st.integers(0, 30)),
                     min_size=1, max_size=80).map(
    lambda raw: [(k, i * 2 + step - jitter, i) for i, (k, step, jitter) in enumerate(raw)])


@settings(max_examples=40, deadline=None)
@given(events=many_keys, size=st.sampled_from([1, 7, 30, 200]), grace=st.sampled_from([0, 5, 40]),
       small_cache=st.booleans())
def test_indexed_sliding_windows_equal_the_model_with_many_keys(events: list[tuple[str, int, int]], size: int,
                                                                grace: int, small_cache: bool) -> None:
    updates, late = model(events, size, grace)
    options: dict[str, Any] = {"store_cache_bytes": 256, "commit_records": 1} if small_cache else {}
    with TestDriver(collect(size, grace).build(), **options) as d:
        for key, t, value in events:
            d.pipe("in", key, value, t)
        assert [(r.key, r.value) for r in d.read_output("out")] == updates
        assert d.metrics.get("late_dropped", 0) == late


def test_a_window_counts_the_records_kept_before_a_restart(tmp_path: Path) -> None:
    """The slices are committed state, not memory: a window made after the app is closed and
    started again aggregates the records of its span kept before."""
    engine = ts.open(str(tmp_path / "db"), durability="async")
    try:
        engine.create_stream("in", partitions=1)
        for batch in ([(100, 1), (150, 2)], [(180, 3)]):
            with engine.producer("in") as p:
                p.instant([pack_envelope(b"k", str(v).encode(), t, None) for t, v in batch])
            app = App(engine, application_id="a", topology=collect(100, 0).build())
            app.run(until_idle=True)
            app.close()
        store = App(engine, application_id="a", topology=collect(100, 0).build()).store("seen")
        assert store.get("k", 80, 181) == [1, 2, 3]
    finally:
        engine.close()


@pytest.mark.timeout(240)
def test_sliding_windows_survive_sigkills_exactly(tmp_path: Path) -> None:
    """A real app (sliding windows over 40 keys, an order-sensitive aggregate, commits every
    9 records, a 4 KiB store cache) SIGKILLed 6 times at random points ends with exactly the
    model's windows: the slices are committed with the windows and the offsets."""
    sys.path.insert(0, str(WORKER.parent))
    from sliding_kill_worker import GRACE_MS, SIZE_MS

    rng = random.Random(7)
    events = [(f"k{rng.randint(0, 39)}", n * 2 + rng.randint(0, 30) - rng.randint(0, 30), n) for n in range(900)]
    updates, _ = model(events, SIZE_MS, GRACE_MS)
    expected = dict(updates)  # the last value of every window
    ops = envelope_transactions("in", ((k.encode(), str(v).encode(), t) for k, t, v in events), 1, 3)
    parts = chunks(ops, 7)
    data = str(tmp_path / "data")
    with ts.open(data, compaction_interval=None) as engine:
        engine.create_stream("in")

        def processed() -> int:
            return committed_transactions(engine, "in", "slide")

        kill_at_random_points(engine, worker_command(WORKER, data, "run"), parts[:6], processed, rng, reach=0.5)
        engine.backend.submit(parts[6])
        run_to_completion(worker_command(WORKER, data, "finish"))
        assert processed() == len(ops)
        store = App(engine, application_id="slide", topology=collect(SIZE_MS, GRACE_MS).build()).store("seen")
        assert store.all() == expected
