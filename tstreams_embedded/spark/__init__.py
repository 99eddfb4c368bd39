"""PySpark connector: the ``tstreams`` data source (batch and Structured Streaming).

>>> from tstreams_embedded.spark import register
>>> register(spark)
>>> df = spark.read.format("tstreams").option("path", "data/").option("stream", "clicks").load()

Needs the ``[spark]`` extra (``pyspark>=4.2,<5``, ``pyarrow`` and ``numpy``). See ``docs/SPARK.md``.
"""

from __future__ import annotations

from typing import Any

try:
    import numpy  # noqa: F401 - the reader builds Arrow columns with it
    import pyarrow  # noqa: F401 - Spark fails late and obscurely without it
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"tstreams_embedded.spark needs the [spark] extra: pip install 'tstreams-embedded[spark]' ({exc})"
    ) from exc

from .source import TStreamsDataSource
from .workers import WorkersPythonWarning, check_workers_python
from .writer import sink_marker_key

FORMAT = "tstreams"


def register(spark: Any) -> None:
    """Register the ``tstreams`` format with ``spark`` (a ``SparkSession``).

    First checks that Spark's Python workers can import ``tstreams_embedded``: if they run
    another Python that cannot, a local session is switched to the driver's Python, and
    otherwise a :class:`WorkersPythonWarning` names the fix (``PYSPARK_PYTHON``); see
    :mod:`.workers`."""
    check_workers_python(spark)
    spark.dataSource.register(TStreamsDataSource)


def local_session(app: str = "tstreams", shuffle_partitions: int = 4) -> Any:
    """A ``local[2]`` SparkSession on 127.0.0.1 (UTC, no UI, quiet) with the ``tstreams``
    format registered: what the demo, the benchmarks and the tests run on."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]").appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


__all__ = ["FORMAT", "TStreamsDataSource", "WorkersPythonWarning", "local_session", "register", "sink_marker_key"]
