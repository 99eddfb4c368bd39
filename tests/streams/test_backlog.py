"""Results do not depend on how far behind an app is (#19 item 24): the same topology, with
two repartitions, run live (processing as the input arrives) and on the whole input as a
backlog, gives exactly the same output, and both equal a model."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.streams import App, StreamsBuilder, TestDriver, TimeWindows, Topology
from tstreams_embedded.streams.records import pack_envelope
from tstreams_embedded.streams.serdes import serde

from .harness import read_envelopes

PARTITIONS = 4
ORDERS = 2400
STEP_MS = 2  # between consecutive orders (all partitions together)
WINDOW_MS = 1_000
GRACE_MS = 2_000
TTL_MS = 5_000
CUSTOMERS = 12
CLOSE_MS = ORDERS * STEP_MS + 2_500 + WINDOW_MS + GRACE_MS


def topology() -> Topology:
    """orders (round-robin, no keys) -> repartition by order id -> dedup -> group by
    customer (a second repartition) -> windowed count with grace, final results only; and
    a table of the orders per customer."""
    b = StreamsBuilder()
    unique = (b.stream("orders", value_serde="json")
              .select_key(lambda k, v: v["id"]).repartition(name="by-order")
              .dedup(key=lambda k, v: v["id"], ttl_ms=TTL_MS, store="seen"))
    per_customer = unique.group_by(lambda k, v: v["customer"], key_serde="str", name="by-customer")
    (per_customer.windowed_by(TimeWindows(size_ms=WINDOW_MS, grace_ms=GRACE_MS)).count(store="per-second")
        .suppress_until_window_closes().to_stream()
        .map(lambda w, n: (w.key, [w.start, n])).to("final-counts", key_serde="str", value_serde="json"))
    per_customer.count(store="orders-per-customer")
    return b.build()


def orders() -> list[tuple[dict[str, Any], int]]:
    """Orders in event-time order, with re-sent duplicates (within the TTL, and later than
    the app's default slack: half the smallest grace), then one order per customer that
    closes the windows before it."""
    rng = random.Random(24)
    events: list[tuple[dict[str, Any], int]] = []
    for n in range(ORDERS):
        order = {"id": n, "customer": f"c{rng.randrange(CUSTOMERS)}"}
        events.append((order, n * STEP_MS))
        if rng.random() < 0.1:
            events.append((order, n * STEP_MS + rng.randint(1_500, 2_500)))
    for c in range(CUSTOMERS):
        events.append(({"id": ORDERS + c, "customer": f"c{c}"}, CLOSE_MS))
    events.sort(key=lambda e: e[1])
    return events


def writes(events: list[tuple[dict[str, Any], int]]) -> list[O.Operation]:
    """One transaction per order, round-robin over the partitions (no keys)."""
    vs = serde("json")
    return [O.Instant("orders", i % PARTITIONS, O.pack_items([pack_envelope(None, vs.serialize(order), t, None)]))
            for i, (order, t) in enumerate(events)]


def expected(events: list[tuple[dict[str, Any], int]]) -> tuple[Counter[tuple[str, int, int]], dict[str, int]]:
    first: dict[int, tuple[str, int]] = {}
    for order, t in events:
        first.setdefault(order["id"], (order["customer"], t))
    final: Counter[tuple[str, int]] = Counter((c, t - t % WINDOW_MS) for c, t in first.values())
    windows = Counter({(c, start, n): 1 for (c, start), n in final.items()
                       if start + WINDOW_MS + GRACE_MS <= CLOSE_MS})
    return windows, dict(Counter(c for c, _ in first.values()))


def run(tmp: Path, events: list[tuple[dict[str, Any], int]], *, live: bool) -> tuple[Any, ...]:
    """Run the app on ``events``: ``live`` writes a few orders at a time and processes them
    before writing more; else all are written first (a backlog) and processed at once. The
    final counts, the table and the metrics."""
    ops = writes(events)
    with ts.open(str(tmp), compaction_interval=None, durability="async") as engine:
        engine.create_stream("orders", partitions=PARTITIONS)
        app = App(engine, application_id="orders-app", topology=topology(), clock=lambda: 0)
        step = 12 if live else len(ops)
        for i in range(0, len(ops), step):
            engine.backend.submit(ops[i:i + step], durable=False)
            app.run(until_idle=True)
        ks, vs = serde("str"), serde("json")
        finals = Counter((ks.deserialize(k), *vs.deserialize(v)) for k, v, _, _ in read_envelopes(
            engine, "final-counts") if k is not None and v is not None)
        table = app.store("orders-per-customer").all()
        metrics = app.metrics
        app.close()
    return finals, table, metrics


@pytest.mark.timeout(120)
def test_a_backlog_gives_the_results_of_running_live(tmp_path: Path) -> None:
    events = orders()
    windows, table = expected(events)
    duplicates = len(events) - ORDERS - CUSTOMERS
    live = run(tmp_path / "live", events, live=True)
    backlog = run(tmp_path / "backlog", events, live=False)
    for finals, got_table, metrics in (live, backlog):
        assert metrics.get("late_dropped", 0) == 0
        assert metrics.get("dedup_expired", 0) == 0
        assert metrics.get("dedup_dropped", 0) == duplicates
        assert got_table == table
        assert finals == windows
    assert live[0] == backlog[0]


def test_dedup_counts_the_duplicates_it_lets_through_after_the_ttl() -> None:
    """Order 1 at 0 is forgotten once order 2 at 1000 moves the stream time to 0 + TTL;
    order 1 again at 500 (out of order, within the TTL of the first by its own time) passes
    and is counted as ``dedup_expired``; order 1 at 2600 (past the TTL) is a new one."""
    b = StreamsBuilder()
    b.stream("orders", value_serde="json").dedup(key=lambda k, v: v["id"], ttl_ms=1_000).to("unique")
    with TestDriver(b.build()) as d:
        for ident, t in [(1, 0), (2, 1_000), (1, 500), (1, 2_600)]:
            d.pipe("orders", "k", {"id": ident}, timestamp=t)
        assert [r.timestamp for r in d.read_output("unique")] == [0, 1_000, 500, 2_600]
        assert d.metrics.get("dedup_expired") == 1
        exposition = d.app.prometheus.exposition().decode()
        assert 'tstreams_streams_dedup_expired_total{app="test-app",partition="0"} 1.0' in exposition


SMALL_WINDOW_MS = 100
SMALL_GRACE_MS = 200  # the default slack is half of it: 100 ms
SMALL_TTL_MS = 2_000


def small_topology() -> Topology:
    b = StreamsBuilder()
    unique = (b.stream("orders", value_serde="json")
              .select_key(lambda k, v: v["id"]).repartition(name="by-order")
              .dedup(key=lambda k, v: v["id"], ttl_ms=SMALL_TTL_MS))
    (unique.group_by(lambda k, v: v["customer"], key_serde="str", name="by-customer")
        .windowed_by(TimeWindows(size_ms=SMALL_WINDOW_MS, grace_ms=SMALL_GRACE_MS)).count(store="windows")
        .suppress_until_window_closes().to_stream()
        .map(lambda w, n: (w.key, [w.start, n])).to("final-counts", key_serde="str", value_serde="json"))
    return b.build()


@st.composite
def timelines(draw: st.DrawFn) -> tuple[int, list[tuple[dict[str, Any], int]], list[int]]:
    """(partitions, orders in event-time order with duplicates later than the slack and
    within the TTL, then closers; how many transactions each live step writes)."""
    partitions = draw(st.integers(2, 4))
    gaps = draw(st.lists(st.integers(0, 40), min_size=1, max_size=120))
    customers = draw(st.lists(st.integers(0, 4), min_size=len(gaps), max_size=len(gaps)))
    delays = draw(st.lists(st.one_of(st.none(), st.integers(150, 1_000)), min_size=len(gaps), max_size=len(gaps)))
    events: list[tuple[dict[str, Any], int]] = []
    t = 0
    for n, (gap, customer, delay) in enumerate(zip(gaps, customers, delays, strict=True)):
        t += gap
        order = {"id": n, "customer": f"c{customer}"}
        events.append((order, t))
        if delay is not None:
            events.append((order, t + delay))
    close = max(e[1] for e in events) + SMALL_WINDOW_MS + SMALL_GRACE_MS
    events.extend(({"id": len(gaps) + c, "customer": f"c{c}"}, close) for c in range(5))
    events.sort(key=lambda e: e[1])
    steps = draw(st.lists(st.integers(1, 8), min_size=1, max_size=20))
    return partitions, events, steps


def run_small(tmp: Path, partitions: int, events: list[tuple[dict[str, Any], int]], steps: list[int] | None
              ) -> tuple[Counter[tuple[str, int, int]], dict[str, int]]:
    vs = serde("json")
    ops = [O.Instant("orders", i % partitions, O.pack_items([pack_envelope(None, vs.serialize(o), t, None)]))
           for i, (o, t) in enumerate(events)]
    with ts.open(str(tmp), compaction_interval=None, durability="async") as engine:
        engine.create_stream("orders", partitions=partitions)
        app = App(engine, application_id="small", topology=small_topology(), clock=lambda: 0)
        i = 0
        k = 0
        while i < len(ops):
            n = len(ops) if steps is None else steps[k % len(steps)]
            engine.backend.submit(ops[i:i + n], durable=False)
            app.run(until_idle=True)
            i += n
            k += 1
        ks = serde("str")
        finals = Counter((ks.deserialize(kb), *vs.deserialize(vb)) for kb, vb, _, _ in read_envelopes(
            engine, "final-counts") if kb is not None and vb is not None)
        metrics = app.metrics
        app.close()
    return finals, metrics


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(timeline=timelines())
def test_live_and_backlog_runs_equal_the_model(tmp_path_factory: pytest.TempPathFactory,
                                                timeline: tuple[int, list[tuple[dict[str, Any], int]], list[int]]
                                                ) -> None:
    """Any partition count, timeline and live pace: the live run (a few transactions at a
    time) and the backlog run give the model's final window counts, with nothing late and
    every duplicate dropped."""
    partitions, events, steps = timeline
    first: dict[int, tuple[str, int]] = {}
    for order, t in events:
        first.setdefault(order["id"], (order["customer"], t))
    close = max(t for _, t in events)
    per_window = Counter((c, t - t % SMALL_WINDOW_MS) for c, t in first.values())
    model = Counter({(c, start, n): 1 for (c, start), n in per_window.items()
                     if start + SMALL_WINDOW_MS + SMALL_GRACE_MS <= close})
    for steps_or_none in (steps, None):
        finals, metrics = run_small(tmp_path_factory.mktemp("run"), partitions, events, steps_or_none)
        assert metrics.get("late_dropped", 0) == 0
        assert metrics.get("dedup_dropped", 0) == len(events) - len(first)
        assert finals == model


def test_dedup_keeps_forgotten_keys_within_a_memory_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for two forgotten keys, dedup counts the late duplicates of the two most
    recently forgotten keys only: the older ones were dropped from memory first."""
    from tstreams_embedded.streams.nodes import dedup

    monkeypatch.setattr(dedup, "FORGOTTEN_BYTES", 2 * (1 + dedup.FORGOTTEN_OVERHEAD))  # keys 1..5: 1 msgpack byte
    b = StreamsBuilder()
    b.stream("orders", value_serde="json").dedup(key=lambda k, v: v["id"], ttl_ms=1_000).to("unique")
    with TestDriver(b.build()) as d:
        for ident in range(1, 6):
            d.pipe("orders", "k", {"id": ident}, timestamp=ident)
        d.pipe("orders", "k", {"id": 100}, timestamp=1_005)  # forgets 1..5
        for ident in range(1, 6):
            d.pipe("orders", "k", {"id": ident}, timestamp=500)
        assert d.metrics.get("dedup_expired") == 2
