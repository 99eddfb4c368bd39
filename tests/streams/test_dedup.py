"""Dedup: against a model (hypothesis), state expiry, bad input, and a SIGKILL test that
proves the output exact across crashes."""

from __future__ import annotations

import random
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.streams import StreamsBuilder, TestDriver
from tstreams_embedded.streams.records import pack_envelope, partition_of
from tstreams_embedded.streams.serdes import MsgpackSerde, serde
from tstreams_embedded.streams.stores import ReadOnlyKeyValueStore, namespace, pages

from .harness import (
    chunks,
    committed_transactions,
    envelope_transactions,
    kill_at_random_points,
    read_envelopes,
    run_to_completion,
    worker_command,
)

WORKER = Path(__file__).resolve().parent / "dedup_kill_worker.py"


def model_dedup(events: list[tuple[int, int, Any]], ttl: int) -> list[Any]:
    """The records of ``events`` (dedup id, time, value) that pass, in order, in one task."""
    seen: dict[int, int] = {}
    now: int | None = None
    out = []
    for ident, t, value in events:
        now = t if now is None else max(now, t)
        t0 = seen.get(ident)
        if t0 is not None and now < t0 + ttl:
            continue
        seen[ident] = t
        out.append(value)
    return out


def dedup_topology(ttl: int) -> StreamsBuilder:
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json")
        .dedup(key=lambda k, v: v["id"], ttl_ms=ttl, store="seen")
        .to("out", key_serde="str", value_serde="json"))
    return b


dedup_events = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30), st.integers(0, 40)),
                        min_size=1, max_size=50).map(
    lambda raw: [(ident, i * 3 + step - jitter, i) for i, (ident, step, jitter) in enumerate(raw)])


@settings(max_examples=50, deadline=None)
@given(events=dedup_events, ttl=st.sampled_from([1, 10, 50, 1000]))
def test_dedup_equals_the_model(events: list[tuple[int, int, int]], ttl: int) -> None:
    with TestDriver(dedup_topology(ttl).build()) as d:
        for ident, t, value in events:
            d.pipe("in", "k", {"id": ident, "v": value}, t)
        assert [r.value["v"] for r in d.read_output("out")] == model_dedup(events, ttl)
        now = max(t for _, t, _ in events)
        remembered = d.store("seen").all()
        assert all(t0 + ttl > now for t0 in remembered.values()), "expired keys must be deleted"


def test_dedup_state_expires_by_itself() -> None:
    with TestDriver(dedup_topology(100).build()) as d:
        for i in range(50):
            d.pipe("in", "k", {"id": i}, i * 10)
        d.process()
        assert d.store("seen").all() == {i: i * 10 for i in range(40, 50)}
        namespaces = [n for n in d.app.store("seen").namespaces]
        index = [k for ns in namespaces for k, _ in pages(d.engine.backend, ns + ".index", None, None)]
        assert len(index) == 10


def test_dedup_bad_arguments() -> None:
    s = StreamsBuilder().stream("in")
    with pytest.raises(errors.InvalidArgument):
        s.dedup(key=lambda k, v: v, ttl_ms=0)
    with pytest.raises(errors.InvalidArgument):
        s.dedup(key="id", ttl_ms=10)  # type: ignore[arg-type]
    with pytest.raises(errors.TopologyError, match=r"repartition\(\)"):
        s.select_key(lambda k, v: v).dedup(key=lambda k, v: v, ttl_ms=10)


PARTITIONS = 2


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kills", [6, pytest.param(12, marks=pytest.mark.soak)])
def test_dedup_survives_sigkills_exactly(tmp_path: Path, kills: int) -> None:
    """Orders with duplicates (resent up to 3 times, some after the TTL) go through a worker
    (dedup, then a join with a customers table) that is SIGKILLed 6 times (12 under ``-m soak``)
    at random points: "unique" and the table aggregation must equal the model exactly."""
    sys.path.insert(0, str(WORKER.parent))
    from dedup_kill_worker import TTL_MS

    rng = random.Random(13)
    data = str(tmp_path / "data")
    key_serde, value_serde = serde("str"), serde("json")
    events: list[tuple[str, dict[str, Any], int]] = []
    for n in range(1500):
        order = {"id": n, "customer": f"c{rng.randint(0, 9)}"}
        events.append((order["customer"], order, n * 3))
        for _ in range(rng.choice([0, 0, 1, 2, 3])):  # duplicates: soon, or after the TTL
            delay = rng.choice([rng.randint(1, 300), rng.randint(TTL_MS + 200, 3 * TTL_MS)])
            events.append((order["customer"], order, n * 3 + delay))
    events.sort(key=lambda e: (e[2], e[1]["id"]))
    tiers = {f"c{i}": rng.choice(["gold", "silver"]) for i in range(9)}  # c9 has no row: its orders drop
    by_partition: dict[int, list[tuple[int, int, Any]]] = defaultdict(list)
    customer_rows: list[O.Operation] = [
        O.Instant("customers", partition_of(key_serde.serialize(c), PARTITIONS),
                  O.pack_items([pack_envelope(key_serde.serialize(c), value_serde.serialize({"tier": tier}), 0, None)]))
        for c, tier in tiers.items()]
    for customer, order, t in events:
        by_partition[partition_of(key_serde.serialize(customer), PARTITIONS)].append(
            (order["id"], t, (customer, order["id"], t)))
    ops = envelope_transactions("orders", ((key_serde.serialize(customer), value_serde.serialize(order), t)
                                           for customer, order, t in events), PARTITIONS, 4)
    parts = chunks(ops, kills + 1)
    expected = sorted((customer, ident, t, tiers[customer]) for evs in by_partition.values()
                      for customer, ident, t in model_dedup(evs, TTL_MS) if customer in tiers)
    assert len(expected) < len(events)  # the input holds duplicates that must go

    with ts.open(data, compaction_interval=None) as engine:
        engine.create_stream("orders", partitions=PARTITIONS)
        engine.create_stream("customers", partitions=PARTITIONS)
        # The customers' rows (timestamp 0) are written in their own engine write, just before
        # the first orders (timestamps from 0): their transaction IDs may interleave, but a task
        # takes the table's rows first (timestamp order, tables first on ties), so every order
        # of a customer with a row is joined.
        engine.backend.submit(customer_rows)

        def processed() -> int:
            return committed_transactions(engine, "orders", "dedup-kill")

        progress = kill_at_random_points(engine, worker_command(WORKER, data, "run"), parts[:kills], processed,
                                         rng, reach=0.5)
        print("order transactions committed at the kills:", progress, "of", len(ops))
        assert progress == sorted(progress) and len(set(progress)) == kills  # progress before every kill
        engine.backend.submit(parts[kills])
        run_to_completion(worker_command(WORKER, data, "finish"))
        assert processed() == len(ops)  # every order transaction
        out = []
        for kb, vb, t, _ in read_envelopes(engine, "unique"):
            assert kb is not None and vb is not None
            order = value_serde.deserialize(vb)
            out.append((key_serde.deserialize(kb), order["id"], t, order["tier"]))
        assert sorted(out) == expected
        per_tier = ReadOnlyKeyValueStore(engine.backend, [namespace("dedup-kill", p, "per-tier")
                                                          for p in range(PARTITIONS)], key_serde, MsgpackSerde())
        assert per_tier.all() == dict(Counter(tiers.values()))
