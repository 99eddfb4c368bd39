"""The bounded stream overview (metrics, status page) against a small pure-Python model:
heads, consumer offsets and lags are exact within the limits, and every limit holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded.engine.operator.overview import OverviewLimits, stream_overview
from tstreams_embedded.ids import ID_MULTIPLIER

# per partition: a list of transactions, True = checkpointed (instant), False = cancelled
partition_txns = st.lists(st.booleans(), max_size=6)
stream_specs = st.lists(st.lists(partition_txns, min_size=1, max_size=3), min_size=1, max_size=4)
limits_st = st.builds(OverviewLimits, streams=st.integers(1, 5), partitions=st.integers(1, 4),
                      consumers=st.integers(1, 3), rows=st.integers(1, 12), count_cap=st.integers(1, 6),
                      scan_budget=st.integers(0, 40))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=stream_specs, limits=limits_st, data=st.data())
def test_overview_matches_model_within_limits(make_engine: Callable[..., ts.Engine], spec: list[list[list[bool]]],
                                              limits: OverviewLimits, data: st.DataObject) -> None:
    engine = make_engine()
    core: Any = engine.backend
    ids: dict[tuple[str, int], list[tuple[int, bool]]] = {}
    offsets: dict[tuple[str, str, int], int] = {}
    for si, parts in enumerate(spec):
        name = f"s{si}"
        engine.create_stream(name, partitions=len(parts))
        for p, txns in enumerate(parts):
            row = ids.setdefault((name, p), [])
            for checkpointed in txns:
                if checkpointed:
                    row.append((engine.producer(name, partition=p).instant([b"x"]), True))
                else:
                    t = engine.producer(name, partition=p).new_transaction()
                    t.send(b"x")
                    row.append((t.id, False))
                    t.cancel()
            for consumer in data.draw(st.sets(st.sampled_from(["a", "b", "c", "d"]), max_size=3)):
                choices = [0] + [i for i, _ in row]
                offset = data.draw(st.sampled_from(choices))
                c = engine.consumer(name, name=consumer, partitions=[p])
                c.set_offset(p, offset)
                c.checkpoint()
                offsets[(name, consumer, p)] = offset

    ov = stream_overview(core.store, limits)

    names = sorted(f"s{i}" for i in range(len(spec)))
    assert [s.name for s in ov.streams] == names[: limits.streams]
    rows = sum(len(s.consumers) for s in ov.streams)
    assert rows <= limits.rows
    assert ov.scan_steps <= limits.scan_budget
    missing_consumer_rows = False
    for s in ov.streams:
        shown = min(s.partitions, limits.partitions)
        assert s.partitions_truncated == (s.partitions > limits.partitions)
        assert s.heads == [max((i for i, _ in ids[(s.name, p)]), default=0) for p in range(shown)]
        assert len({c.consumer for c in s.consumers}) <= limits.consumers
        listed = {(c.consumer, c.partition) for c in s.consumers}
        expected = {(c, p) for (n, c, p) in offsets if n == s.name and p < shown}
        assert listed <= expected
        missing_consumer_rows |= listed != expected
        for c in s.consumers:
            offset = offsets[(s.name, c.consumer, c.partition)]
            assert c.offset == offset
            after = sum(1 for i, ok in ids[(s.name, c.partition)] if ok and i > offset)
            if c.lag_txns is not None:
                assert c.lag_txns == min(after, limits.count_cap)
            head = s.heads[c.partition]
            assert c.lag_seconds == max(0, head // ID_MULTIPLIER - offset // ID_MULTIPLIER) / 1000
    truncated = (len(spec) > limits.streams or missing_consumer_rows
                 or any(s.partitions_truncated for s in ov.streams))
    assert ov.truncated == truncated


def test_overview_counts_every_lag_with_the_default_limits(make_engine: Callable[..., ts.Engine]) -> None:
    engine = make_engine()
    engine.create_stream("s", partitions=2)
    ids = [engine.producer("s", partition=0).instant([b"x"]) for _ in range(10)]
    c = engine.consumer("s", name="c", partitions=[0])
    c.set_offset(0, ids[3])
    c.checkpoint()
    (s,) = stream_overview(engine.backend.store).streams  # type: ignore[attr-defined]
    assert s.heads == [ids[-1], 0]
    (lag,) = s.consumers
    assert (lag.consumer, lag.partition, lag.offset, lag.lag_txns) == ("c", 0, ids[3], 6)
