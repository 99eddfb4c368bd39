"""The fsync floor: the most durable commits per second this disk allows.

A bare loop that appends ``pages`` 4 KiB pages to a file and calls ``fdatasync`` once per
"commit": no B-tree, no log, no Python beyond the loop. Every durable figure is measured
beside it in the same run, so that ``ours ÷ floor`` reads as *items per fsync-equivalent*
(how many items each durable commit of ours carries, in units of the cheapest possible
durable write) or, at the same items per commit, as the fraction of the physical limit.

Each ``run_<method>`` mirrors the shape of the scenario it stands beside: the same number
of items in the same number of durable commits (``batch`` items per commit), so the rates
are in the same unit (items/s) and the ratio is meaningful. ``pages`` is 1, 2 or 3: a
commit of any B-tree dirties several pages, and the fsync's cost grows with them.
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

from benchmarks.systems.base import Outcome, System

PAGE = 4096


class FsyncFloor(System):
    name = "fsync-floor"
    label = "fsync floor, 1 page/commit"
    description = "append 1 x 4 KiB page to a file + fdatasync per commit (the disk's durable limit)"
    pages: ClassVar[int] = 1

    def open(self) -> None:
        self.path = self.workdir / "floor.log"
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.block = b"\x5a" * (PAGE * self.pages)
        self.commits = 0

    def close(self) -> None:
        fd = getattr(self, "fd", None)
        if fd is not None:
            os.close(fd)
            self.fd = None

    def _commits(self, n: int) -> tuple[float, list[int]]:
        """``n`` durable appends; wall seconds and per-commit latencies."""
        fd, block, write, sync = self.fd, self.block, os.write, os.fdatasync
        clock = time.perf_counter_ns
        lat = []
        t0 = time.perf_counter()
        for _ in range(n):
            s = clock()
            write(fd, block)
            sync(fd)
            lat.append(clock() - s)
        self.commits += n
        return time.perf_counter() - t0, lat

    def _outcome(self, n_items: int, per_commit: int) -> Outcome:
        commits = max(1, n_items // per_commit)
        size = os.fstat(self.fd).st_size  # (a shared system keeps its file between runs)
        seconds, lat = self._commits(commits)
        items = commits * per_commit
        stored = (os.fstat(self.fd).st_size - size) // len(self.block) * per_commit
        return Outcome(items, seconds, lat, stored=stored, expected=items,
                       extra={"fsyncs_per_s": commits / seconds if seconds else 0.0})

    # peers --------------------------------------------------------------------------------
    def run_produce(self, n_items: int, batch: int) -> Outcome:
        return self._outcome(n_items, batch)

    run_produce_txn = run_produce

    def run_concurrent(self, threads: int, per_thread: int) -> Outcome:
        return self._outcome(threads * per_thread, 1)

    def run_consume(self, n_items: int, batch: int) -> Outcome:
        return self._outcome(n_items, batch)

    def run_exactly_once(self, n_items: int, batch: int) -> Outcome:
        return self._outcome(n_items, batch)

    def run_many_streams(self, n_streams: int, batch: int, **_: Any) -> Outcome:
        return self._outcome(n_streams, batch)

    # engine -------------------------------------------------------------------------------
    def run_single_commits(self, n_items: int, per_thread: int) -> Outcome:
        return self._outcome(n_items, 1)

    def run_group_commit(self, n_items: int, per_thread: int, threads: int = 1) -> Outcome:
        return self._outcome(n_items, 1)

    def run_scan(self, n_items: int, batch: int, commit_every: int) -> Outcome:
        return self._outcome(n_items, batch * commit_every)


class FsyncFloor2(FsyncFloor):
    name = "fsync-floor-2"
    label = "fsync floor, 2 pages/commit"
    description = "append 2 x 4 KiB pages + fdatasync per commit"
    pages = 2


class FsyncFloor3(FsyncFloor):
    name = "fsync-floor-3"
    label = "fsync floor, 3 pages/commit"
    description = "append 3 x 4 KiB pages + fdatasync per commit"
    pages = 3
