"""A deterministic scheduler and simulated clock: :class:`Scheduler` is a
:class:`~tstreams_embedded.cluster.runtime.Runtime` under which real cluster code runs one
task at a time, in an order drawn from a seed.

Each task is a greenlet on the calling thread, so exactly one runs at a time. A task gives
up control only inside a runtime call that waits (an event, a condition, a contended lock, a
join, a sleep): it parks with what wakes it and its deadline, and the scheduler picks the
next task among the runnable ones with its seeded random generator. When no task is
runnable, the simulated clock jumps to the earliest deadline. Every step also moves the
clock by :attr:`Scheduler.step_cost` (so that a task polling without a timeout lets time
pass). So the same seed, over the same code, gives the same interleaving and the same
simulated times; :attr:`Scheduler.trace_digest` hashes the sequence of steps (task and
time), and two runs of one seed give the same digest.

The rules for the code run under it are those of :mod:`tstreams_embedded.cluster.runtime`:
wait only through the runtime, and never hold a real lock (or an LMDB write transaction)
across such a wait: a task that blocks on something real blocks the whole simulation (the
test's own timeout then reports it).

To explore more interleavings, a task is held back now and then at a
:meth:`Scheduler.preempt` point (where the code marks a race a preempted thread opens) and,
optionally, before it takes a lock; a scripted schedule fixes the delay of a named point
instead. Tasks spawned inside :meth:`Scheduler.grouped` form a group (a node's process)
that :meth:`Scheduler.pause_group` stops where it is, as SIGSTOP would.

    sched = Scheduler(seed=7)
    sched.run(lambda: workload(sched))   # workload runs as the first task, "main"
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import greenlet

log = logging.getLogger(__name__)

EPOCH_WALL_MS = 1_767_225_600_000  # the simulated wall clock at time 0 (2026-01-01T00:00:00Z)
PREEMPT_MAX = 0.05  # simulated seconds a task may be held back at a preemption point
LOCK_PREEMPT_MAX = 0.005  # simulated seconds a task may be held back before taking a lock


class SimulationOver(BaseException):
    """Thrown into a task still parked when the simulation ends (it unwinds the task)."""


class Deadlock(RuntimeError):
    """Every task waits without a deadline (nothing can ever run again), or the run went
    past its simulated time limit."""


class _Queue:
    """Tasks parked on one primitive, first come first woken."""

    __slots__ = ("tasks",)

    def __init__(self) -> None:
        self.tasks: list[_Task] = []


class _Task:
    __slots__ = ("id", "name", "group", "glet", "runnable", "deadline", "woken", "queue", "done", "joiners")

    def __init__(self, task_id: int, name: str, group: str | None) -> None:
        self.id = task_id
        self.name = name
        self.group = group  # e.g. the node it belongs to (pause_group stops them all)
        self.glet: greenlet.greenlet | None = None
        self.runnable = True
        self.deadline: float | None = None
        self.woken = False
        self.queue: _Queue | None = None
        self.done = False
        self.joiners = _Queue()


class SimTask:
    """The handle :meth:`Scheduler.spawn` returns (a :class:`~..cluster.runtime.Task`)."""

    def __init__(self, scheduler: Scheduler, task: _Task) -> None:
        self._scheduler = scheduler
        self._task = task

    @property
    def name(self) -> str:
        return self._task.name

    def join(self, timeout: float | None = None) -> None:
        if not self._task.done:
            self._scheduler.park(self._task.joiners, timeout)

    def is_alive(self) -> bool:
        return not self._task.done


class Scheduler:
    """See the module docstring. It is also the nodes' :class:`~..cluster.timesource.TimeSource`
    (:meth:`monotonic`, :meth:`wall_ms`: the simulated clock)."""

    def __init__(self, seed: int, step_cost: float = 20e-6, max_time: float = 600.0,
                 preempt_chance: float = 0.05, preempt_delays: dict[str, float] | None = None,
                 lock_preempt_chance: float = 0.0) -> None:
        """``preempt_chance``: how often a task at a :meth:`preempt` point is held back for a
        random while (up to :data:`PREEMPT_MAX` simulated seconds); ``preempt_delays``: fixed
        delays for named points instead (a scripted schedule); ``lock_preempt_chance``: how
        often a task is held back (up to :data:`LOCK_PREEMPT_MAX`) before taking a lock."""
        self.lock_preempt_chance = lock_preempt_chance
        self.seed = seed
        self.preempt_chance = preempt_chance
        self.preempt_delays = dict(preempt_delays or {})
        self.random = random.Random(seed)
        self.step_cost = step_cost
        self.max_time = max_time
        self.now = 0.0
        self.steps = 0
        self.tasks: list[_Task] = []
        self.current: _Task | None = None
        #: exceptions that ended a task other than the main one (the run fails on them)
        self.errors: list[tuple[str, BaseException]] = []
        self._ids = 0
        self._group: str | None = None  # the group of the tasks spawned now (grouped)
        self._paused: set[str] = set()
        self._hub: greenlet.greenlet | None = None
        self._trace = hashlib.sha256()

    # ------------------------------------------------------------------ Runtime
    def monotonic(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return EPOCH_WALL_MS + int(self.now * 1000)

    def sleep(self, seconds: float) -> None:
        self.park(None, max(0.0, seconds))

    def preempt(self, point: str) -> None:
        """Let other tasks run here: for ``preempt_delays[point]`` simulated seconds if set,
        else, drawn from the seed, now and then for a random while, otherwise just a yield."""
        delay = self.preempt_delays.get(point)
        if delay is None:
            delay = self.random.uniform(0.0, PREEMPT_MAX) if self.random.random() < self.preempt_chance else 0.0
        self.park(None, delay)

    def spawn(self, name: str, target: Callable[..., Any], *args: Any) -> SimTask:
        if self._hub is None:
            raise RuntimeError("spawn outside a simulation (Scheduler.run)")
        task = self._new_task(name)

        def body() -> None:
            try:
                target(*args)
            except SimulationOver:
                pass
            except BaseException as exc:  # noqa: BLE001 - recorded; the run fails on it
                log.exception("task %s failed", name)
                self.errors.append((name, exc))
            finally:
                self._finish(task)

        task.glet = greenlet.greenlet(body, parent=self._hub)
        return SimTask(self, task)

    def event(self) -> SimEvent:
        return SimEvent(self)

    # ------------------------------------------------------------------ processes
    @contextmanager
    def grouped(self, group: str) -> Iterator[None]:
        """Tasks spawned inside (and the tasks they spawn) belong to ``group`` (a node: one
        process, which :meth:`pause_group` stops)."""
        previous, self._group = self._group, group
        try:
            yield
        finally:
            self._group = previous

    def pause_group(self, group: str) -> None:
        """Stop every task of ``group`` where it is, as SIGSTOP stops a process: none runs,
        even woken or past its deadline, until :meth:`resume_group` (then late timeouts fire
        at once). The clock goes on."""
        self._paused.add(group)

    def resume_group(self, group: str) -> None:
        self._paused.discard(group)

    def group_paused(self, group: str) -> bool:
        return group in self._paused

    def lock(self) -> SimLock:
        return SimLock(self, reentrant=False)

    def rlock(self) -> SimLock:
        return SimLock(self, reentrant=True)

    def condition(self, lock: Any = None) -> SimCondition:
        return SimCondition(self, lock if lock is not None else SimLock(self, reentrant=True))

    # ------------------------------------------------------------------ running
    def run(self, main: Callable[[], Any]) -> Any:
        """Run ``main`` as the first task until it returns, then unwind every task still
        parked (:class:`SimulationOver`). Returns what ``main`` returned; raises what it
        raised, or :class:`Deadlock`."""
        if self._hub is not None:
            raise RuntimeError("a Scheduler runs once")
        self._hub = greenlet.getcurrent()
        outcome: list[Any] = []
        failure: list[BaseException] = []

        def first() -> None:
            try:
                outcome.append(main())
            except BaseException as exc:  # noqa: BLE001 - raised by run()
                failure.append(exc)

        main_task = self.spawn("main", first)
        try:
            while main_task.is_alive():
                nxt = self._pick()
                self.current = nxt
                assert nxt.glet is not None
                nxt.glet.switch()
                self.current = None
        except Deadlock as exc:
            failure.append(exc)
        finally:
            self._shutdown()
        if failure:
            raise failure[0]
        return outcome[0]

    @property
    def trace_digest(self) -> str:
        """A hash of every step so far (which task ran, at which simulated time)."""
        return self._trace.hexdigest()

    # ------------------------------------------------------------------ parking
    def park(self, queue: _Queue | None, timeout: float | None) -> bool:
        """Park the current task on ``queue`` (None: only a deadline) for at most ``timeout``
        seconds; True if it was woken, False on timeout."""
        me = self.current
        if me is None or me.glet is not greenlet.getcurrent():
            raise RuntimeError("a simulated wait outside a simulation task")
        me.runnable = False
        me.woken = False
        me.deadline = None if timeout is None else self.now + max(0.0, timeout)
        me.queue = queue
        if queue is not None:
            queue.tasks.append(me)
        assert self._hub is not None
        self._hub.switch()
        return me.woken

    def wake(self, queue: _Queue, n: int | None = None) -> None:
        """Make the first ``n`` (all: None) tasks parked on ``queue`` runnable."""
        if not queue.tasks:
            return
        woken = queue.tasks if n is None else queue.tasks[:n]
        queue.tasks = [] if n is None else queue.tasks[n:]
        for t in woken:
            t.queue = None
            t.runnable = True
            t.woken = True
            t.deadline = None

    def _new_task(self, name: str) -> _Task:
        self._ids += 1
        group = self._group if self._group is not None else (self.current.group if self.current else None)
        task = _Task(self._ids, name, group)
        self.tasks.append(task)
        return task

    def _finish(self, task: _Task) -> None:
        task.done = True
        self.wake(task.joiners)
        if task in self.tasks:
            self.tasks.remove(task)

    def _pick(self) -> _Task:
        """The next task to run (see the module docstring)."""
        self.now += self.step_cost
        while True:
            runnable: list[_Task] = []
            earliest: float | None = None
            paused = self._paused
            for t in self.tasks:
                if paused and t.group in paused:
                    continue
                if not t.runnable and t.deadline is not None:
                    if t.deadline <= self.now:
                        self._expire(t)
                    elif earliest is None or t.deadline < earliest:
                        earliest = t.deadline
                if t.runnable:
                    runnable.append(t)
            if runnable:
                break
            if earliest is None:
                names = ", ".join(t.name for t in self.tasks)
                raise Deadlock(f"every task waits without a deadline at simulated {self.now:.3f} s: {names}")
            self.now = earliest
        if self.now > self.max_time:
            raise Deadlock(f"the simulation ran past {self.max_time:g} simulated seconds")
        nxt = runnable[self.random.randrange(len(runnable))] if len(runnable) > 1 else runnable[0]
        self.steps += 1
        self._trace.update(b"%d %d %.6f\n" % (self.steps, nxt.id, self.now))
        return nxt

    @staticmethod
    def _expire(t: _Task) -> None:
        if t.queue is not None:
            try:
                t.queue.tasks.remove(t)
            except ValueError:
                pass
            t.queue = None
        t.runnable = True
        t.woken = False
        t.deadline = None

    def _shutdown(self) -> None:
        """The main task returned: every other task unwinds, one at a time."""
        for t in list(self.tasks):
            self.current = t
            if t.glet is not None and not t.glet.dead:
                try:
                    t.glet.throw(SimulationOver())
                except SimulationOver:
                    pass
                if not t.glet.dead:  # it waited again while unwinding: abandoned
                    log.warning("task %s did not unwind", t.name)
        self.tasks = []
        self.current = None


class SimEvent:
    """:class:`threading.Event` under a :class:`Scheduler`."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._s = scheduler
        self._flag = False
        self._queue = _Queue()

    def set(self) -> None:
        self._flag = True
        self._s.wake(self._queue)

    def clear(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        return self._s.park(self._queue, timeout) or self._flag


class SimLock:
    """:class:`threading.Lock` (or ``RLock``) under a :class:`Scheduler`."""

    def __init__(self, scheduler: Scheduler, reentrant: bool) -> None:
        self._s = scheduler
        self._reentrant = reentrant
        self._owner: _Task | None = None
        self._count = 0
        self._queue = _Queue()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me = self._s.current
        if self._owner is me and self._reentrant:
            self._count += 1
            return True
        deadline = None if timeout < 0 else self._s.now + timeout
        s = self._s
        if s.lock_preempt_chance and s.random.random() < s.lock_preempt_chance:
            s.park(None, s.random.uniform(0.0, LOCK_PREEMPT_MAX))  # preempted before taking it
        while self._owner is not None:
            if not blocking:
                return False
            if self._owner is me:
                raise Deadlock(f"task {me and me.name} acquires a lock it holds")
            left = None if deadline is None else deadline - self._s.now
            if left is not None and left <= 0:
                return False
            self._s.park(self._queue, left)
        self._owner = me
        self._count = 1
        return True

    def release(self) -> None:
        if self._owner is None:
            raise RuntimeError("release of an unlocked lock")
        self._count -= 1
        if self._count == 0:
            self._owner = None
            self._s.wake(self._queue, 1)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None, /) -> None:
        self.release()

    # for SimCondition: give up and take back a lock held (any depth)
    def _release_all(self) -> int:
        count = self._count
        self._count = 1
        self.release()
        return count

    def _acquire_again(self, count: int) -> None:
        self.acquire()
        self._count = count


class SimCondition:
    """:class:`threading.Condition` under a :class:`Scheduler`."""

    def __init__(self, scheduler: Scheduler, lock: SimLock) -> None:
        self._s = scheduler
        self._lock = lock
        self._queue = _Queue()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None, /) -> None:
        self._lock.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        count = self._lock._release_all()
        try:
            return self._s.park(self._queue, timeout)
        finally:
            self._lock._acquire_again(count)

    def notify(self, n: int = 1) -> None:
        self._s.wake(self._queue, n)

    def notify_all(self) -> None:
        self._s.wake(self._queue)
