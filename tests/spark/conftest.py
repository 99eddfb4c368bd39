"""Shared fixtures of the Spark connector tests: one SparkSession for the whole session.

The tests need Java (Spark's JVM) and pyspark/pyarrow (the ``[spark]`` extra). They are
skipped, with the reason, only when Java is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_helpers import JAVA_MISSING, spark_env

import tstreams_embedded as ts


@pytest.fixture(scope="session")
def spark():
    """A ``local[2]`` SparkSession with the ``tstreams`` format registered."""
    if JAVA_MISSING:
        pytest.skip(JAVA_MISSING)
    os.environ.update({k: v for k, v in spark_env().items() if k.startswith(("SPARK_", "PYSPARK_"))})
    from tstreams_embedded.spark import local_session

    session = local_session("tstreams-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def engine(data_dir: Path) -> Iterator[ts.Engine]:
    """An embedded engine on a fresh directory (the same one the Spark options point at)."""
    eng = ts.open(str(data_dir))
    yield eng
    eng.close()
