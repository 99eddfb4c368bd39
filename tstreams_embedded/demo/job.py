"""The demo's Structured Streaming job (run as a child process by the demo).

Reads page-view JSON events from a T-stream, counts views per page in 5-minute event-time
windows with a watermark, and writes each closed window's counts exactly-once to another
T-stream (append mode: a window is emitted once, when the watermark passes its end).

    python -m tstreams_embedded.demo.job --path DIR|--endpoint tcp://HOST:PORT \\
        --input pageviews --output pageview_counts --checkpoint CKDIR
"""

from __future__ import annotations

import sys
import time

import click

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


def build_query(spark, *, input: str, output: str, checkpoint: str, path: str | None = None,  # noqa: ANN001, ANN201
                endpoint: str | None = None, max_rows: int = 25_000, trigger: str = "1 second",
                watermark: str = "2 minutes", staging_ttl: int = 20):
    """The streaming query (not started): tstreams source -> window counts -> tstreams sink.

    ``endpoint`` (a ``tstreams serve``) or else ``path`` (an embedded directory) locates the engine;
    ``trigger`` is a processingTime interval or ``availableNow``.
    """
    where = ("endpoint", endpoint) if endpoint else ("path", path)
    raw = (
        spark.readStream.format("tstreams").option(*where).option("stream", input)
        .option("valueFormat", "json").option("maxRowsPerTrigger", str(max_rows)).load()
    )
    writer = (
        window_counts(parse_events(raw), watermark)
        .writeStream.format("tstreams").outputMode("append").option(*where).option("stream", output)
        .option("checkpointLocation", checkpoint).option("stagingTtl", str(staging_ttl))
    )
    if trigger == "availableNow":
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=trigger)


def session(app: str = "tstreams-demo"):  # noqa: ANN201
    """The demo's local SparkSession (see :func:`tstreams_embedded.spark.local_session`)."""
    from ..spark import local_session

    return local_session(app)


@click.command("job", help=__doc__)
@click.option("--path", default=None, help="Embedded engine directory.")
@click.option("--endpoint", default=None, help="tcp://host:port of a `tstreams serve`.")
@click.option("--input", "input_", default="pageviews", show_default=True)
@click.option("--output", default="pageview_counts", show_default=True)
@click.option("--checkpoint", required=True)
@click.option("--max-rows", default=25_000, show_default=True, type=int, help="maxRowsPerTrigger")
@click.option("--trigger", default="1 second", show_default=True, help="processingTime interval, or availableNow")
@click.option("--watermark", default="2 minutes", show_default=True)
@click.option("--staging-ttl", default=20, show_default=True, type=int, help="stagingTtl of the sink, seconds")
def main(path: str | None, endpoint: str | None, input_: str, output: str, checkpoint: str, max_rows: int,
         trigger: str, watermark: str, staging_ttl: int) -> None:
    if (path is None) == (endpoint is None):
        raise click.UsageError("give exactly one of --path and --endpoint")
    spark = session()
    query = build_query(spark, input=input_, output=output, checkpoint=checkpoint, path=path, endpoint=endpoint,
                        max_rows=max_rows, trigger=trigger, watermark=watermark, staging_ttl=staging_ttl).start()
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
    main(prog_name="python -m tstreams_embedded.demo.job")
