"""Prometheus metrics of an app (``streams/metrics.py``), parsed with prometheus-client's own
parser: every task family is labelled by app and partition, dropped records are counted per
reason and task (and in ``app.metrics``) exactly as a model of the topology predicts, an
empty input transaction counts no record, and the store sizes are counted up to a cap."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tstreams_embedded.engine.protocol.backend import TxnData
from tstreams_embedded.streams import JoinWindows, StreamsBuilder, TestDriver, TimeWindows
from tstreams_embedded.streams import metrics as M
from tstreams_embedded.streams.records import partition_of
from tstreams_embedded.streams.serdes import serde
from tstreams_embedded.streams.task import Task

APP = "test-app"
TASK_FAMILIES = ["records_processed", "records_out", "commits", "commit_latency_seconds", "process_latency_seconds",
                 "end_to_end_latency_seconds", "punctuations", "dropped_records", "late_records_dropped",
                 "skipped_records", "fenced_commits", "store_entries", "store_entries_capped", "lag_ms",
                 "lag_records", "stream_time_lag_ms"]
APP_FAMILIES = ["rebalances", "assigned_partitions", "members"]


def samples(driver: TestDriver) -> dict[str, list[Any]]:
    """The exposition, parsed: family name (without prefix) -> its samples."""
    text = driver.app.prometheus.exposition().decode()
    return {f.name[len(M.PREFIX) + 1:]: f.samples for f in text_string_to_metric_families(text)}


def dropped(driver: TestDriver) -> dict[tuple[str, str], float]:
    """``(partition, reason) -> dropped_records_total``, the zero ones left out."""
    return {(s.labels["partition"], s.labels["reason"]): s.value for s in samples(driver)["dropped_records"]
            if s.name.endswith("_total") and s.value and s.labels["app"] == APP}


def test_dropped_records_per_reason_and_task_equal_the_model() -> None:
    """One input stream on 2 tasks feeds an inner stream–table join, a dedup and a windowed
    count: records without a price (join_no_match), repeated ids (dedup), records for closed
    windows (late) and null keys (null_key, in the join and in the count) are counted per task
    exactly as a model of each task computes them."""
    b = StreamsBuilder()
    prices = b.table("prices", key_serde="str", value_serde="json")
    clicks = b.stream("clicks", key_serde="str", value_serde="json")
    clicks.join(prices, lambda c, p: p).to("priced")
    # a dedup reading a multi-partition input directly refuses records without a key
    clicks.filter(lambda k, v: k is not None).dedup(key=lambda k, v: v["id"], ttl_ms=10_000).to("unique")
    clicks.group_by_key(key_serde="str").windowed_by(TimeWindows(size_ms=10)).count(store="per-10ms")
    events = [("ann", 1, 5), ("bob", 2, 3), ("ann", 1, 12), ("cid", 3, 25), ("bob", 4, 1), (None, 5, 40),
              ("ann", 6, 2), ("dan", 7, 30), ("cid", 3, 8), ("dan", 8, 50), ("bob", 2, 41), (None, 9, 3)]
    priced = {"ann", "cid"}
    parts = 2
    ks = serde("str", "key_serde")

    def task(key: str | None) -> int:
        return 0 if key is None else partition_of(ks.serialize(key), parts)

    expected: Counter[tuple[str, str]] = Counter()
    seen: dict[int, set[int]] = defaultdict(set)
    stream_time: dict[int, int] = {}
    for key, ident, t in events:
        p = task(key)
        if key is None:
            expected[str(p), "null_key"] += 2  # the join and the count skip it
        elif key not in priced:
            expected[str(p), "join_no_match"] += 1
        if key is not None:
            if ident in seen[p]:
                expected[str(p), "dedup"] += 1
            seen[p].add(ident)
        if key is not None:
            stream_time[p] = max(stream_time.get(p, t), t)
            if t - t % 10 + 10 <= stream_time[p]:
                expected[str(p), "late"] += 1
    assert {reason for _, reason in expected} == {"null_key", "join_no_match", "dedup", "late"}  # all exercised
    assert {p for p, _ in expected} == {"0", "1"}

    with TestDriver(b.build(), application_id=APP, partitions=parts) as d:
        for key in priced:
            d.pipe("prices", key, {"price": 1}, timestamp=0)
        d.process()
        for key, ident, t in events:
            d.pipe("clicks", key, {"id": ident}, timestamp=t)
        metrics = d.process()
        assert dropped(d) == expected
        for counter, reason in M.DROP_REASONS.items():  # the same counts in app.metrics
            assert metrics.get(counter, 0) == sum(n for (_, r), n in expected.items() if r == reason)
        got = samples(d)
        for family, reason in (("late_records_dropped", "late"), ("skipped_records", "null_key")):
            assert {s.labels["partition"]: s.value for s in got[family] if s.name.endswith("_total") and s.value} \
                == {p: n for (p, r), n in expected.items() if r == reason}


@pytest.mark.parametrize(("kind", "unmatched"), [("join", 2), ("left_join", 1), ("outer_join", 0)])
def test_stream_stream_join_counts_records_that_close_without_a_match(kind: str, unmatched: int) -> None:
    """``a`` (this side) and ``b`` (other side) never match and close when stream time passes
    them by more than the join's reach: an inner join drops both, a left join emits ``a``
    padded and drops ``b``, an outer join emits both."""
    b = StreamsBuilder()
    left = b.stream("left", key_serde="str", value_serde="json")
    right = b.stream("right", key_serde="str", value_serde="json")
    getattr(left, kind)(right, lambda x, y: [x, y], JoinWindows.of(5)).to("joined")
    with TestDriver(b.build(), application_id=APP) as d:
        d.pipe("left", "a", 1, timestamp=0)
        d.pipe("right", "b", 2, timestamp=0)
        d.pipe("left", "c", 3, timestamp=50)
        d.pipe("right", "c", 4, timestamp=50)
        metrics = d.process()
        assert metrics.get("join_no_match", 0) == unmatched
        assert dropped(d) == ({("0", "join_no_match"): unmatched} if unmatched else {})
        assert len(d.read_output("joined")) == 1 + (2 - unmatched)  # c⋈c, and the padded ones


def test_table_table_inner_join_counts_updates_without_a_row() -> None:
    b = StreamsBuilder()
    users = b.table("users", key_serde="str", value_serde="json")
    emails = b.table("emails", key_serde="str", value_serde="json")
    users.join(emails, lambda u, e: [u, e]).to_stream().to("joined")
    with TestDriver(b.build(), application_id=APP) as d:
        d.pipe("users", "ann", "Ann", timestamp=1)  # no email yet: no joined row
        d.pipe("emails", "bob", "b@x", timestamp=2)  # no user: no joined row
        d.pipe("emails", "ann", "a@x", timestamp=3)  # joined
        metrics = d.process()
        assert metrics["join_no_match"] == 2 and dropped(d) == {("0", "join_no_match"): 2}
        assert [r.value for r in d.read_output("joined")] == [["Ann", "a@x"]]


def test_every_task_family_is_labelled_by_app_and_partition() -> None:
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str").count(store="n")
    with TestDriver(b.build(), application_id=APP, partitions=3) as d:
        for key in ["x", "y", "z", "x"]:
            d.pipe("in", key, {}, timestamp=1)
        d.process()
        got = samples(d)
        for family in TASK_FAMILIES + APP_FAMILIES:
            assert family in got, family
        for family in TASK_FAMILIES:
            for s in got[family]:
                assert s.labels["app"] == APP and s.labels["partition"] in {"0", "1", "2"}, (family, s)
        for family in APP_FAMILIES:
            assert all(s.labels == {"app": APP} for s in got[family]), family
        for family in ("records_processed", "end_to_end_latency_seconds", "process_latency_seconds", "commits"):
            assert {s.labels["partition"] for s in got[family]} == {"0", "1", "2"}, family
        n = {s.labels["partition"]: s.value for s in got["store_entries"] if s.labels["store"] == "n"}
        keys_per_task = Counter(str(partition_of(serde("str", "k").serialize(k), 3)) for k in {"x", "y", "z"})
        assert n == {p: keys_per_task.get(p, 0) for p in ("0", "1", "2")}


def test_an_empty_transaction_counts_no_record_and_moves_the_offset() -> None:
    """The engine cancels an empty transaction at its checkpoint, so none is fetched today;
    a task handed one (as a fetch could return) processes it as 0 records, not 1, and moves
    its offset past it; ``None`` means no input."""
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").to("out")
    with TestDriver(b.build(), application_id=APP) as d:
        d.pipe("in", "k", 1, timestamp=1)
        d.process()
        task = Task(d.app, 0)
        reader = task.readers[0]
        assert task.step() is None and not task.dirty()  # no input
        last = d.engine.backend.last_txn_id("in", 0)
        reader.buffer.append(TxnData("in", 0, last + 1, [], reader.stream_id))
        assert task.step() == 0
        assert task.records_since_commit == 0 and reader.offset == last + 1 and task.dirty()
        assert task.step() is None


def test_store_sizes_are_counted_up_to_a_cap_global_stores_included(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a cap of 5 entries per store and 8 per scrape: the first store counted stops at 5
    (capped), the next gets the 3 left of the budget (capped), the rest none (capped, 0). The
    global table's store is counted once, as partition ``global``."""
    monkeypatch.setattr(M, "STORE_SCAN", 5)
    monkeypatch.setattr(M, "STORE_SCAN_BUDGET", 8)
    b = StreamsBuilder()
    countries = b.global_table("countries", key_serde="str", value_serde="json", store="countries")
    (b.stream("in", key_serde="str", value_serde="json")
        .join(countries, lambda v, c: c, key_selector=lambda k, v: v).group_by_key(key_serde="str").count(store="n"))
    with TestDriver(b.build(), application_id=APP, partitions=2) as d:
        for i in range(7):
            d.pipe("countries", f"c{i}", f"country {i}", timestamp=1)
        for i in range(10):
            d.pipe("in", f"user{i}", "c0", timestamp=2)
        d.process()
        got = samples(d)
        sizes = {(s.labels["store"], s.labels["partition"]): s.value for s in got["store_entries"]}
        capped = {(s.labels["store"], s.labels["partition"]): s.value for s in got["store_entries_capped"]}
        assert sizes == {("countries", "global"): 5, ("n", "0"): 3, ("n", "1"): 0}
        assert capped == {("countries", "global"): 1, ("n", "0"): 1, ("n", "1"): 1}
        monkeypatch.setattr(M, "STORE_SCAN_BUDGET", 100)
        monkeypatch.setattr(M, "STORE_SCAN", 100)
        got = samples(d)
        sizes = {(s.labels["store"], s.labels["partition"]): s.value for s in got["store_entries"]}
        assert sizes[("countries", "global")] == 7
        assert sizes[("n", "0")] + sizes[("n", "1")] == 10
        assert all(s.value == 0 for s in got["store_entries_capped"])


def test_global_table_records_without_a_key_are_counted_as_dropped() -> None:
    b = StreamsBuilder()
    countries = b.global_table("countries", key_serde="str", value_serde="json", store="countries")
    b.stream("in", key_serde="str", value_serde="json").join(countries, lambda v, c: c,
                                                              key_selector=lambda k, v: v).to("out")
    with TestDriver(b.build(), application_id=APP, partitions=2) as d:
        d.pipe("countries", "fr", "France", timestamp=1)
        d.pipe_raw("countries", b"no key", partition=0)
        d.pipe_raw("countries", b"nor this", partition=1)
        d.pipe("in", "ann", "fr", timestamp=2)
        metrics = d.process()
        assert metrics["skipped_null_key"] == 2
        assert dropped(d) == {("global", "null_key"): 2}
        assert [r.value for r in d.read_output("out")] == ["France"]
