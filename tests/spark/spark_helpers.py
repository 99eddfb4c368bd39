"""Helpers for the Spark connector tests: filling streams and reading them back directly
through the engine (not through Spark), so every check has an independent source of truth."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Any

import tstreams_embedded as ts
from tstreams_embedded.testing.polling import wait_until


def _java_missing() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        return "Java is not installed (Spark needs a JVM: install a JDK 17+ or set JAVA_HOME)"
    try:
        subprocess.run([java, "-version"], capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"Java at {java} does not run: {exc}"
    return None


JAVA_MISSING = _java_missing()


def spark_env() -> dict[str, str]:
    """Environment for Spark driver processes (this one and the jobs tests start)."""
    env = dict(os.environ)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def fill(engine: ts.Engine, stream: str, txns: int, items: int, partitions: int | None = None,
         prefix: str = "v") -> list[tuple[int, int, list[bytes]]]:
    """Create (if needed) and fill ``stream`` with ``txns`` checkpointed transactions of
    ``items`` items each, round-robin over the partitions; return ``(partition, id, items)``."""
    if not engine.has_stream(stream):
        engine.create_stream(stream, partitions=partitions or 1)
    info = engine.get_stream(stream)
    producer = engine.producer(stream)
    out = []
    for i in range(txns):
        p = i % info.partitions
        values = [f"{prefix}-{i}-{j}".encode() for j in range(items)]
        txn_id = producer.instant(values, partition=p)
        out.append((p, txn_id, values))
    return out


def read_direct(engine: ts.Engine, stream: str, wait_unblocked: float = 0.0) -> list[tuple[int, int, int, bytes]]:
    """Every visible item of ``stream`` as ``(partition, txn_id, seq, value)``, read with the
    engine's consumer semantics. With ``wait_unblocked`` > 0, waits up to that many seconds
    for open transactions ahead of the data to be resolved (e.g. expired by their TTL)."""
    backend = engine.backend
    info = backend.get_stream(stream)
    out = []
    deadline = time.monotonic() + wait_unblocked

    def moved(p: int, pos: int) -> bool:
        fetched = backend.fetch(stream, p, pos, 1024)
        return bool(fetched.txns) or not fetched.blocked

    for p in range(info.partitions):
        pos = 0
        while True:
            fetched = backend.fetch(stream, p, pos, 1024)
            if not fetched.txns and fetched.blocked and wait_unblocked > 0:
                # (still blocked at the deadline: the items before the open transaction)
                wait_until(lambda p=p, pos=pos: moved(p, pos), max(0.0, deadline - time.monotonic()), 0.05)
                fetched = backend.fetch(stream, p, pos, 1024)
            for t in fetched.txns:
                out.extend((p, t.id, i, v) for i, v in enumerate(t.items))
            pos = max(pos, fetched.position)
            if not fetched.txns:
                break
    return out


def values_of(rows: list[Any]) -> list[bytes]:
    return sorted(bytes(r[-1]) if not isinstance(r[-1], str) else r[-1].encode() for r in rows)
