"""Interactive queries and metrics across real processes: two instances of one application
split its tasks; each answers the keys it owns over HTTP and names the owner of the others
(key discovery); their Prometheus metrics, parsed, add up to exactly the traffic."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.streams import StreamsBuilder, TestDriver, send_records
from tstreams_embedded.streams.app_members import read_group
from tstreams_embedded.streams.queries import QueryClient
from tstreams_embedded.streams.records import partition_of
from tstreams_embedded.streams.serdes import serde
from tstreams_embedded.testing import eventually

from .test_scale_out import PARTITIONS, Worker
from .views_pipeline import expected_totals, model

PAGES = [f"/p{i}" for i in range(8)] + ["/health"]
USERS = ["ann", "bob", "cyd", "dee", "eve"]


def metrics_of(port: int) -> dict[str, list[Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, list[Any]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name].append(sample)
    return out


def total(samples: dict[str, list[Any]], name: str) -> float:
    return sum(s.value for s in samples.get(name, []))


@pytest.fixture
def two_instances(tmp_path: Path) -> Iterator[tuple[ts.Engine, list[Worker], list[dict[str, Any]]]]:
    data = str(tmp_path / "data")
    events = [{"page": PAGES[i % len(PAGES)], "user": USERS[i % len(USERS)], "n": i, "ts": i * 7}
              for i in range(600)]
    with ts.open(data, compaction_interval=None) as engine:
        engine.create_stream("views", partitions=PARTITIONS)
        workers = [Worker(data), Worker(data)]
        try:
            eventually(lambda: len(read_group(engine.backend, "scale", 1000).members) == 2, timeout=30)
            for i in range(0, len(events), 50):
                send_records(engine, "views", [(e["page"], e, e["ts"]) for e in events[i:i + 50]],
                             key_serde="str", value_serde="json")
            yield engine, workers, events
        finally:
            for w in workers:
                w.kill()


@pytest.mark.timeout(180)
def test_queries_and_metrics_across_two_processes(two_instances: Any) -> None:
    engine, workers, events = two_instances
    expected = expected_totals(events)
    a, b = (QueryClient("127.0.0.1", w.port) for w in workers)

    def settled() -> bool:
        members = a.request("/v1/members")[1]["members"]
        owned = sorted(p for m in members for p in m["partitions"])
        return len(members) == 2 and owned == list(range(PARTITIONS)) and all(m["partitions"] for m in members)

    eventually(settled, timeout=60, message="the two instances did not split the tasks")
    eventually(lambda: all(a.get("totals", u) == expected[u] for u in USERS), timeout=60,
               message="the totals did not reach the expected values")

    members = {m["port"]: set(m["partitions"]) for m in a.request("/v1/members")[1]["members"]}
    assert set(members) == {w.port for w in workers} and not set.intersection(*members.values())
    key_serde = serde("str")
    for user in USERS:
        meta = b.metadata("totals", user)  # key discovery, asked of either instance
        p = partition_of(key_serde.serialize(user), PARTITIONS)
        assert meta["partition"] == p and p in members[meta["port"]] and meta["host"] == "127.0.0.1"
        other = workers[0].port if meta["port"] == workers[1].port else workers[1].port
        status, body = QueryClient("127.0.0.1", other).request("/v1/stores/totals/get", key=user)
        assert status == 421 and body["owner"]["port"] == meta["port"]  # the non-owner names the owner
        assert QueryClient("127.0.0.1", other).get("totals", user) == expected[user]  # the client follows it

    # ranges and prefixes answer the tasks each instance owns: together, every key once
    ranges = [dict(c.request("/v1/stores/totals/range")[1]["entries"]) for c in (a, b)]
    assert not set(ranges[0]) & set(ranges[1]) and {**ranges[0], **ranges[1]} == dict(expected)
    limited = [c.request("/v1/stores/totals/range", limit=1)[1] for c in (a, b)]
    assert all(len(r["entries"]) == 1 and r["truncated"] == (len(ranges[i]) > 1) for i, r in enumerate(limited))
    assert a.request("/v1/stores/totals/range", limit=0)[0] == 400
    prefixed = [dict(c.request("/v1/stores/totals/prefix", prefix="d")[1]["entries"]) for c in (a, b)]
    assert {**prefixed[0], **prefixed[1]} == {"dee": expected["dee"]}

    by_partition: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_partition[partition_of(key_serde.serialize(e["page"]), PARTITIONS)].append(e)
    counts, _ = model(by_partition)
    for page in PAGES[:3]:
        windows = a.fetch("counts", page)
        assert {(w["start"], w["end"]): w["value"] for w in windows} == {
            (w.start, w.end): n for w, n in counts.items() if w.key == page}
        first = windows[0]
        assert b.get("counts", page, start=first["start"], end=first["end"]) == first["value"]

    # bad input: a clear error status, and the instance keeps serving
    assert a.request("/v1/stores/nope/get", key="x")[0] == 404
    assert a.request("/v1/stores/totals/bogus")[0] == 404
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(f"http://127.0.0.1:{workers[0].port}/v1/metadata/totals?key=not-json", timeout=10)
    assert bad.value.code == 400 and json.loads(bad.value.read())["error"] == "InvalidArgument"
    owner = a.metadata("totals", "ann")["port"]
    status, body = QueryClient("127.0.0.1", owner).request("/v1/stores/totals/fetch", key="ann")
    assert status == 400 and "not windowed" in body["message"]

    # metrics: parsed from both instances' endpoints, they add up to exactly the traffic
    samples = [metrics_of(w.port) for w in workers]
    kept = sum(1 for e in events if e["page"] != "/health")
    processed = sum(total(s, "tstreams_streams_records_processed_total") for s in samples)
    assert processed == len(events) + kept  # the input, then the repartitioned records (by user)
    assert sum(total(s, "tstreams_streams_assigned_partitions") for s in samples) == PARTITIONS
    assert all(total(s, "tstreams_streams_members") == 2 for s in samples)
    commits = sum(total(s, "tstreams_streams_commits_total") for s in samples)
    assert commits > 0 and commits == sum(total(s, "tstreams_streams_commit_latency_seconds_count") for s in samples)
    entries = {(x.labels["store"], x.labels["partition"]): x.value
               for s in samples for x in s["tstreams_streams_store_entries"]}
    assert sum(v for (store, _), v in entries.items() if store == "totals") == len(USERS)
    assert sum(v for (store, _), v in entries.items() if store == "counts") == len(counts)
    assert sum(total(s, "tstreams_streams_lag_records") for s in samples) == 0
    assert sum(total(s, "tstreams_streams_rebalances_total") for s in samples) >= 2  # each joined once at least


def test_store_queries_in_process() -> None:
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str").count(store="n")
    with TestDriver(b.build(), partitions=3) as driver:
        for key in ["apple", "apricot", "banana", "apple"]:
            driver.pipe("in", key, {}, timestamp=1)
        store = driver.store("n")
        assert store.prefix("ap") == [("apple", 2), ("apricot", 1)]  # type: ignore[union-attr]
        assert store.range("apricot", "c") == [("apricot", 1), ("banana", 1)]  # type: ignore[union-attr]
        meta = driver.app.query_metadata_for_key("n", "banana")
        assert meta.partition == partition_of(b"banana", 3) and meta.member is not None and meta.port is None
        with pytest.raises(errors.StoreNotFound):
            driver.app.query_metadata_for_key("nope", "x")
        metrics = driver.app.prometheus.exposition().decode()
        families = {f.name: f for f in text_string_to_metric_families(metrics)}
        assert sum(s.value for s in families["tstreams_streams_records_processed"].samples
                   if s.name.endswith("_total")) == 4
