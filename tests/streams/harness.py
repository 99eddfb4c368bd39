"""Scaffolding of the exactly-once tests of stream apps: input written as envelope
transactions in chunks, a worker process SIGKILLed at random points while it processes
them, the committed progress, and the output read back."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.streams.records import pack_envelope, partition_of, unpack_envelope
from tstreams_embedded.testing import eventually, kill_process
from tstreams_embedded.testing.server_process import child_environment

#: what :func:`read_envelopes` returns per item: key bytes, value bytes, timestamp, headers
Envelope = tuple[bytes | None, bytes | None, int, dict[str, bytes] | None]


def envelope_transactions(stream: str, records: Iterable[tuple[bytes, bytes, int]], partitions: int,
                          per_transaction: int) -> list[O.Operation]:
    """``(key, value, timestamp)`` records as envelopes on their key's partition, in
    transactions of ``per_transaction`` (a partition's last one may hold fewer), in the order
    the transactions fill up."""
    batches: dict[int, list[bytes]] = defaultdict(list)
    ops: list[O.Operation] = []
    for kb, vb, t in records:
        p = partition_of(kb, partitions)
        batches[p].append(pack_envelope(kb, vb, t, None))
        if len(batches[p]) == per_transaction:
            ops.append(O.Instant(stream, p, O.pack_items(batches.pop(p))))
    ops.extend(O.Instant(stream, p, O.pack_items(items)) for p, items in batches.items())
    return ops


def chunks(ops: Sequence[O.Operation], n: int) -> list[list[O.Operation]]:
    """``ops`` cut into ``n`` consecutive chunks of (nearly) equal length."""
    return [list(ops[i * len(ops) // n:(i + 1) * len(ops) // n]) for i in range(n)]


def committed_transactions(engine: ts.Engine, stream: str, consumer: str) -> int:
    """How many transactions of ``stream`` the offsets of ``consumer`` have passed."""
    offsets = engine.backend.get_offsets(stream, consumer)
    return sum(len(engine.backend.scan_index(stream, p, 0, upto, max_txns=1 << 20).entries)
               for p, upto in offsets.items())


def read_envelopes(engine: ts.Engine, stream: str) -> list[Envelope]:
    """Every item of ``stream`` (none if it does not exist), partition by partition in order;
    each must be an envelope."""
    out: list[Envelope] = []
    if not engine.has_stream(stream):
        return out
    for p in range(engine.get_stream(stream).partitions):
        for txn in engine.backend.transactions_range(stream, p, 0, 2**63 - 1):
            for item in txn.items:
                env = unpack_envelope(item)
                assert env is not None, f"not an envelope in {stream!r}: {item[:40]!r}"
                out.append(env)
    return out


def worker_command(worker: Path, *args: str) -> list[str]:
    return [sys.executable, str(worker), *args]


def run_to_completion(command: Sequence[str], timeout: float = 120) -> None:
    """Run a worker that processes until idle and exits; it must succeed."""
    r = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, env=child_environment())
    assert r.returncode == 0, r.stderr


def kill_at_random_points(engine: ts.Engine, command: Sequence[str], chunks: Sequence[Sequence[O.Operation]],
                          processed: Callable[[], int], rng: random.Random, reach: float = 1.0) -> list[int]:
    """For each chunk: submit it, start the worker ``command`` (it runs until killed), wait
    until ``processed()`` (committed input transactions) moves, and half of the time further,
    to a random point within ``reach`` of the chunk; then SIGKILL the worker. The input the
    chunks bring arrives while the worker runs, so each kill lands with input to process,
    however fast the machine is. Returns ``processed()`` after each kill."""
    env = child_environment()
    progress: list[int] = []
    for chunk in chunks:
        engine.backend.submit(list(chunk))
        before = processed()
        proc = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env)
        try:
            eventually(lambda b=before, w=proc: processed() > b or w.poll() is not None, timeout=60,
                       interval=0.001, message="the worker made no progress")
            if rng.random() < 0.5:  # sometimes a little later
                target = before + rng.randint(1, max(1, int(len(chunk) * reach)))
                eventually(lambda t=target, w=proc: processed() >= t or w.poll() is not None, timeout=60,
                           interval=0.001)
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            os.kill(proc.pid, signal.SIGKILL)
            progress.append(processed())
        finally:
            kill_process(proc)
            for f in (proc.stdin, proc.stdout, proc.stderr):
                if f is not None:
                    f.close()
    return progress


class WorkerProcess:
    """A worker script (``python WORKER ARGS…``) in a subprocess, with pipes; it reports
    ``started …`` on its first line (kept as :attr:`started`) once its app runs."""

    def __init__(self, worker: Path, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(worker), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_environment())
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        assert line.startswith("started"), line + (self.proc.stderr.read().decode() if self.proc.stderr else "")
        self.started = line.split()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL by PID (continued first if paused), reaped; pipes closed."""
        kill_process(self.proc)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()
