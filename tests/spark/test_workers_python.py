"""``register(spark)`` and the Python of Spark's Python workers: a driver run with a venv's
Python, without the venv activated, gets workers on ``python3`` from ``PATH``. Here that
``python3`` cannot import anything (a stand-in for a system Python without the package), so
the first task would fail with ``ModuleNotFoundError``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from spark_helpers import JAVA_MISSING, spark_env

pytestmark = [pytest.mark.skipif(bool(JAVA_MISSING), reason=JAVA_MISSING or "")]

DRIVER = textwrap.dedent("""
    import os, sys, warnings
    from pyspark.sql import SparkSession
    import tstreams_embedded as ts
    from tstreams_embedded.spark import WorkersPythonWarning, register

    def session():
        return (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())

    data = sys.argv[1]
    with ts.open(data) as engine:
        engine.create_stream("s", partitions=2)
        engine.producer("s").instant([b"a", b"b", b"c"])

    # PYSPARK_PYTHON names a Python without the package: warned, nothing changed
    os.environ["PYSPARK_PYTHON"] = sys.argv[2]
    spark = session()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        register(spark)
    print("explicit:", [str(w.message) for w in caught if w.category is WorkersPythonWarning])
    print("explicit workers:", spark.sparkContext.pythonExec)
    spark.stop()

    # no PYSPARK_PYTHON, python3 on PATH without the package: switched to the driver's Python
    del os.environ["PYSPARK_PYTHON"]
    spark = session()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        register(spark)
    print("default:", [str(w.message) for w in caught if w.category is WorkersPythonWarning])
    print("default workers:", spark.sparkContext.pythonExec)
    print("count:", spark.read.format("tstreams").option("path", data).option("stream", "s").load().count())
    spark.stop()
""")


def test_register_makes_a_local_session_work_when_python3_on_path_lacks_the_package(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bare = bin_dir / "python3"
    bare.write_text("#!/bin/sh\necho 'no tstreams_embedded here' >&2\nexit 1\n")
    bare.chmod(0o755)
    env = spark_env()
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(name, None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "data"), str(bare)], capture_output=True,
                          text=True, timeout=600, env=env, cwd=tmp_path)
    out = done.stdout
    assert done.returncode == 0, (out, done.stderr[-5000:])
    lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert f"Spark starts its Python workers with '{bare}', which cannot import tstreams_embedded" in lines["explicit"]
    assert "PYSPARK_PYTHON" in lines["explicit"] and lines["explicit workers"] == str(bare)
    assert "register() switched this session's Python workers to the driver's" in lines["default"]
    assert lines["default workers"] == sys.executable
    assert lines["count"] == "3"


class _Context:
    def __init__(self, python: str, master: str) -> None:
        self.pythonExec, self.master = python, master


class _Session:
    def __init__(self, python: str, master: str) -> None:
        self.sparkContext = _Context(python, master)


def test_the_check_without_a_jvm(tmp_path, monkeypatch):
    from tstreams_embedded.spark.workers import WorkersPythonWarning, check_workers_python

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    bare = tmp_path / "python3"
    bare.write_text("#!/bin/sh\nexit 1\n")
    bare.chmod(0o755)
    remote = _Session(str(bare), "spark://cluster:7077")  # executors elsewhere: only a warning
    with pytest.warns(WorkersPythonWarning, match="PYSPARK_PYTHON"):
        check_workers_python(remote)
    assert remote.sparkContext.pythonExec == str(bare)
    local = _Session(str(bare), "local[2]")
    with pytest.warns(WorkersPythonWarning, match="switched"):
        check_workers_python(local)
    assert local.sparkContext.pythonExec == sys.executable

    class Connect:  # Spark Connect: no SparkContext on the client, nothing to check
        @property
        def sparkContext(self):
            raise RuntimeError("not supported in Spark Connect")

    check_workers_python(Connect())
    check_workers_python(_Session(sys.executable, "yarn"))  # the driver's own Python: no probe, no warning
