"""``/metrics`` of a single-node ``tstreams serve --http`` (a real server process), parsed
with prometheus-client's own parser: the values move with real traffic."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tstreams_embedded import errors
from tstreams_embedded.ids import txn_millis
from tstreams_embedded.listening import parse_http
from tstreams_embedded.testing import ServeProcess, eventually, free_port

pytestmark = pytest.mark.timeout(120)


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_single_node_metrics_follow_traffic(tmp_path: Path) -> None:
    port = free_port()
    with ServeProcess(tmp_path / "data", tmp_path, extra_args=["--http", f"127.0.0.1:{port}"]) as server:
        before = scrape(port)
        assert before[("tstreams_engine_commits_total", frozenset())] == 0
        engine = server.connect(timeout=10)
        engine.create_stream("s", partitions=2)
        ids = [engine.producer("s", partition=1).instant([b"x"]) for _ in range(4)]
        consumer = engine.consumer("s", name="c", partitions=[1])
        consumer.get_transaction(1)
        consumer.checkpoint()
        after = scrape(port)
        assert after[("tstreams_engine_commits_total", frozenset())] >= 6
        assert after[("tstreams_engine_requests_total", frozenset())] >= 6
        assert after[("tstreams_engine_fsyncs_total", frozenset())] >= 1  # durable writes, sync mode
        assert after[("tstreams_engine_fsync_seconds_total", frozenset())] > 0
        used, size, limit = (after[(f"tstreams_engine_map_{m}_bytes", frozenset())] for m in ("used", "size", "limit"))
        assert 0 < used <= size <= limit
        assert after[("tstreams_engine_disk_bytes", frozenset())] >= used > before[("tstreams_engine_map_used_bytes",
                                                                                       frozenset())]
        assert after[("tstreams_server_received_total", frozenset())] > before[("tstreams_server_received_total",
                                                                                 frozenset())]
        # IDs are shown as the times they stand for: a float holds those exactly to the
        # millisecond, whatever the counter part of the ID (a raw 64-bit ID would not fit).
        head = ("tstreams_partition_head_timestamp_seconds", frozenset({"stream": "s", "partition": "1"}.items()))
        assert after[head] == txn_millis(ids[-1]) / 1000
        lag = frozenset({"stream": "s", "consumer": "c", "partition": "1"}.items())
        assert after[("tstreams_consumer_lag_transactions", lag)] == 3
        assert after[("tstreams_consumer_offset_timestamp_seconds", lag)] == txn_millis(ids[0]) / 1000
        assert not any(name.startswith("tstreams_cluster") for name, _ in after)  # no cluster here
        engine.close()


def test_items_expired_unread_are_counted_per_consumer(tmp_path: Path) -> None:
    """Issue 19 item 23: input TTL deleted before a consumer read it shows in ``/metrics`` per
    stream, consumer and partition (a counter), as in ``tstreams consumers describe``."""
    port = free_port()
    with ServeProcess(tmp_path / "data", tmp_path, extra_args=["--http", f"127.0.0.1:{port}"]) as server:
        engine = server.connect(timeout=10)
        engine.create_stream("s", partitions=2, ttl=1)
        producer = engine.producer("s")
        first = producer.instant([b"a", b"b"], partition=0)
        producer.instant([b"c", b"d", b"e"], partition=0)
        slow = engine.consumer("s", "slow")
        assert slow.get_transaction(0).id == first
        slow.checkpoint()

        def gone() -> bool:
            engine.compact()
            return all(p.checkpointed == 0 and p.expired == 0 for p in engine.backend.describe_partitions("s"))

        eventually(gone, timeout=30, interval=0.2)
        labels = {"stream": "s", "consumer": "slow"}
        after = scrape(port)
        assert after[("tstreams_consumer_expired_unread_items_total",
                      frozenset({**labels, "partition": "0"}.items()))] == 3
        assert after[("tstreams_consumer_expired_unread_items_total",
                      frozenset({**labels, "partition": "1"}.items()))] == 0
        engine.close()


@pytest.mark.parametrize("txn_id", [179572525011700001, 179572525011799999, 2**63 - 1, 0])
def test_id_times_survive_the_float_sample(txn_id: int) -> None:
    """A sample is a float: the time of any ID round-trips exactly through the text format."""
    from tstreams_embedded.net.metrics import id_seconds

    text = f"x {id_seconds(txn_id)!r}\n"
    [sample] = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert round(sample.value * 1000) == txn_millis(txn_id)


@pytest.mark.parametrize("bad", ["8000", ":8000", "host:", "host:port", "host:99999", ""])
def test_bad_http_address_is_refused(bad: str) -> None:
    with pytest.raises(errors.InvalidArgument, match="host:port"):
        parse_http(bad)
