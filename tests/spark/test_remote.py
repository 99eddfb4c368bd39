"""The same reads and writes through a remote ``tstreams serve`` (option ``endpoint``):
this is how Spark executors on other hosts reach the data."""

from __future__ import annotations

from pathlib import Path

import pytest
from spark_helpers import read_direct

import tstreams_embedded as ts
from tstreams_embedded.spark import sink_marker_key
from tstreams_embedded.testing import ServeProcess, free_port


@pytest.fixture
def server(tmp_path: Path):
    """``tstreams serve`` on a free loopback port; stopped by PID at the end."""
    data = tmp_path / "served"
    with ServeProcess(data, tmp_path) as srv:
        yield srv.endpoint, data


def test_batch_and_streaming_through_a_remote_server(spark, server, tmp_path):
    endpoint, data = server
    remote = ts.connect(endpoint)
    try:
        remote.create_stream("in", partitions=2)
        remote.create_stream("out", partitions=2)
        producer = remote.producer("in")
        sent = []
        for i in range(10):
            values = [f"r-{i}-{j}".encode() for j in range(7)]
            producer.instant(values, partition=i % 2)
            sent.extend(values)

        # Batch read through the endpoint.
        df = spark.read.format("tstreams").option("endpoint", endpoint).option("stream", "in") \
            .option("valueFormat", "string").load()
        assert sorted(r.value.encode() for r in df.collect()) == sorted(sent)

        # Streaming read + exactly-once sink, both remote.
        ck = tmp_path / "ck"
        q = (spark.readStream.format("tstreams").option("endpoint", endpoint).option("stream", "in")
             .option("maxRowsPerTrigger", "14").load().select("partition", "value")
             .writeStream.format("tstreams").option("endpoint", endpoint).option("stream", "out")
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        q.awaitTermination(300)
        assert q.exception() is None
        out = read_direct(remote, "out")
        assert sorted(v for *_, v in out) == sorted(sent)
        assert remote.backend.get_marker(sink_marker_key("out", f"checkpoint:{ck}")) == 4  # 5 batches

        # Batch write through the endpoint.
        spark.createDataFrame([("w1",), ("w2",)], "value string").write.format("tstreams") \
            .mode("append").option("endpoint", endpoint).option("stream", "out").save()
        assert sorted(v for *_, v in read_direct(remote, "out")) == sorted(sent + [b"w1", b"w2"])
    finally:
        remote.close()
    # The server wrote to its own directory: the same data is there embedded.
    assert data.is_dir()


def test_unreachable_endpoint_fails_clearly(spark):
    port = free_port()
    df = spark.read.format("tstreams").option("endpoint", f"tcp://127.0.0.1:{port}").option("stream", "x") \
        .option("timeout", "2").load()
    with pytest.raises(Exception, match="(?i)timed out|unreachable|not reach|connection"):
        df.collect()
