"""Measurement helpers: memory, disk usage, percentiles, spread, ports, machine description."""

from __future__ import annotations

import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

# Processes (free_port, stop_process, wait_until): one implementation for tests, benchmarks
# and the demo, in tstreams_embedded.testing; re-exported for the benchmark modules.
from tstreams_embedded.testing import free_port, stop_process, wait_until  # noqa: F401

NOISY_SPREAD = 0.25
"""A figure whose spread ((max - min) / median over repetitions) exceeds this is marked noisy."""


# --- memory -------------------------------------------------------------------------------
def _status_kb(pid: int | str, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_bytes(pid: int | str = "self") -> int:
    """Current resident set size of a process (0 if unknown)."""
    return _status_kb(pid, "VmRSS") * 1024


def peak_rss_bytes(pid: int | str = "self") -> int:
    """Peak resident set size (VmHWM) since the process started or :func:`reset_peak_rss`."""
    return _status_kb(pid, "VmHWM") * 1024


def reset_peak_rss(pid: int | str = "self") -> bool:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` 5). Returns False if not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# --- disk ---------------------------------------------------------------------------------
def disk_bytes(path: str | os.PathLike) -> int:
    """Bytes actually allocated on disk under ``path`` (``st_blocks``; sparse files count as used)."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_blocks * 512
    total = 0
    for root, _dirs, files in os.walk(p):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


# --- statistics ---------------------------------------------------------------------------
def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of already sorted values, by nearest rank; 0.0 if empty."""
    if not sorted_values:
        return 0.0
    k = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return float(sorted_values[k])


def latency_summary(latencies_ns: list[int]) -> dict[str, float]:
    """p50/p99 in milliseconds of a list of per-operation latencies in nanoseconds."""
    if not latencies_ns:
        return {}
    s = sorted(latencies_ns)
    return {"p50_ms": percentile(s, 0.50) / 1e6, "p99_ms": percentile(s, 0.99) / 1e6, "n": len(s)}


def spread(values: Sequence[float]) -> float:
    """(max - min) / median; 0.0 for fewer than two values."""
    vals = [v for v in values if v is not None]
    if len(vals) < 2:
        return 0.0
    med = statistics.median(vals)
    return (max(vals) - min(vals)) / med if med else 0.0


def median(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


# --- machine description ------------------------------------------------------------------
_PACKAGES = (
    "tstreams-embedded",
    "lmdb",
    "msgpack",
    "redis",
    "hiredis",
    "pyzmq",
    "tornado",
    "matplotlib",
    "tqdm",
    "click",
    "bytewax",
    "orjson",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def redis_server_version() -> str | None:
    exe = shutil.which("redis-server")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"v=(\S+)", out)
    return m.group(1) if m else out.strip()


def machine_info() -> dict[str, Any]:
    """Cores, CPU model, memory, OS, and the versions of every package and server used."""
    packages: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    try:
        import lmdb

        lmdb_c = ".".join(str(x) for x in lmdb.version())
    except Exception:  # pragma: no cover - lmdb is a hard dependency
        lmdb_c = None
    try:
        import zmq

        libzmq = zmq.zmq_version()
    except Exception:
        libzmq = None
    return {
        "cores": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "mem_total_bytes": _mem_total(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "packages": packages,
        "servers": {
            "redis-server": redis_server_version(),
            "sqlite": sqlite3.sqlite_version,
            "lmdb (C library)": lmdb_c,
            "libzmq": libzmq,
        },
        "loadavg_at_start": list(os.getloadavg()),
    }
