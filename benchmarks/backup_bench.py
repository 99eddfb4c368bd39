"""Backup and archiving figures (issue 22 §4): ``python -m benchmarks.backup_bench [--mib N]``.

* **backup vs ``env.copy``:** ``tstreams_embedded.engine.operator.backup.backup`` of a directory
  holding about N MiB (a compacted copy, its CRC32C, its manifest, fsyncs) against LMDB's own
  ``env.copy(compact=True)`` of the same directory into the same filesystem; 3 interleaved
  repetitions, medians. Goal: >= 0.8x.
* **archive lag:** one writer commits 1-item transactions (durable) while an
  :class:`~tstreams_embedded.engine.operator.backup.Archiver` runs, woken by commits; for each
  transaction, the time from its acknowledgement until a segment holding it is on disk.
  Goal: p99 <= 1 s.

Writes ``benchmarks/results/backup.{json,md}``. Run it on a real disk (``--workdir``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import lmdb

import tstreams_embedded as ts
from tstreams_embedded.engine.operator import backup as B

RESULTS = Path(__file__).resolve().parent / "results"


def _fill(path: Path, mib: int) -> None:
    with ts.open(path, durability="async", compaction_interval=None) as e:
        e.create_stream("s", partitions=4)
        p = e.producer("s")
        item = os.urandom(1000)
        for _ in range(mib * 10):  # 100 KB per transaction
            p.instant([item] * 100)


def _env_copy(src: Path, out: Path) -> float:
    out.mkdir()
    t0 = time.perf_counter()
    env = lmdb.open(str(src), readonly=True, lock=False, max_dbs=16)
    try:
        env.copy(str(out), compact=True)
        fd = os.open(out / "data.mdb", os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    finally:
        env.close()
    return time.perf_counter() - t0


def _backup(src: Path, out: Path) -> float:
    t0 = time.perf_counter()
    B.backup(str(src), str(out))
    return time.perf_counter() - t0


def _archive_lag(work: Path, n: int) -> list[float]:
    """Seconds from each write's acknowledgement until a segment holding it is in the archive
    (a watcher thread lists the archive directory while the writes go on)."""
    acked: dict[int, float] = {}
    seen_at: dict[int, float] = {}
    archive = work / "archive"
    done = threading.Event()

    def watch() -> None:
        known: set[str] = set()
        while not done.is_set() or len(seen_at) < n:
            for path, first, last in B.archive_segments(str(archive)):
                if path not in known:
                    known.add(path)
                    now = time.perf_counter()
                    for seq in range(first, last + 1):
                        seen_at.setdefault(seq, now)
            if done.is_set() and time.perf_counter() > give_up:
                return
            time.sleep(0.0005)  # listing the directory is the measurement itself

    with ts.open(work / "arch-data", compaction_interval=None) as e:
        e.create_stream("s")
        p = e.producer("s")
        stop = threading.Event()
        with B.Archiver(e.backend, str(archive)) as archiver:
            runner = threading.Thread(target=archiver.run, args=(stop, 0.2), daemon=True)
            runner.start()
            give_up = float("inf")
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            for k in range(n):
                p.instant([b"%d" % k])
                acked[e.backend.log_seq()] = time.perf_counter()  # one writer: the newest entry is this write
                time.sleep(0.002)  # a steady rate of writes (the workload, not synchronisation)
            give_up = time.perf_counter() + 30
            done.set()
            watcher.join(40)
            stop.set()
            runner.join(10)
    return [seen_at[seq] - t for seq, t in acked.items() if seq in seen_at]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--writes", type=int, default=1000)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="backup-bench-", dir=args.workdir))
    try:
        src = work / "data"
        _fill(src, args.mib)
        size = (src / "data.mdb").stat().st_size
        times: dict[str, list[float]] = {"backup": [], "env.copy": []}
        for rep in range(args.reps):
            order = [("backup", _backup), ("env.copy", _env_copy)]
            if rep % 2:
                order.reverse()
            for name, fn in order:
                out = work / f"{name}-{rep}"
                times[name].append(fn(src, out))
                shutil.rmtree(out)
        med = {k: statistics.median(v) for k, v in times.items()}
        lags = sorted(_archive_lag(work, args.writes))
        p50 = lags[len(lags) // 2] if lags else None
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = med["env.copy"] / med["backup"]
    report = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load": os.getloadavg(),
              "data_bytes": size, "reps": args.reps, "seconds": times, "median_seconds": med,
              "backup_rate_vs_env_copy": ratio, "archive_lag_s": {"n": len(lags), "p50": p50, "p99": p99,
                                                                  "max": lags[-1] if lags else None}}
    out = Path(args.out)
    (out / "backup.json").write_text(json.dumps(report, indent=1))
    md = [f"`python -m benchmarks.backup_bench --mib {args.mib}` ({report['when']}, load average "
          f"{report['load'][0]:.1f}); {size / 2**20:.0f} MiB data file, {args.reps} interleaved repetitions, medians.",
          "", "| figure | ours | baseline | ratio | goal |", "|---|---|---|---|---|",
          f"| backup (compacted copy + CRC32C + manifest, fsynced) | {med['backup']:.2f} s | "
          f"LMDB `env.copy(compact=True)` + fsync: {med['env.copy']:.2f} s | {ratio:.2f}× | "
          f"≥ 0.8× {'✔' if ratio >= 0.8 else '✘'} |",
          f"| archive lag after acknowledgement, {len(lags)} durable 1-item writes | p50 {p50 * 1000:.0f} ms, p99 "
          f"{p99 * 1000:.0f} ms | — | — | p99 ≤ 1 s {'✔' if p99 is not None and p99 <= 1 else '✘'} |"
          if p50 is not None and p99 is not None else "| archive lag | no samples | | | |"]
    (out / "backup.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
