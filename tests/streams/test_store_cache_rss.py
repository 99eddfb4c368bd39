"""Issue 19, item 6: an app's store cache takes about what ``store_cache_bytes`` says.

A real app process (``cache_worker.py``: a count per key, one task, ``store_cache_bytes`` of
8 MiB) counts 150k distinct keys; its anonymous RSS is sampled while it does. The cache
counted serialized bytes (about 12 per small count), so all 150k entries fitted and took
about 8x the setting; counted for what they take, the growth of the process's anonymous RSS
over the run stays within 1.5x the setting.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import msgpack

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.streams.records import pack_envelope
from tstreams_embedded.testing import eventually
from tstreams_embedded.testing.server_process import child_environment

from . import cache_worker
from .rss import anon_rss

WORKER = Path(__file__).with_name("cache_worker.py")
MiB = 1 << 20
CACHE_BYTES = 8 * MiB
KEYS = 150_000
PER_TRANSACTION = 200  # small: the task's input buffer (64 transactions) stays small next to the cache


def write_keys(engine: ts.Engine, first: int, count: int) -> list[int]:
    """Records of keys ``k<first>``… (one each) in transactions; their IDs."""
    ids: list[int] = []
    for lo in range(first, first + count, PER_TRANSACTION):
        items = [pack_envelope(f"k{i}".encode(), msgpack.packb(i), 1_000 + i, None)
                 for i in range(lo, min(lo + PER_TRANSACTION, first + count))]
        ids.extend(engine.backend.submit([O.Instant("counts-in", 0, O.pack_items(items))]))
    return ids


def test_cache_memory_is_within_one_and_a_half_times_its_setting(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ts.open(str(data)) as engine:
        engine.create_stream("counts-in", 1)
        proc = subprocess.Popen([sys.executable, str(WORKER), str(data), str(CACHE_BYTES)],
                                stdin=subprocess.PIPE, env=child_environment())
        try:
            def read_to(txn_id: int) -> None:
                eventually(lambda: engine.backend.get_offsets("counts-in", cache_worker.APPLICATION_ID).get(0, 0)
                           >= txn_id, timeout=120, message="the app did not read its input")

            read_to(write_keys(engine, 0, 2_000)[-1])  # warm: imports, buffers, a first commit
            baseline = anon_rss(proc.pid)
            last = write_keys(engine, 2_000, KEYS)[-1]
            peak = baseline
            offsets = engine.backend.get_offsets
            while offsets("counts-in", cache_worker.APPLICATION_ID).get(0, 0) < last:
                assert proc.poll() is None, f"the app exited with {proc.returncode}"
                peak = max(peak, anon_rss(proc.pid))
                time.sleep(0.02)
            peak = max(peak, anon_rss(proc.pid))
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(30)
    growth = peak - baseline
    print(f"anonymous RSS {baseline / MiB:.0f} MiB after warm-up, peak {peak / MiB:.0f} MiB: "
          f"+{growth / MiB:.1f} MiB with a {CACHE_BYTES / MiB:.0f} MiB cache")
    assert growth <= 1.5 * CACHE_BYTES, (f"anonymous RSS grew by {growth / MiB:.1f} MiB for "
                                         f"{KEYS} keys with store_cache_bytes of {CACHE_BYTES / MiB:.0f} MiB")
