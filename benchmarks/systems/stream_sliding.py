"""The ``streams`` suite's sliding-window figure (issue 21 §2): ours only, in the worker
process (a fresh one per run).

Input (untimed, :meth:`OursSliding.setup_sliding`): ``n_records`` envelopes keyed over
``keys`` keys, in time order, every key getting one record every ``per_key_ms`` (so the
records a window holds per key are the same at every key count, and only the number of keys
varies), written to the engine in transactions of 1,000. The timed run is
``App.run(until_idle=True)`` of ``count`` over 60-s ``SlidingWindows`` (or 60-s tumbling
``TimeWindows``, the same run's baseline), exactly-once, ``durability="sync"``, every update
forwarded to an output stream, every window kept (a long retention) to be checked: every
window's count in the store must equal the brute-force reference, or the run FAILS.
"""

from __future__ import annotations

import bisect
import os
import time
from typing import Any

from benchmarks.systems.base import Outcome, System

WINDOW_MS = 60_000
#: every window is kept to be checked (the input spans at most 10,000 s)
RETENTION_MS = 10**8


def schedule(n_records: int, keys: int, per_key_ms: int) -> list[tuple[str, int]]:
    """``(key, t)`` in time order: key ``i % keys`` at ``i * per_key_ms // keys``."""
    return [(f"key-{i % keys}", i * per_key_ms // keys) for i in range(n_records)]


def reference(records: list[tuple[str, int]], windows: str) -> dict[tuple[str, int, int], int]:
    """``(key, start, end) -> count`` by brute force (no record is late: time order)."""
    times: dict[str, list[int]] = {}
    for key, t in records:
        times.setdefault(key, []).append(t)
    out: dict[tuple[str, int, int], int] = {}
    for key, ts in times.items():
        for t in ts:
            if windows == "sliding":
                out[(key, t - WINDOW_MS, t + 1)] = bisect.bisect_right(ts, t) - bisect.bisect_left(ts, t - WINDOW_MS)
            else:
                start = t - t % WINDOW_MS
                out[(key, start, start + WINDOW_MS)] = out.get((key, start, start + WINDOW_MS), 0) + 1
    return out


class OursSliding(System):
    name = "ours-streams-sliding"
    label = "tstreams_embedded.streams, sliding windows (embedded, exactly-once, durable)"
    description = "count over 60-s SlidingWindows (or TimeWindows) per key; App.run(until_idle=True)"
    is_ours = True

    def setup_sliding(self, n_records: int, keys: int, per_key_ms: int = 10_000, **_params: Any) -> None:
        import tstreams_embedded as ts
        from tstreams_embedded.streams.records import pack_envelope

        self.records = schedule(n_records, keys, per_key_ms)
        with ts.open(str(self.workdir / "data"), durability="sync") as engine:
            engine.create_stream("in", partitions=1)
            engine.create_stream("out", partitions=1)
            producer = engine.producer("in", partition=0)
            for i in range(0, n_records, 1000):
                producer.instant([pack_envelope(k.encode(), b"1", t, None) for k, t in self.records[i:i + 1000]],
                                 partition=0)

    def run_sliding(self, n_records: int, keys: int, windows: str = "sliding", **_params: Any) -> Outcome:
        import tstreams_embedded as ts
        from tstreams_embedded.streams import App, SlidingWindows, StreamsBuilder, TimeWindows

        b = StreamsBuilder()
        keep = {"retention_ms": RETENTION_MS}
        spec = (SlidingWindows(size_ms=WINDOW_MS, **keep) if windows == "sliding"
                else TimeWindows(size_ms=WINDOW_MS, **keep))
        (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
         .windowed_by(spec).count(store="n").to_stream().to("out", key_serde="str"))
        with ts.open(str(self.workdir / "data"), durability="sync") as engine:
            app = App(engine, application_id="sliding", topology=b.build())
            started, cpu = time.perf_counter(), time.process_time()
            app.run(until_idle=True)
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            got = {(w.key, w.start, w.end): n for w, n in app.store("n").all().items()}
            app.close()
        expected = reference(self.records, windows)
        right = sum(1 for w, n in got.items() if expected.get(w) == n)
        return Outcome(n_records, seconds, stored=right if len(got) == len(expected) else -1,
                       expected=len(expected), extra={"windows": len(expected), "cpu_seconds": cpu,
                                                      "load_1m": os.getloadavg()[0]})
