"""The ``schedules`` suite's system (issue 22 §3): how late scheduled deliveries are.

``run_lateness``: ``n`` schedules (one 100-byte item each, its due time in it) are written
in writes of 500 (``Schedule`` records), due spread evenly over ``spread_s`` seconds from one
second after the start; a reader thread waits for commits and reads the stream with a
consumer, noting when each item becomes readable. Lateness = readable − due (wall clock,
ms precision of the due time). ``load_threads`` threads write durable 100-item instant
transactions of 100-byte items to another stream the whole time (the load). Every schedule
must be delivered exactly once, or the run FAILS.
"""

from __future__ import annotations

import struct
import threading
import time
from typing import Any

from benchmarks.systems.base import Outcome, System

_DUE = struct.Struct(">Q")


class OursSchedules(System):
    name = "ours-schedules"
    label = "tstreams_embedded scheduled delivery (embedded, durable)"
    description = "engine.schedule: the engine's firer thread turns due schedules into transactions"
    is_ours = True

    def run_lateness(self, n: int, spread_s: float, load_threads: int = 0, **_params: Any) -> Outcome:
        import tstreams_embedded as ts
        from tstreams_embedded.engine.protocol import ops as O

        path = self.workdir / f"data-{time.monotonic_ns()}"
        with ts.open(str(path), durability="sync", compaction_interval=None) as engine:
            engine.create_stream("due", partitions=2)
            engine.create_stream("load", partitions=2)
            stop = threading.Event()
            seen: dict[int, int] = {}  # schedule number -> lateness ns
            duplicates = [0]

            def read() -> None:
                consumer = engine.consumer("due", "reader")
                seq = 0
                while not stop.is_set() and len(seen) < n:
                    txn = consumer.get_transaction()
                    if txn is None:
                        seq = engine.backend.wait_for_commit(seq, 0.05)
                        continue
                    now = time.time_ns()
                    for item in txn.items:
                        k, due_ms = _DUE.unpack_from(item, 0)[0], _DUE.unpack_from(item, 8)[0]
                        if k in seen:
                            duplicates[0] += 1
                        seen[k] = now - due_ms * 1_000_000

            def load() -> None:
                producer = engine.producer("load")
                batch = [b"x" * 100] * 100
                while not stop.is_set():
                    producer.instant(batch)

            loaders = [threading.Thread(target=load, daemon=True) for _ in range(load_threads)]
            for t in loaders:
                t.start()
            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            first = time.time_ns() // 1_000_000 + 1_000
            step = spread_s * 1000 / max(1, n)
            ops = []
            for k in range(n):
                due = int(first + k * step)
                ops.append(O.Schedule("due", k % 2, O.pack_items([_DUE.pack(k) + _DUE.pack(due) + b"s" * 84]),
                                      at_ms=due))
            started = time.perf_counter()
            for i in range(0, n, 500):
                engine.backend.submit(ops[i:i + 500])
            reader.join(timeout=spread_s + 60)
            seconds = time.perf_counter() - started
            stop.set()
            for t in loaders:
                t.join(timeout=30)
            reader.join(timeout=30)
            late_ms = sorted(v / 1e6 for v in seen.values())
        return Outcome(n, seconds, latencies_ns=[max(0, v) for v in seen.values()],
                       stored=len(seen) if not duplicates[0] else -duplicates[0], expected=n,
                       extra={"max_late_ms": late_ms[-1] if late_ms else None,
                              "early": sum(1 for v in late_ms if v < 0)})
