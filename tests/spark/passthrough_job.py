"""A Structured Streaming job for the hard-kill test: copies a stream into another one
through the exactly-once ``tstreams`` sink, forever (until it is killed).

Usage: python passthrough_job.py <path|endpoint> <where> <in> <out> <checkpoint> <maxRowsPerTrigger>
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    kind, where, src, dst, checkpoint, max_rows = sys.argv[1:7]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tstreams_embedded.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("passthrough")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    df = (spark.readStream.format("tstreams").option(kind, where).option("stream", src)
          .option("maxRowsPerTrigger", max_rows).load())
    q = (df.select("partition", "value").writeStream.format("tstreams").option(kind, where)
         .option("stream", dst).option("checkpointLocation", checkpoint).option("stagingTtl", "15")
         .trigger(processingTime="100 milliseconds").start())
    print("started", flush=True)
    q.awaitTermination()
