"""PySpark connector: the ``tstreams`` data source (batch and Structured Streaming).

>>> from tstreams_embedded.spark import register
>>> register(spark)
>>> df = spark.read.format("tstreams").option("path", "data/").option("stream", "clicks").load()

Needs the ``[spark]`` extra (``pyspark>=4.2,<5`` and ``pyarrow``). See ``docs/SPARK.md``.
"""

from __future__ import annotations

from typing import Any

try:
    import pyarrow  # noqa: F401 - Spark fails late and obscurely without it
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"tstreams_embedded.spark needs the [spark] extra: pip install 'tstreams-embedded[spark]' ({exc})"
    ) from exc

from .source import TStreamsDataSource
from .writer import sink_marker_key

FORMAT = "tstreams"


def register(spark: Any) -> None:
    """Register the ``tstreams`` format with ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(TStreamsDataSource)


__all__ = ["FORMAT", "TStreamsDataSource", "register", "sink_marker_key"]
