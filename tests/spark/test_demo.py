"""``make demo`` end to end, smaller: the pipeline is SIGKILLed halfway and still exactly-once."""

from __future__ import annotations

import subprocess
import sys

import pytest
from spark_helpers import JAVA_MISSING, spark_env

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(JAVA_MISSING), reason=JAVA_MISSING or "")]


def test_demo_kills_and_proves_exactly_once(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tstreams_embedded.demo", "--events", "20000", "--produce-seconds", "5",
         "--max-rows", "4000", "--no-progress", "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600, env=spark_env(),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "killed: SIGKILL to process groups" in out
    assert "missing 0, duplicated 0, wrong counts 0, unexpected 0; views in 20,000 / out 20,000" in out
    assert "PASS: exactly once" in out
    assert "--endpoint tcp://" in out  # tells the user how to go remote
