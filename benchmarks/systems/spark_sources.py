"""The Spark suite's systems: our connector, Parquet, a Python data source floor, JSON files.

One ``local[2]`` SparkSession serves every system; the data (N rows in the engine and the
same rows as Parquet files, the demo's events in the engine and as JSON-lines files) is
written once per working directory by :class:`SparkData`, during set-up.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.systems.base import Outcome, System
from tstreams_embedded.engine.protocol.iteration import iter_transactions

TXN_ITEMS = 1_000
PARTITIONS = 4
MAX_ROWS = 25_000
START = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)

_SESSION: list[Any] = []
_DATA: dict[Path, SparkData] = {}


def session():  # noqa: ANN201 - a pyspark SparkSession
    """The suite's SparkSession (created on first use, stopped by :func:`stop_session`)."""
    if not _SESSION:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from tstreams_embedded.demo.job import session as demo_session

        spark = demo_session("tstreams-bench")
        spark.dataSource.register(_floor_source())
        _SESSION.append(spark)
    return _SESSION[0]


def stop_session() -> None:
    while _SESSION:
        _SESSION.pop().stop()


class SparkData:
    """The rows and events every Spark system reads, written once under ``base``."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.rows = self.events = 0
        self.expected_windows = 0
        self.scan_value: list | None = None

    @classmethod
    def at(cls, base: Path) -> SparkData:
        if base not in _DATA:
            _DATA[base] = cls(base)
        return _DATA[base]

    @property
    def engine_dir(self) -> Path:
        return self.base / "data"

    @property
    def parquet_dir(self) -> Path:
        return self.base / "parquet"

    @property
    def stream_dir(self) -> Path:
        return self.base / "stream-data"

    @property
    def events_dir(self) -> Path:
        return self.base / "events-json"

    def load_rows(self, rows: int) -> None:
        if not self.rows:
            _load_rows(self.engine_dir, self.parquet_dir, rows)
            self.rows = rows

    def load_events(self, events: int) -> None:
        if self.events:
            return
        import tstreams_embedded as ts
        from tstreams_embedded.demo.events import encode, flush_event, generate, true_counts

        self.expected_windows = len(true_counts(encode(e) for e in generate(events, START)))
        with ts.open(str(self.stream_dir)) as engine:
            engine.create_stream("pageviews", partitions=PARTITIONS)
            producer = engine.producer("pageviews")
            batch: list[bytes] = []
            p = 0
            for ev in generate(events, START):
                batch.append(encode(ev))
                if len(batch) == 500:
                    producer.instant(batch, partition=p)
                    p = (p + 1) % PARTITIONS
                    batch = []
            if batch:
                producer.instant(batch, partition=p)
            producer.instant([encode(flush_event(START + dt.timedelta(hours=2)))], partition=0)
        _write_event_files(self.events_dir, events, max(1, events // MAX_ROWS))
        self.events = events


def _scan(df) -> list:  # noqa: ANN001
    from pyspark.sql import functions as F

    r = df.agg(F.sum(F.length("value")).alias("b"), F.sum("seq").alias("s"), F.max("txn_id").alias("m")).first()
    return [r.b, r.s, r.m]


class _SparkSystem(System):
    """A system of the Spark suite: ``setup_*`` loads the shared data; ``run_*`` times one query."""

    runs = 0

    def open(self) -> None:
        self.spark = session()
        self.data = SparkData.at(self.workdir.parent)

    @classmethod
    def available(cls) -> str | None:
        import shutil

        try:
            import pyspark  # noqa: F401
        except ImportError as e:
            return f"pyspark is not installed: {e}"
        return None if shutil.which("java") else "java is not installed"

    def setup_count(self, rows: int, events: int) -> None:
        self.data.load_rows(rows)

    setup_scan = setup_count

    def setup_streaming(self, rows: int, events: int) -> None:
        self.data.load_events(events)

    def _timed(self, n: int, fn, check) -> Outcome:  # noqa: ANN001
        t0 = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - t0
        return Outcome(n, seconds, stored=n if check(value) else -1, expected=n, extra={"value": value})

    def expected_scan(self) -> list:
        """sum(length(value)), sum(seq), max(txn_id) of the loaded rows, computed from Parquet once."""
        if self.data.scan_value is None:
            self.data.scan_value = _scan(self.spark.read.parquet(str(self.data.parquet_dir)))
        return self.data.scan_value


class SparkTstreams(_SparkSystem):
    name = "spark-tstreams"
    label = "tstreams connector"
    description = 'spark.read / readStream .format("tstreams"), embedded path'
    is_ours = True

    def _df(self):  # noqa: ANN202
        return self.spark.read.format("tstreams").option("path", str(self.data.engine_dir)) \
            .option("stream", "bench").load()

    def run_count(self, rows: int, events: int) -> Outcome:
        return self._timed(rows, lambda: self._df().count(), lambda v: v == rows)

    def run_scan(self, rows: int, events: int) -> Outcome:
        want = self.expected_scan()
        return self._timed(rows, lambda: _scan(self._df()), lambda v: v == want)

    def run_streaming(self, rows: int, events: int) -> Outcome:
        import tstreams_embedded as ts
        from tstreams_embedded.demo.job import build_query

        i = type(self).runs = type(self).runs + 1
        data = self.data
        with ts.open(str(data.stream_dir)) as engine:
            engine.create_stream(f"counts-{i}", partitions=PARTITIONS)
        query = build_query(self.spark, path=str(data.stream_dir), input="pageviews", output=f"counts-{i}",
                            checkpoint=str(self.workdir / f"ck-{i}"), max_rows=MAX_ROWS, trigger="availableNow",
                            watermark="2 minutes", staging_ttl=60)
        t0 = time.perf_counter()
        query.start().awaitTermination()
        seconds = time.perf_counter() - t0
        with ts.open(str(data.stream_dir)) as engine:
            n = sum(len(t.items) for p in range(PARTITIONS)
                    for t in iter_transactions(engine.backend, f"counts-{i}", p))
        return Outcome(events, seconds, stored=events if n == data.expected_windows else -1, expected=events)


class SparkParquet(_SparkSystem):
    name = "spark-parquet"
    label = "Parquet files"
    description = "spark.read.parquet of the same rows and six columns"

    def run_count(self, rows: int, events: int) -> Outcome:
        return self._timed(rows, lambda: self.spark.read.parquet(str(self.data.parquet_dir)).count(),
                           lambda v: v == rows)

    def run_scan(self, rows: int, events: int) -> Outcome:
        want = self.expected_scan()
        return self._timed(rows, lambda: _scan(self.spark.read.parquet(str(self.data.parquet_dir))),
                           lambda v: v == want)


class SparkPythonFloor(_SparkSystem):
    name = "spark-python-floor"
    label = "Python data source ceiling (prebuilt Arrow batches, no storage)"
    description = "a Python data source yielding prebuilt Arrow batches of the same six columns and rows"

    def run_count(self, rows: int, events: int) -> Outcome:
        return self._timed(rows, lambda: self.spark.read.format("python_floor").option("rows", rows).load().count(),
                           lambda v: v == rows)


class SparkFiles(_SparkSystem):
    name = "spark-files"
    label = "JSON-lines files -> Parquet file sink"
    description = "readStream text files (maxFilesPerTrigger 1), the same query, Spark's exactly-once file sink"

    def run_streaming(self, rows: int, events: int) -> Outcome:
        from tstreams_embedded.demo.job import parse_events, window_counts

        i = type(self).runs = type(self).runs + 1
        raw = self.spark.readStream.format("text").option("maxFilesPerTrigger", "1").load(str(self.data.events_dir))
        out = self.workdir / f"out-parquet-{i}"
        q = (window_counts(parse_events(raw), "2 minutes").writeStream.format("parquet").outputMode("append")
             .option("path", str(out)).option("checkpointLocation", str(self.workdir / f"ck-files-{i}"))
             .trigger(availableNow=True))
        t0 = time.perf_counter()
        q.start().awaitTermination()
        seconds = time.perf_counter() - t0
        ok = self.spark.read.parquet(str(out)).count() == self.data.expected_windows
        return Outcome(events, seconds, stored=events if ok else -1, expected=events)


def _load_rows(data: Path, parquet_dir: Path, rows: int) -> None:
    """Write ``rows`` items to stream ``bench`` and the same rows to Parquet files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import tstreams_embedded as ts
    from tstreams_embedded.ids import ID_MULTIPLIER

    parquet_dir.mkdir(parents=True)
    per_part: dict[int, dict[str, list]] = {p: {k: [] for k in ("txn_id", "seq", "value")} for p in range(PARTITIONS)}
    with ts.open(str(data), durability="async") as engine:
        engine.create_stream("bench", partitions=PARTITIONS)
        producer = engine.producer("bench")
        for t in range(rows // TXN_ITEMS):
            p = t % PARTITIONS
            items = [(b"%012d" % (t * TXN_ITEMS + i)) + b"x" * 88 for i in range(TXN_ITEMS)]
            txn_id = producer.instant(items, partition=p)
            cols = per_part[p]
            cols["txn_id"].extend([txn_id] * TXN_ITEMS)
            cols["seq"].extend(range(TXN_ITEMS))
            cols["value"].extend(items)
    schema = pa.schema([("stream", pa.string()), ("partition", pa.int32()), ("txn_id", pa.int64()),
                        ("txn_time", pa.timestamp("us", tz="UTC")), ("seq", pa.int32()), ("value", pa.binary())])
    for p, cols in per_part.items():
        n = len(cols["value"])
        table = pa.table({
            "stream": pa.array(["bench"] * n, pa.string()),
            "partition": pa.array([p] * n, pa.int32()),
            "txn_id": pa.array(cols["txn_id"], pa.int64()),
            "txn_time": pa.array([(i // ID_MULTIPLIER) * 1000 for i in cols["txn_id"]], pa.timestamp("us", tz="UTC")),
            "seq": pa.array(cols["seq"], pa.int32()),
            "value": pa.array(cols["value"], pa.binary()),
        }, schema=schema)
        pq.write_table(table, parquet_dir / f"part-{p}.parquet")


def _floor_source():
    """A Python data source that yields prebuilt Arrow batches of the same six columns and
    rows (no storage at all): the cost floor of Spark's Python data source path."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FloorReader(DataSourceReader):
        def __init__(self, rows: int) -> None:
            self.rows = rows

        def partitions(self):
            return [InputPartition(i) for i in range(2)]

        def read(self, partition):
            import pyarrow as pa

            n = 65_536
            items = [(b"%012d" % i) + b"x" * 88 for i in range(n)]
            batch = pa.RecordBatch.from_arrays(
                [pa.repeat(pa.scalar("bench"), n), pa.repeat(pa.scalar(1, pa.int32()), n),
                 pa.array(range(n), pa.int64()), pa.array(range(n), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                 pa.array(range(n), pa.int32()), pa.array(items, pa.binary())],
                names=["stream", "partition", "txn_id", "txn_time", "seq", "value"])
            total = self.rows // 2 + (self.rows % 2 if partition.value == 0 else 0)
            sent = 0
            while sent < total:
                k = min(n, total - sent)
                yield batch.slice(0, k)
                sent += k

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "python_floor"

        def schema(self) -> str:
            return "stream string, partition int, txn_id long, txn_time timestamp, seq int, value binary"

        def reader(self, schema):
            return FloorReader(int(self.options["rows"]))

    return FloorSource


def _write_event_files(events_dir: Path, n: int, files: int) -> None:
    """The demo's events as JSON-lines files in arrival order, with increasing mtimes (the
    file source takes the oldest file first), the flush event in the last file."""
    from tstreams_embedded.demo.events import encode, flush_event, generate

    events_dir.mkdir(parents=True)
    start = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
    per = -(-n // files)
    lines = [encode(ev) for ev in generate(n, start)]
    lines.append(encode(flush_event(start + dt.timedelta(hours=2))))
    base = time.time() - files - 10
    for i in range(files):
        path = events_dir / f"events-{i:03d}.json"
        chunk = lines[i * per:(i + 1) * per] if i < files - 1 else lines[i * per:]
        path.write_bytes(b"\n".join(chunk) + b"\n")
        os.utime(path, (base + i, base + i))
