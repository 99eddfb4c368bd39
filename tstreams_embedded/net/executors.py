"""Where slow handlers run, off the server loop.

:class:`WriteExecutor` is one thread that runs write calls **in arrival order**. Each time
it wakes it takes every queued call and hands consecutive calls of the same handler to
that handler's ``batch`` function at once, so a burst of small writes from many clients
(or many pipelined writes from one client) becomes one engine group commit with one
fsync. Results go back to the loop in one callback per batch.

Blocking reads and other slow calls use a plain ``ThreadPoolExecutor`` (see the server).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from .registry import Handler

# (handler, identity, request id, args)
Job = tuple[Handler, bytes, int, Sequence[Any]]
# (identity, request id, ok, value-or-exception)
Done = tuple[bytes, int, bool, Any]


class WriteExecutor:
    """An ordered, batching executor on one thread.

    ``deliver(list[Done])`` is called on the executor thread after each batch; the server
    passes a function that schedules the replies on its loop.
    """

    def __init__(self, deliver: Callable[[list[Done]], None], max_batch: int = 1024,
                 name: str = "tstreams-writer") -> None:
        self._deliver = deliver
        self._max_batch = max_batch
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self.batches = 0
        self.calls = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, job: Job) -> None:
        with self._cond:
            self._jobs.append(job)
            if len(self._jobs) == 1:
                self._cond.notify()

    def stop(self, timeout: float | None = None) -> None:
        """Finish every queued job, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._stopping:
                    self._cond.wait()
                if not self._jobs:
                    return
                n = min(len(self._jobs), self._max_batch)
                jobs = [self._jobs.popleft() for _ in range(n)]
            self._deliver(self._execute(jobs))

    def _execute(self, jobs: list[Job]) -> list[Done]:
        out = execute(jobs)
        self.batches += len({id(j[0]) for j in jobs})
        self.calls += len(jobs)
        return out


def execute(jobs: list[Job]) -> list[Done]:
    """Run write jobs in order, handing consecutive jobs of the same handler to its ``batch``
    function at once. Never raises: a failing batch fails each of its calls alike."""
    out: list[Done] = []
    i = 0
    while i < len(jobs):
        h = jobs[i][0]
        j = i + 1
        while j < len(jobs) and jobs[j][0] is h:
            j += 1
        group = jobs[i:j]
        try:
            results = h.batch([job[3] for job in group])  # type: ignore[misc]
            if len(results) != len(group):
                raise RuntimeError(f"batch handler {h.name} returned {len(results)} results "
                                   f"for {len(group)} calls")
        except BaseException as e:  # noqa: BLE001 - every call of the group fails alike
            results = [(False, e)] * len(group)
        for job, (ok, value) in zip(group, results, strict=True):
            out.append((job[1], job[2], ok, value))
        i = j
    return out
