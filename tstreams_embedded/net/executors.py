"""Where the handlers that may not run on the server loop run.

:class:`WriteExecutor` is one thread that runs write calls **in arrival order**. Each time
it wakes it takes every queued call and hands consecutive calls of the same handler to
that handler's ``batch`` function at once, so a burst of small writes from many clients
(or many pipelined writes from one client) becomes one engine group commit with one
fsync. Results go back to the loop in one callback per batch; a batch function may return
a :class:`~.deferred.Deferred` to answer later, while the executor goes on with the next batch.

:class:`Executors` is the server's side of it: it sends ``write`` calls to the
:class:`WriteExecutor` (or runs them on the loop at the end of a drain, when writes never
wait for the disk), ``pool`` calls to a thread pool, counts the calls in flight (a
graceful stop waits for them) and hands results back to the loop.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tornado.ioloop import IOLoop

from .deferred import Deferred
from .registry import Handler
from .session import Session


class Call:
    """One request handed to an executor: who asked (``session``), its ``req_id`` and
    request ``flags`` (``NO_REPLY``), and the ``size`` in bytes it counts against its
    client's budget (and the write queue's, for a ``write`` call) until answered."""

    __slots__ = ("flags", "req_id", "session", "size", "write")

    def __init__(self, session: Session, req_id: int, flags: int, size: int, write: bool = False) -> None:
        self.session = session
        self.req_id = req_id
        self.flags = flags
        self.size = size
        self.write = write


# (handler, call, args)
Job = tuple[Handler, Call, Sequence[Any]]
# (call, ok, value-or-exception)
Done = tuple[Call, bool, Any]


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
            done = self._execute(jobs)
            if done:  # (deferred batches deliver their own, later)
                self._deliver(done)

    def _execute(self, jobs: list[Job]) -> list[Done]:
        out = execute(jobs, self._deliver)
        self.batches += len({id(j[0]) for j in jobs})
        self.calls += len(jobs)
        return out


def execute(jobs: list[Job], deliver_later: Callable[[list[Done]], None] | None = None) -> list[Done]:
    """Run write jobs in order, handing consecutive jobs of the same handler to its ``batch``
    function at once. Never raises: a failing batch fails each of its calls alike. A batch
    that returns a :class:`~.deferred.Deferred` is handed to ``deliver_later`` once complete (waited
    for here without one)."""
    out: list[Done] = []
    i = 0
    n = len(jobs)
    while i < n:
        h = jobs[i][0]
        j = i + 1
        while j < n and jobs[j][0] is h:
            j += 1
        group = jobs[i:j]
        try:
            results = h.batch([job[2] for job in group])  # type: ignore[misc]
            if isinstance(results, Deferred):
                if deliver_later is not None:
                    results.on_done(_delivering(deliver_later, group))
                    i = j
                    continue
                results = results.wait()
            if len(results) != len(group):
                raise RuntimeError(f"batch handler {h.name} returned {len(results)} results "
                                   f"for {len(group)} calls")
        except BaseException as e:  # noqa: BLE001 - every call of the group fails alike
            results = [(False, e)] * len(group)
        out += [(job[1], ok, value) for job, (ok, value) in zip(group, results, strict=True)]
        i = j
    return out


def _delivering(deliver: Callable[[list[Done]], None], group: list[Job]
                ) -> Callable[[list[tuple[bool, Any]]], None]:
    return lambda results: deliver(_done_of(group, results))


def _done_of(group: list[Job], results: Sequence[tuple[bool, Any]]) -> list[Done]:
    if len(results) != len(group):
        exc = RuntimeError(f"a deferred batch completed {len(results)} results for {len(group)} calls")
        return [(job[1], False, exc) for job in group]
    return [(job[1], ok, value) for job, (ok, value) in zip(group, results, strict=True)]


class Executors:
    """The write executor and the thread pool of a server, as seen from its loop.

    ``reply(list[Done])`` is called on the loop with the results of finished calls: in one
    callback per batch handed back by the threads, and at the end of each drain for writes
    run inline (``inline_writes``). Every method except the threads' own is called on the
    loop.
    """

    def __init__(self, loop: IOLoop, reply: Callable[[list[Done]], None], pool_threads: int,
                 inline_writes: bool) -> None:
        self._loop = loop
        self._reply = reply
        self._inline_writes = inline_writes
        self._inline_jobs: list[Job] = []
        self._inline_bytes = 0  # the sizes of the calls in _inline_jobs
        self._inline_batches = 0
        self._inline_calls = 0
        self._lock = threading.Lock()  # guards what the threads hand back
        self._done: list[Done] = []
        self._done_posted = False  # a callback that replies self._done is scheduled
        self._pending_write = 0
        self._pending_pool = 0
        #: Bytes of the write calls queued and not yet answered (updated on the loop).
        self.write_bytes = 0
        self._writer = WriteExecutor(self._deliver_writes)
        self._pool = ThreadPoolExecutor(pool_threads, thread_name_prefix="tstreams-pool")

    def write(self, h: Handler, call: Call, args: Sequence[Any]) -> None:
        """Queue a call of a ``write`` handler (run in arrival order, batched)."""
        call.write = True
        self.write_bytes += call.size
        if self._inline_writes:
            self._inline_jobs.append((h, call, args))
            self._inline_bytes += call.size
            return
        with self._lock:
            self._pending_write += 1
        self._writer.put((h, call, args))

    def pool(self, h: Handler, call: Call, args: Sequence[Any]) -> None:
        """Run a call of a ``pool`` handler on the thread pool."""
        with self._lock:
            self._pending_pool += 1
        self._pool.submit(self._run_pooled, h, call, args)

    def run_inline_writes(self) -> None:
        """Run the writes queued during this drain, as one batch (``inline_writes`` only)."""
        if not self._inline_jobs:
            return
        jobs, self._inline_jobs = self._inline_jobs, []
        self._inline_batches += 1
        self._inline_calls += len(jobs)
        done = execute(jobs)
        self.write_bytes -= self._inline_bytes  # every one of them is answered now
        self._inline_bytes = 0
        self._reply(done)

    @property
    def inline_pending(self) -> bool:
        """Whether writes wait for :meth:`run_inline_writes`."""
        return bool(self._inline_jobs)

    @property
    def busy(self) -> bool:
        """Whether calls are in flight or their replies not yet handed to ``reply``.
        Read racily by a stopping server, which polls it."""
        return bool(self._pending_write or self._pending_pool or self._done)

    @property
    def write_batches(self) -> int:
        return self._writer.batches + self._inline_batches

    @property
    def write_calls(self) -> int:
        return self._writer.calls + self._inline_calls

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the queued writes, drop the queued pool calls, reply what finished."""
        self._writer.stop(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._reply_done()

    # ------------------------------------------------------------------ threads
    def _run_pooled(self, h: Handler, call: Call, args: Sequence[Any]) -> None:
        try:
            done: Done = (call, True, h.fn(call.session, *args))
        except BaseException as e:  # noqa: BLE001
            done = (call, False, e)
        self._deliver([done], pooled=True)

    def _deliver_writes(self, done: list[Done]) -> None:
        self._deliver(done, pooled=False)

    def _deliver(self, done: list[Done], pooled: bool) -> None:
        with self._lock:
            self._done.extend(done)
            if pooled:
                self._pending_pool -= len(done)
            else:
                self._pending_write -= len(done)
            if self._done_posted:
                return
            self._done_posted = True
        self._loop.add_callback(self._reply_done)

    def _reply_done(self) -> None:
        with self._lock:
            done, self._done = self._done, []
            self._done_posted = False
        self._reply(self._written(done))

    def _written(self, done: list[Done]) -> list[Done]:
        """Take the answered write calls off :attr:`write_bytes` (on the loop)."""
        for call, _, _ in done:
            if call.write:
                self.write_bytes -= call.size
        return done
