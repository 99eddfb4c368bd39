"""Batch writes: all-or-nothing visibility, partition column, read back."""

from __future__ import annotations

import pytest
from spark_helpers import read_direct


def _writer(df, data_dir, stream, **options):
    w = df.write.format("tstreams").mode("append").option("path", str(data_dir)).option("stream", stream)
    for k, v in options.items():
        w = w.option(k, v)
    return w


def test_write_then_read_back(spark, engine, data_dir):
    engine.create_stream("out", partitions=3)
    df = spark.createDataFrame([(f"row-{i}",) for i in range(1000)], "value string").repartition(4)
    _writer(df, data_dir, "out", txnSize="100").save()
    items = read_direct(engine, "out")
    assert sorted(v for *_, v in items) == sorted(f"row-{i}".encode() for i in range(1000))
    # Rows spread over every partition, in transactions of at most txnSize items.
    assert {p for p, *_ in items} == {0, 1, 2}
    per_txn: dict[tuple[int, int], int] = {}
    for p, tid, _, _ in items:
        per_txn[p, tid] = per_txn.get((p, tid), 0) + 1
    assert max(per_txn.values()) <= 100
    # And through Spark.
    back = spark.read.format("tstreams").option("path", str(data_dir)).option("stream", "out") \
        .option("valueFormat", "string").load()
    assert sorted(r.value for r in back.collect()) == sorted(f"row-{i}" for i in range(1000))


def test_partition_column_and_binary_values(spark, engine, data_dir):
    engine.create_stream("out", partitions=4)
    rows = [(i % 4, bytes([i % 256, 1])) for i in range(200)]
    df = spark.createDataFrame(rows, "partition int, value binary")
    _writer(df, data_dir, "out").save()
    got = sorted((p, v) for p, _, _, v in read_direct(engine, "out"))
    assert got == sorted(rows)


def test_copy_a_stream_with_spark(spark, engine, data_dir):
    engine.create_stream("src", partitions=2)
    engine.create_stream("dst", partitions=2)
    producer = engine.producer("src")
    for i in range(10):
        producer.instant([f"{i}-{j}".encode() for j in range(3)], partition=i % 2)
    src = spark.read.format("tstreams").option("path", str(data_dir)).option("stream", "src").load()
    _writer(src.select("partition", "value"), data_dir, "dst").save()
    assert sorted((p, v) for p, _, _, v in read_direct(engine, "dst")) == \
        sorted((p, v) for p, _, _, v in read_direct(engine, "src"))


def test_failed_job_leaves_nothing_visible(spark, engine, data_dir):
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    engine.create_stream("out", partitions=2)

    @F.udf(StringType(), useArrow=False)
    def explode_late(v):
        if v == "row-1999":
            raise RuntimeError("boom in the last task")
        return v

    df = spark.createDataFrame([(f"row-{i}",) for i in range(2000)], "value string").repartition(4, "value")
    with pytest.raises(Exception, match="boom in the last task"):
        _writer(df.select(explode_late("value").alias("value")), data_dir, "out", txnSize="50").save()
    # Nothing visible, and nothing left open in front of later writes.
    engine.producer("out").instant([b"after"], partition=0)
    engine.producer("out").instant([b"after"], partition=1)
    assert [v for *_, v in read_direct(engine, "out")] == [b"after", b"after"]
    info = engine.backend
    for p in (0, 1):
        assert not info.fetch("out", p, 0, 10).blocked


def test_staged_rows_are_invisible_until_the_job_commits(spark, engine, data_dir):
    """A probe running inside the job, after another task staged rows, sees none of them."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    engine.create_stream("out", partitions=1)
    path = str(data_dir)

    @F.udf(StringType(), useArrow=False)
    def probe(v):
        if v != "probe":
            return v
        import tstreams_embedded as ts
        from tstreams_embedded.testing import eventually

        with ts.open(path) as e:
            eventually(lambda: e.backend.last_txn_id("out", 0) > 0, 60, 0.02,
                       message="the other task staged rows")
            f = e.backend.fetch("out", 0, 0, 100)
            return f"probe staged={e.backend.last_txn_id('out', 0) > 0} visible={len(f.txns)} blocked={f.blocked}"

    rows = [(f"a{i}",) for i in range(500)] + [("probe",)]
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 2), "value string")
    assert df.rdd.getNumPartitions() == 2
    _writer(df.select(probe("value").alias("value")), data_dir, "out", txnSize="10").save()
    values = [v.decode() for *_, v in read_direct(engine, "out")]
    assert len(values) == 501
    assert [v for v in values if v.startswith("probe")] == ["probe staged=True visible=0 blocked=True"]
    assert not engine.backend.fetch("out", 0, 0, 1).blocked
    back = spark.read.format("tstreams").option("path", path).option("stream", "out").load()
    assert back.count() == 501


def test_overwrite_mode_is_rejected(spark, engine, data_dir):
    engine.create_stream("out", partitions=1)
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("tstreams").mode("overwrite").option("path", str(data_dir)).option("stream", "out").save()


def test_missing_value_column(spark, engine, data_dir):
    engine.create_stream("out", partitions=1)
    df = spark.createDataFrame([("x",)], "payload string")
    with pytest.raises(Exception, match="column 'value'"):
        _writer(df, data_dir, "out").save()


def test_partition_column_out_of_range(spark, engine, data_dir):
    engine.create_stream("out", partitions=2)
    df = spark.createDataFrame([(5, "x")], "partition int, value string")
    with pytest.raises(Exception, match="column 'partition': partition 5 is out of range"):
        _writer(df, data_dir, "out").save()
    assert read_direct(engine, "out") == []


def _marking_upstream(spark, marks):
    """A DataFrame whose rows each leave a file in ``marks`` when computed (upstream work)."""
    from pyspark.sql import functions as F

    where = str(marks)

    @F.udf("string", useArrow=False)
    def mark(value):
        import os
        import uuid

        open(os.path.join(where, uuid.uuid4().hex), "w").close()
        return value

    return spark.range(20).select(mark(F.col("id").cast("string")).alias("value"))


def test_a_write_to_a_missing_stream_fails_at_planning_before_any_upstream_work(spark, engine, data_dir, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    with pytest.raises(Exception, match="option 'stream': stream 'nope' at path .* does not exist; create it first"):
        _writer(_marking_upstream(spark, marks), data_dir, "nope").save()
    assert list(marks.iterdir()) == []  # the upstream never ran
    engine.create_stream("nope")
    _writer(_marking_upstream(spark, marks), data_dir, "nope").save()
    assert len(read_direct(engine, "nope")) == 20 and len(list(marks.iterdir())) == 20
