"""Structured Streaming: offsets, maxRowsPerTrigger, availableNow, live pick-up, and the
exactly-once sink crashing in commit (before and after the engine write)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from spark_helpers import fill, read_direct

from tstreams_embedded.spark import sink_marker_key
from tstreams_embedded.testing import eventually


def _stream(spark, data_dir, stream="s", **options):
    reader = spark.readStream.format("tstreams").option("path", str(data_dir)).option("stream", stream)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


class Collector:
    """foreachBatch target that records every micro-batch (runs in this process)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[int, int, bytes]]]] = []
        self.lock = threading.Lock()

    def __call__(self, df, batch_id: int) -> None:
        rows = [(r.partition, r.txn_id, bytes(r.value)) for r in df.collect()]
        with self.lock:
            self.batches.append((batch_id, rows))

    def rows(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return [r for _, rows in self.batches for r in rows]


def _last_offset(checkpoint: Path) -> dict:
    offsets = checkpoint / "offsets"
    last = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return json.loads(last.read_text().strip().splitlines()[-1])


def test_max_rows_per_trigger_whole_transactions(spark, engine, data_dir, tmp_path):
    txns = fill(engine, "s", txns=20, items=10, partitions=2)
    big = engine.producer("s").instant([f"big-{i}".encode() for i in range(40)], partition=1)
    collector = Collector()
    ck = tmp_path / "ck"
    q = (_stream(spark, data_dir, maxRowsPerTrigger="25").writeStream.foreachBatch(collector)
         .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    sizes = [len(rows) for _, rows in collector.batches if rows]
    # Whole transactions only: 10-item txns two per batch, the 40-item txn alone (over the cap).
    assert sizes == [20] * 10 + [40]
    for _, rows in collector.batches:
        per_txn: dict[tuple[int, int], int] = {}
        for p, t, _ in rows:
            per_txn[p, t] = per_txn.get((p, t), 0) + 1
        assert all(n in (10, 40) for n in per_txn.values())
    expected = sorted(v for _, _, vs in txns for v in vs) + sorted(f"big-{i}".encode() for i in range(40))
    assert sorted(v for *_, v in collector.rows()) == sorted(expected)
    # The oldest transactions go first across partitions (IDs are time-based).
    first = [t for _, t, _ in collector.batches[0][1]]
    assert set(first) == {txns[0][1], txns[1][1]}
    # Offsets: {"<partition>": last txn id}, sorted string keys, at transaction boundaries.
    offset = _last_offset(ck)
    assert list(offset) == ["0", "1"]
    assert offset == {"0": max(t for p, t, _ in txns if p == 0), "1": big}


def test_new_transactions_are_picked_up_within_the_trigger(spark, engine, data_dir, tmp_path):
    engine.create_stream("s", partitions=2)
    collector = Collector()
    q = (_stream(spark, data_dir, startingOffsets="newest").writeStream.foreachBatch(collector)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="500 milliseconds").start())
    try:
        eventually(lambda: q.recentProgress, 120, 0.1, message="the query's first trigger")
        producer = engine.producer("s")
        sent = []
        for i in range(3):
            values = [f"live-{i}-{j}".encode() for j in range(4)]
            producer.instant(values)
            sent.extend(values)
            want = sorted(sent)
            eventually(lambda w=want: sorted(v for *_, v in collector.rows()) == w, 120, 0.05,
                       message=lambda w=want: f"the rows {sorted(v for *_, v in collector.rows())} reach {w}")
    finally:
        q.stop()


def test_stream_waits_at_an_open_transaction(spark, engine, data_dir, tmp_path):
    from tstreams_embedded.engine.protocol import ops as O

    fill(engine, "s", txns=2, items=1, partitions=1, prefix="a")
    backend = engine.backend
    (tid,) = backend.submit([O.Open("s", 0, 60_000)])
    backend.submit([O.Data("s", 0, tid, O.pack_items([b"late"]))])
    fill(engine, "s", txns=1, items=1, prefix="b")
    collector = Collector()
    ck = str(tmp_path / "ck")
    q = _stream(spark, data_dir).writeStream.foreachBatch(collector).option("checkpointLocation", ck) \
        .trigger(availableNow=True).start()
    q.awaitTermination(300)
    assert sorted(v for *_, v in collector.rows()) == [b"a-0-0", b"a-1-0"]
    backend.submit([O.Checkpoint("s", 0, tid)])
    q = _stream(spark, data_dir).writeStream.foreachBatch(collector).option("checkpointLocation", ck) \
        .trigger(availableNow=True).start()
    q.awaitTermination(300)
    assert [v for *_, v in collector.rows()] == [b"a-0-0", b"a-1-0", b"late", b"b-0-0"]


def _sink_query(spark, data_dir, ck, fmt="tstreams", trigger_rows="30", **sink_options):
    df = _stream(spark, data_dir, maxRowsPerTrigger=trigger_rows).selectExpr("partition", "value")
    w = df.writeStream.format(fmt).option("path", str(data_dir)).option("stream", "out") \
        .option("checkpointLocation", str(ck))
    for k, v in sink_options.items():
        w = w.option(k, v)
    return w.trigger(availableNow=True).start()


def test_exactly_once_sink_end_to_end(spark, engine, data_dir, tmp_path):
    txns = fill(engine, "s", txns=12, items=10, partitions=2)
    engine.create_stream("out", partitions=2)
    ck = tmp_path / "ck"
    q = _sink_query(spark, data_dir, ck)
    q.awaitTermination(300)
    assert q.exception() is None
    out = read_direct(engine, "out")
    assert sorted((p, v) for p, _, _, v in out) == sorted((p, v) for p, _, vs in txns for v in vs)
    # The marker records the last committed batch, keyed by the checkpoint location.
    marker = engine.backend.get_marker(sink_marker_key("out", f"checkpoint:{ck}"))
    assert marker == max(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit())


@pytest.mark.parametrize("when", ["before", "after"])
def test_sink_crash_in_commit_then_restart(spark, engine, data_dir, tmp_path, when):
    import crashing_sink
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(crashing_sink)
    spark.dataSource.register(crashing_sink.CrashingDataSource)

    txns = fill(engine, "s", txns=12, items=10, partitions=2)
    engine.create_stream("out", partitions=2)
    ck = tmp_path / "ck"
    once = tmp_path / "crashed"
    q = _sink_query(spark, data_dir, ck, fmt="tstreams_crashing", crashAt=f"{when}:2", crashOnce=str(once),
                    stagingTtl="5")
    with pytest.raises(Exception, match="injected crash"):
        q.awaitTermination(300)
    assert once.exists()
    marker_key = sink_marker_key("out", f"checkpoint:{ck}")
    assert engine.backend.get_marker(marker_key) == (2 if when == "after" else 1)
    # Spark did not record batch 2 in its commit log: it will replay it.
    assert not (ck / "commits" / "2").exists()
    # Spark called abort: the staged rows of the failed commit are cancelled, not left open
    # (and after a commit that went through, abort undid nothing).
    assert not any(engine.backend.fetch("out", p, 0, 1000).blocked for p in (0, 1))
    # Batches of 3 transactions (30 rows): 0 and 1 committed, plus 2 when the crash came after.
    assert len(read_direct(engine, "out")) == (90 if when == "after" else 60)
    q = _sink_query(spark, data_dir, ck, fmt="tstreams_crashing", crashAt=f"{when}:2", crashOnce=str(once),
                    stagingTtl="5")
    q.awaitTermination(300)
    assert q.exception() is None
    out = read_direct(engine, "out", wait_unblocked=30)
    got = sorted((p, v) for p, _, _, v in out)
    want = sorted((p, v) for p, _, vs in txns for v in vs)
    assert len(got) == len(want)  # no duplicates ...
    assert got == want  # ... and nothing lost
    assert engine.backend.get_marker(marker_key) >= 3


def test_sink_refuses_a_reset_checkpoint(spark, engine, data_dir, tmp_path):
    import shutil

    fill(engine, "s", txns=8, items=10, partitions=2)
    engine.create_stream("out", partitions=2)
    ck = tmp_path / "ck"
    q = _sink_query(spark, data_dir, ck)
    q.awaitTermination(300)
    shutil.rmtree(ck)  # the checkpoint is lost, the marker stays: batches would be skipped
    q = _sink_query(spark, data_dir, ck)
    with pytest.raises(Exception, match="checkpointLocation was reset"):
        q.awaitTermination(300)
    assert len(read_direct(engine, "out", wait_unblocked=10)) == 80


def test_sink_producer_id_without_checkpoint_option(spark, engine, data_dir, tmp_path):
    fill(engine, "s", txns=4, items=5, partitions=1)
    engine.create_stream("out", partitions=1)
    df = _stream(spark, data_dir).selectExpr("value")
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "root"))
    try:
        with pytest.raises(Exception, match="option 'producerId'"):
            q = df.writeStream.format("tstreams").option("path", str(data_dir)).option("stream", "out") \
                .queryName("no_ck").trigger(availableNow=True).start()
            q.awaitTermination(300)
        q = df.writeStream.format("tstreams").option("path", str(data_dir)).option("stream", "out") \
            .option("producerId", "job-42").queryName("with_id").trigger(availableNow=True).start()
        q.awaitTermination(300)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert len(read_direct(engine, "out")) == 20
    assert engine.backend.get_marker(sink_marker_key("out", "job-42")) is not None


def test_a_stream_write_to_a_missing_stream_fails_before_any_upstream_work(spark, engine, data_dir, tmp_path):
    from pyspark.sql import functions as F

    fill(engine, "s", txns=4, items=5, partitions=2)
    marks = tmp_path / "marks"
    marks.mkdir()
    where = str(marks)

    @F.udf("string", useArrow=False)
    def mark(value):
        import os
        import uuid

        open(os.path.join(where, uuid.uuid4().hex), "w").close()
        return value

    df = _stream(spark, data_dir).select(mark(F.col("value").cast("string")).alias("value"))
    with pytest.raises(Exception, match="option 'stream': stream 'nope' at path .* does not exist; create it first"):
        q = df.writeStream.format("tstreams").option("path", str(data_dir)).option("stream", "nope") \
            .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
        q.awaitTermination(300)
        raise AssertionError(f"the query ended without the error: {q.exception()}")
    assert list(marks.iterdir()) == []  # the upstream never ran


def test_a_stream_read_in_mode_permissive_keeps_malformed_items_aside(spark, engine, data_dir, tmp_path):
    engine.create_stream("s", partitions=1)
    engine.producer("s").instant([b'{"a": 1}', b"{oops", b"[2]"])
    rows: list[tuple] = []

    def collect(df, batch_id: int) -> None:
        rows.extend((r.seq, r.value, r._corrupt_record) for r in df.collect())

    q = (_stream(spark, data_dir, valueFormat="json", mode="permissive").writeStream.foreachBatch(collect)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    assert sorted(rows) == [(0, '{"a": 1}', None), (1, None, bytearray(b"{oops")), (2, "[2]", None)]
