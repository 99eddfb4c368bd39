"""``/metrics`` of a single-node ``tstreams serve --http`` (a real server process), parsed
with prometheus-client's own parser: the values move with real traffic."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tstreams_embedded import errors
from tstreams_embedded.net.serve import parse_http
from tstreams_embedded.testing import ServeProcess, free_port

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
        assert after[("tstreams_server_received_total", frozenset())] > before[("tstreams_server_received_total",
                                                                                 frozenset())]
        head = ("tstreams_partition_head_id", frozenset({"stream": "s", "partition": "1"}.items()))
        assert after[head] == ids[-1]
        lag = frozenset({"stream": "s", "consumer": "c", "partition": "1"}.items())
        assert after[("tstreams_consumer_lag_transactions", lag)] == 3
        assert after[("tstreams_consumer_offset_id", lag)] == ids[0]
        assert not any(name.startswith("tstreams_cluster") for name, _ in after)  # no cluster here
        engine.close()


@pytest.mark.parametrize("bad", ["8000", ":8000", "host:", "host:port", "host:99999", ""])
def test_bad_http_address_is_refused(bad: str) -> None:
    with pytest.raises(errors.InvalidArgument, match="host:port"):
        parse_http(bad)
