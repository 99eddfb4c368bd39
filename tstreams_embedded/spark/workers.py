"""The Python that Spark starts its Python workers with, checked by :func:`register`.

The connector runs in Spark's Python workers (planning, reading, writing), so they need a
Python that can import ``tstreams_embedded``. PySpark starts them with the ``pythonExec``
of the ``SparkContext``: ``PYSPARK_PYTHON`` as it was when the session was created, else
``python3`` from ``PATH``. A driver run as ``.venv/bin/python job.py`` without activating
the venv therefore gets workers on the system ``python3``, and the first task fails with
``ModuleNotFoundError: No module named 'tstreams_embedded'``. (Measured with pyspark 4.3:
``.config("spark.pyspark.python", ...)`` on the builder of a plain ``python`` process does
not change it; ``spark-submit`` honours that setting.)

:func:`check_workers_python` runs when the format is registered. If the workers' Python is
not the driver's, it asks that Python to import the connector's modules (a subprocess of a
few hundred milliseconds, only then). If it cannot:

* with a ``local`` master and ``PYSPARK_PYTHON`` not set, it switches the session's workers
  to the driver's Python (``sys.executable``) and warns that it did;
* otherwise it warns (:class:`WorkersPythonWarning`), naming the fix: ``PYSPARK_PYTHON``.

A Spark Connect session has no ``SparkContext`` on the client: nothing is checked there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from typing import Any

#: what the workers must be able to import
PROBE = "import tstreams_embedded, pyarrow, numpy"


class WorkersPythonWarning(UserWarning):
    """Spark's Python workers run a Python that cannot import ``tstreams_embedded``."""


def is_drivers_python(executable: str) -> bool:
    """Whether ``executable`` (a path or a name on ``PATH``) is the driver's Python; a venv's
    ``bin/python`` is a link to the base Python, so links are not followed."""
    found = shutil.which(executable) or executable
    return os.path.abspath(found) == os.path.abspath(sys.executable)


def can_import_connector(executable: str) -> bool:
    """Whether ``executable`` imports the connector's modules (run as a child process)."""
    try:
        done = subprocess.run([executable, "-c", PROBE], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def check_workers_python(spark: Any) -> None:
    """Make sure, or warn, that the workers of ``spark`` can run the connector (see the
    module docstring)."""
    try:
        sc = spark.sparkContext
        executable = sc.pythonExec or "python3"
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext here, the server starts the workers
        return
    if is_drivers_python(executable) or can_import_connector(executable):
        return
    fix = (f"set PYSPARK_PYTHON to a Python that has tstreams-embedded[spark] (the driver's is {sys.executable}) "
           "before the SparkSession is created, e.g. os.environ['PYSPARK_PYTHON'] = sys.executable, or run the "
           "driver in an activated virtual environment; with spark-submit, --conf spark.pyspark.python=...")
    if str(sc.master).startswith("local") and "PYSPARK_PYTHON" not in os.environ:
        sc.pythonExec = sys.executable
        warnings.warn(f"Spark would start its Python workers with {executable!r}, which cannot import "
                      f"tstreams_embedded; register() switched this session's Python workers to the driver's "
                      f"Python ({sys.executable}). To choose yourself, {fix}", WorkersPythonWarning, stacklevel=3)
        return
    warnings.warn(f"Spark starts its Python workers with {executable!r}, which cannot import tstreams_embedded "
                  f"here: tstreams reads and writes will fail in their tasks with ModuleNotFoundError. To fix it, "
                  f"{fix}", WorkersPythonWarning, stacklevel=3)
