"""Reading what ``tstreams_embedded.streams`` wrote, for the checks and the latency loop.

Used by the harness side (:mod:`benchmarks.systems.stream_jobs`) and by the job of ours
(:mod:`benchmarks.streams.jobs.ours_job`); the project is imported when called, never at import.
"""

from __future__ import annotations

import json
import time
from typing import Any


def decode_json_output(item: bytes) -> Any:
    """The JSON value of one item a DSL sink wrote (an envelope, see ``streams.records``)."""
    from tstreams_embedded.streams.records import unpack_envelope

    fields = unpack_envelope(item)
    if fields is None:
        raise ValueError(f"not a record envelope: {item[:40]!r}")
    return json.loads(fields[1]) if fields[1] is not None else None


def read_stream_values(engine: Any, stream: str) -> list[Any]:
    """Every value checkpointed in ``stream`` (all partitions), decoded."""
    from tstreams_embedded.engine.protocol.iteration import iter_transactions

    values = []
    for partition in range(engine.get_stream(stream).partitions):
        for txn in iter_transactions(engine.backend, stream, partition):
            values.extend(decode_json_output(item) for item in txn.items)
    return values


class OutputReader:
    """Reads a DSL output stream incrementally (partition 0), without a consumer offset.

    It waits with ``backend.wait_for_commit``, which commits wake at once: this process's
    directly, another process's on the same directory through the engine's inotify waker
    (``engine/storage/commit_waker.py``); with a remote engine the server's long poll does the same.
    """

    def __init__(self, engine: Any, stream: str) -> None:
        self.engine = engine
        self.stream = stream
        self.after = 0
        self.values: list[Any] = []
        self.pending: list[Any] = []
        self.seen = engine.backend.wait_for_commit(0, 0)

    @property
    def count(self) -> int:
        return len(self.values)

    def poll(self) -> int:
        """Read what is new; returns how many values."""
        from tstreams_embedded.engine.protocol.iteration import iter_transactions

        walk = iter_transactions(self.engine.backend, self.stream, 0, self.after)
        n = 0
        for txn in walk:
            decoded = [decode_json_output(item) for item in txn.items]
            self.values.extend(decoded)
            self.pending.extend(decoded)
            n += len(decoded)
        self.after = walk.position
        return n

    def _wait(self, remaining: float) -> None:
        self.seen = self.engine.backend.wait_for_commit(self.seen, min(remaining, 0.05))

    def next_value(self, timeout: float) -> Any:
        """The next output value, waiting for it up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.pending:
            if self.poll() == 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no output on {self.stream} within {timeout} s")
                self._wait(remaining)
        return self.pending.pop(0)

    def wait_for(self, n: int, timeout: float) -> None:
        """Wait until at least ``n`` values have been read."""
        deadline = time.monotonic() + timeout
        while self.count < n:
            if self.poll() == 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self.count} of {n} outputs on {self.stream} after {timeout} s")
                self._wait(remaining)
        self.pending.clear()


def latency_loop(producer: Any, reader: OutputReader, n_records: int, base_ms: int,
                 window_ms: int) -> tuple[float, list[int]]:
    """The closed loop of the latency scenario: write one event as a 1-record transaction,
    wait for its count update (``[page, window start, 1]``), repeat. Returns the wall time
    and each round trip in nanoseconds; raises if an update is not the expected one."""
    latencies: list[int] = []
    clock = time.perf_counter_ns
    window = base_ms - base_ms % window_ms
    t0 = time.perf_counter()
    for i in range(n_records):
        page = f"/latency/{i}"
        item = json.dumps({"page": page, "user": "u0", "ts": base_ms + i}).encode()
        sent = clock()
        producer.instant([item], partition=0)
        out = reader.next_value(timeout=30.0)
        latencies.append(clock() - sent)
        if out != [page, window, 1]:
            raise AssertionError(f"record {i}: output {out!r} is not the count update of {page}")
    return time.perf_counter() - t0, latencies
