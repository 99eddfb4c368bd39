"""The demo's Structured Streaming job (run as a child process by the demo).

Reads page-view JSON events from a T-stream, counts views per page in 5-minute event-time
windows with a watermark, and writes each closed window's counts exactly-once to another
T-stream (append mode: a window is emitted once, when the watermark passes its end).

    python -m tstreams_embedded.demo.job --path DIR|--endpoint tcp://HOST:PORT \\
        --input pageviews --output pageview_counts --checkpoint CKDIR
"""

from __future__ import annotations

import argparse
import os
import sys
import time

EVENT_SCHEMA = "user string, page string, event_time timestamp, referrer string, device string"


def parse_events(raw):  # noqa: ANN001, ANN201 - pyspark objects
    """Page-view columns from a DataFrame with a JSON text column ``value``."""
    from pyspark.sql import functions as F

    return raw.select(F.from_json("value", EVENT_SCHEMA).alias("e")).select("e.*")


def window_counts(events, watermark: str, partitions: int = 4):  # noqa: ANN001, ANN201
    """Views per page per 5-minute event-time window, as ``partition`` + JSON ``value`` rows
    (the output partition is a hash of the page, so a page's windows stay in order).

    There is no filter for the demo's flush event: Spark would push such a filter below
    the watermark (which then would not move). Its own window ends after the watermark, so
    append mode never emits it.
    """
    from pyspark.sql import functions as F

    counts = events.withWatermark("event_time", watermark).groupBy(F.window("event_time", "5 minutes"), "page").count()
    iso = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
    return counts.select(
        (F.abs(F.hash("page")) % F.lit(partitions)).cast("int").alias("partition"),
        F.to_json(F.struct(
            F.date_format("window.start", iso).alias("window_start"),
            F.date_format("window.end", iso).alias("window_end"),
            F.col("page"),
            F.col("count").alias("views"),
        )).alias("value"),
    )


def build_query(spark, args: argparse.Namespace):  # noqa: ANN001, ANN201 - pyspark objects
    """The streaming query (not started): tstreams source -> window counts -> tstreams sink."""
    where = ("endpoint", args.endpoint) if args.endpoint else ("path", args.path)
    raw = (
        spark.readStream.format("tstreams").option(*where).option("stream", args.input)
        .option("valueFormat", "json").option("maxRowsPerTrigger", str(args.max_rows)).load()
    )
    writer = (
        window_counts(parse_events(raw), args.watermark)
        .writeStream.format("tstreams").outputMode("append").option(*where).option("stream", args.output)
        .option("checkpointLocation", args.checkpoint).option("stagingTtl", str(args.staging_ttl))
    )
    if args.trigger == "availableNow":
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=args.trigger)


def session(app: str = "tstreams-demo"):  # noqa: ANN201
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from ..spark import register

    spark = (
        SparkSession.builder.master("local[2]").appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--path", help="embedded engine directory")
    where.add_argument("--endpoint", help="tcp://host:port of a `tstreams serve`")
    ap.add_argument("--input", default="pageviews")
    ap.add_argument("--output", default="pageview_counts")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--max-rows", type=int, default=25_000, help="maxRowsPerTrigger")
    ap.add_argument("--trigger", default="1 second", help="processingTime interval, or availableNow")
    ap.add_argument("--watermark", default="2 minutes")
    ap.add_argument("--staging-ttl", type=int, default=20, help="stagingTtl of the sink, seconds")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spark = session()
    query = build_query(spark, args).start()
    print(f"{time.strftime('%H:%M:%S')} query {query.id} started", flush=True)
    while query.isActive:
        query.awaitTermination(10)
        progress = query.lastProgress
        if progress:
            print(f"{time.strftime('%H:%M:%S')} batch {progress['batchId']}: {progress['numInputRows']} rows "
                  f"watermark={progress.get('eventTime', {}).get('watermark')}", flush=True)
    if query.exception() is not None:
        print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
