"""Batch reads: every startingOffsets/endingOffsets form, value formats, splitting, open txns."""

from __future__ import annotations

import datetime as dt
import json
import time

import msgpack
import pytest
from spark_helpers import fill, read_direct

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol import ops as O


def _read(spark, data_dir, stream="s", **options):
    reader = spark.read.format("tstreams").option("path", str(data_dir)).option("stream", stream)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _rows(df):
    return sorted((r.partition, r.txn_id, r.seq, bytes(r.value)) for r in df.collect())


def test_read_everything_matches_the_engine(spark, engine, data_dir):
    fill(engine, "s", txns=12, items=7, partitions=3)
    df = _read(spark, data_dir)
    assert [f.name for f in df.schema.fields] == ["stream", "partition", "txn_id", "txn_time", "seq", "value"]
    assert df.schema["value"].dataType.simpleString() == "binary"
    rows = df.collect()
    assert sorted((r.partition, r.txn_id, r.seq, bytes(r.value)) for r in rows) == sorted(read_direct(engine, "s"))
    assert len(rows) == 84
    assert {r.stream for r in rows} == {"s"}
    for r in rows[:5]:
        assert r.txn_time.replace(tzinfo=dt.timezone.utc) == ts.txn_time(r.txn_id)


def test_starting_offsets_oldest_and_newest(spark, engine, data_dir):
    fill(engine, "s", txns=6, items=2, partitions=2)
    assert _read(spark, data_dir, startingOffsets="oldest").count() == 12
    assert _read(spark, data_dir, startingOffsets="earliest").count() == 12
    # "newest": only transactions opened after the read is planned -> nothing in a batch read.
    assert _read(spark, data_dir, startingOffsets="newest").count() == 0


def test_starting_offsets_datetime(spark, engine, data_dir):
    before = fill(engine, "s", txns=4, items=3, partitions=2, prefix="early")
    time.sleep(0.05)
    cut = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.05)
    after = fill(engine, "s", txns=4, items=3, prefix="late")
    assert max(t for _, t, _ in before) < ts.txn_id_at(cut) <= min(t for _, t, _ in after)
    df = _read(spark, data_dir, startingOffsets=cut.isoformat())
    assert sorted(bytes(r.value) for r in df.collect()) == sorted(v for _, _, vs in after for v in vs)
    # A naive ISO datetime means UTC, and "Z" is accepted.
    naive = cut.replace(tzinfo=None).isoformat()
    assert _read(spark, data_dir, startingOffsets=naive).count() == 12
    assert _read(spark, data_dir, startingOffsets=naive + "Z").count() == 12
    # As an ending offset: only what was opened before the time.
    df = _read(spark, data_dir, endingOffsets=cut.isoformat())
    assert sorted(bytes(r.value) for r in df.collect()) == sorted(v for _, _, vs in before for v in vs)


def test_starting_and_ending_offsets_json_map(spark, engine, data_dir):
    txns = fill(engine, "s", txns=10, items=2, partitions=2)
    p0 = [t for p, t, _ in txns if p == 0]
    p1 = [t for p, t, _ in txns if p == 1]
    # Offsets are the last transaction already processed: start after p0[1], p1 from the start.
    df = _read(spark, data_dir, startingOffsets=json.dumps({"0": p0[1], "1": "oldest"}))
    got = {(r.partition, r.txn_id) for r in df.collect()}
    assert got == {(0, t) for t in p0[2:]} | {(1, t) for t in p1}
    # Ending offsets are inclusive; partitions not listed read to the end.
    df = _read(spark, data_dir, startingOffsets=json.dumps({"0": p0[0]}), endingOffsets=json.dumps({"0": p0[3]}))
    got = {(r.partition, r.txn_id) for r in df.collect()}
    assert got == {(0, t) for t in p0[1:4]} | {(1, t) for t in p1}
    # An ending offset before the start gives nothing for that partition.
    df = _read(spark, data_dir, startingOffsets=json.dumps({"1": p1[3]}), endingOffsets=json.dumps({"1": p1[2]}),
               partitions="1")
    assert df.count() == 0


def test_partitions_option(spark, engine, data_dir):
    fill(engine, "s", txns=9, items=1, partitions=3)
    df = _read(spark, data_dir, partitions="0, 2")
    assert sorted({r.partition for r in df.collect()}) == [0, 2]
    assert df.count() == 6


def test_split_into_chunks_without_cutting_transactions(spark, engine, data_dir):
    txns = fill(engine, "s", txns=20, items=5, partitions=2)
    df = _read(spark, data_dir, rowsPerSplit="12")
    # 10 txns x 5 items per partition, chunks of >= 12 rows at txn boundaries -> 15, 15, 15, 5.
    assert df.rdd.getNumPartitions() == 8
    from pyspark.sql import functions as F

    per_task = (df.withColumn("task", F.spark_partition_id()).groupBy("task", "partition", "txn_id")
                .count().collect())
    assert all(r["count"] == 5 for r in per_task)  # every transaction read whole by one task
    assert len({(r.partition, r.txn_id) for r in per_task}) == len(txns) == len(per_task)
    assert df.count() == 100


def test_read_stops_at_an_open_transaction(spark, engine, data_dir):
    fill(engine, "s", txns=2, items=2, partitions=1, prefix="a")
    backend = engine.backend
    (open_id,) = backend.submit([O.Open("s", 0, 60_000)])
    backend.submit([O.Data("s", 0, open_id, O.pack_items([b"pending"]))])
    fill(engine, "s", txns=2, items=2, prefix="b")
    # Only checkpointed transactions, and never past an open one (consumer order).
    assert sorted(bytes(r.value) for r in _read(spark, data_dir).collect()) == sorted(
        [b"a-0-0", b"a-0-1", b"a-1-0", b"a-1-1"])
    backend.submit([O.Checkpoint("s", 0, open_id)])
    values = [bytes(r.value) for r in _read(spark, data_dir).orderBy("txn_id", "seq").collect()]
    assert values == [b"a-0-0", b"a-0-1", b"a-1-0", b"a-1-1", b"pending", b"b-0-0", b"b-0-1", b"b-1-0", b"b-1-1"]


def test_cancelled_transactions_are_skipped(spark, engine, data_dir):
    fill(engine, "s", txns=1, items=1, partitions=1, prefix="a")
    backend = engine.backend
    (tid,) = backend.submit([O.Open("s", 0, 60_000)])
    backend.submit([O.Data("s", 0, tid, O.pack_items([b"never"]))])
    backend.submit([O.Cancel("s", 0, tid)])
    fill(engine, "s", txns=1, items=1, prefix="b")
    assert sorted(bytes(r.value) for r in _read(spark, data_dir).collect()) == [b"a-0-0", b"b-0-0"]


def test_value_formats(spark, engine, data_dir):
    engine.create_stream("s", partitions=1)
    producer = engine.producer("s")
    docs = [{"page": "/a", "n": 1}, {"page": "/ü", "n": 2, "tags": ["x"]}]
    producer.instant([json.dumps(d).encode() for d in docs])
    as_string = _read(spark, data_dir, valueFormat="string")
    assert as_string.schema["value"].dataType.simpleString() == "string"
    assert [json.loads(r.value) for r in as_string.orderBy("seq").collect()] == docs
    as_json = _read(spark, data_dir, valueFormat="json")
    from pyspark.sql import functions as F

    parsed = as_json.select(F.from_json("value", "page string, n int").alias("j")).select("j.*").orderBy("n")
    assert [(r.page, r.n) for r in parsed.collect()] == [("/a", 1), ("/ü", 2)]

    engine.create_stream("m", partitions=1)
    engine.producer("m").instant([msgpack.packb(d) for d in docs] + [msgpack.packb({"raw": b"\x00\xff"})])
    got = [json.loads(r.value) for r in _read(spark, data_dir, stream="m", valueFormat="msgpack")
           .orderBy("seq").collect()]
    assert got[:2] == docs
    assert got[2] == {"raw": "AP8="}  # bytes that are not UTF-8 become base64


@pytest.mark.parametrize("fmt,payload", [("string", b"\xff\xfe"), ("json", b"{not json"), ("msgpack", b"\xc1")])
def test_unreadable_values_name_the_option(spark, engine, data_dir, fmt, payload):
    engine.create_stream("s", partitions=1)
    engine.producer("s").instant([payload])
    with pytest.raises(Exception, match=f"option 'valueFormat'='{fmt}'"):
        _read(spark, data_dir, valueFormat=fmt).collect()


def test_empty_stream(spark, engine, data_dir):
    engine.create_stream("s", partitions=3)
    assert _read(spark, data_dir).count() == 0


def test_fixed_and_varying_size_chunks_across_batches_match_the_engine(spark, engine, data_dir):
    """Enough rows for several Arrow batches per task, from chunks of fixed-size items (copied
    straight from LMDB into Arrow) mixed with chunks of varying sizes (decoded by msgpack)."""
    import zlib

    from pyspark.sql import functions as F

    engine.create_stream("mixed", partitions=2)
    producer = engine.producer("mixed")
    want = []
    for t in range(90):
        n = 3000 if t % 3 else 40
        if t % 2:
            items = [b"%08d" % (t * 10_000 + i) + b"." * 30 for i in range(n)]  # one length
        else:
            items = [b"x" * (i % 300) for i in range(n)]  # lengths 0..299: bin8 and bin16 headers
        txn_id = producer.instant(items, partition=t % 2)
        want.extend((txn_id, seq, v) for seq, v in enumerate(items))
    df = _read(spark, data_dir, stream="mixed")
    got = df.agg(F.count("*").alias("n"), F.sum("seq").alias("seqs"), F.sum(F.length("value")).alias("bytes"),
                 F.sum(F.crc32(F.col("value")) * F.col("seq")).alias("crc"),
                 F.sum((F.col("txn_id") % 1_000_003) * F.col("seq")).alias("ids")).first()
    assert got.n == len(want) > 2 * 65_536
    assert got.seqs == sum(s for _, s, _ in want)
    assert got.bytes == sum(len(v) for _, _, v in want)
    assert got.crc == sum(zlib.crc32(v) * s for _, s, v in want)
    assert got.ids == sum((t % 1_000_003) * s for t, s, _ in want)
    first = df.where(F.col("seq") == 0).orderBy("txn_id").select("txn_id", "value").collect()
    assert [(r.txn_id, bytes(r.value)) for r in first] == sorted((t, v) for t, s, v in want if s == 0)


def test_malformed_json_items_are_kept_aside_with_the_recipe_of_spark_md(spark, engine, data_dir):
    """docs/SPARK.md, "Malformed items": read binary, parse in Spark; bad items do not fail
    the query and keep their raw value."""
    from pyspark.sql import functions as F

    engine.create_stream("orders", partitions=2)
    items = [b'{"id": 1, "amount": 2.5}', b"not json", b"\xff\xfe", b'{"id": 2, "amount": 4.0}', b'{"id": 3']
    txn_id = engine.producer("orders").instant(items, partition=1)
    with pytest.raises(Exception, match="option 'valueFormat'='json': .* is not JSON"):
        _read(spark, data_dir, "orders", valueFormat="json").collect()  # strict on purpose

    raw = _read(spark, data_dir, "orders")
    text = F.col("value").cast("string")
    rows = raw.select("partition", "txn_id", "seq", "value",
                      F.expr("try_parse_json(CAST(value AS STRING))").isNull().alias("malformed"),
                      F.from_json(text, "id long, amount double").alias("order"))
    good = rows.where(~F.col("malformed")).select("partition", "txn_id", "seq", "order.*")
    corrupt = rows.where(F.col("malformed")).select("partition", "txn_id", "seq", "value")
    assert sorted(tuple(r) for r in good.collect()) == [(1, txn_id, 0, 1, 2.5), (1, txn_id, 3, 2, 4.0)]
    assert sorted((r.seq, bytes(r.value)) for r in corrupt.collect()) == [(1, b"not json"), (2, b"\xff\xfe"),
                                                                           (4, b'{"id": 3')]


def test_mode_permissive_and_drop_malformed(spark, engine, data_dir):
    engine.create_stream("orders", partitions=2)
    items = [b'{"id": 1}', b"not json", b"\xff\xfe", b'{"id": 2}']
    txn_id = engine.producer("orders").instant(items, partition=1)

    kept = _read(spark, data_dir, "orders", valueFormat="json", mode="PERMISSIVE")
    assert kept.columns == ["stream", "partition", "txn_id", "txn_time", "seq", "value", "_corrupt_record"]
    assert sorted((r.seq, r.value, r._corrupt_record) for r in kept.collect()) == [
        (0, '{"id": 1}', None), (1, None, bytearray(b"not json")), (2, None, bytearray(b"\xff\xfe")),
        (3, '{"id": 2}', None)]
    named = _read(spark, data_dir, "orders", valueFormat="string", mode="permissive",
                  columnNameOfCorruptRecord="raw")
    assert [(r.seq, r.raw) for r in named.where("raw IS NOT NULL").collect()] == [(2, bytearray(b"\xff\xfe"))]

    dropped = _read(spark, data_dir, "orders", valueFormat="json", mode="dropMalformed")
    assert sorted((r.txn_id, r.seq, r.value) for r in dropped.collect()) == [(txn_id, 0, '{"id": 1}'),
                                                                             (txn_id, 3, '{"id": 2}')]
