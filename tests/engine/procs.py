"""Worker subprocesses of the engine tests: ``tests/engine/workers.py`` run for real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tstreams_embedded.testing.server_process import child_environment

WORKERS = Path(__file__).resolve().parent / "workers.py"


def worker_cmd(*args: Any) -> list[str]:
    return [sys.executable, str(WORKERS), *map(str, args)]


def start_worker(*args: Any, **popen: Any) -> subprocess.Popen:
    """Start ``workers.py ARGS`` with its stdout as a text pipe (line-buffered)."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    popen.setdefault("env", child_environment())
    return subprocess.Popen(worker_cmd(*args), text=True, bufsize=1, **popen)


def run_worker(*args: Any, timeout: float = 120) -> list[str]:
    """Run ``workers.py ARGS`` to completion; return its stdout lines (fails on non-zero exit)."""
    r = subprocess.run(worker_cmd(*args), capture_output=True, text=True, timeout=timeout, env=child_environment())
    assert r.returncode == 0, f"worker {args} failed ({r.returncode}):\n{r.stderr}"
    return r.stdout.splitlines()
