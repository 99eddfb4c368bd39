"""Child processes stopped by PID: one "SIGTERM, wait, SIGKILL" for every server a test or
benchmark starts, and :class:`ManagedProcess`, the base of the server classes here.
"""

from __future__ import annotations

import multiprocessing.process
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, Union

import psutil

from .polling import wait_until

#: What :func:`stop_process` accepts: a ``subprocess.Popen`` or a ``multiprocessing.Process``.
Stoppable = Union["subprocess.Popen[Any]", multiprocessing.process.BaseProcess]

P = TypeVar("P", bound="ManagedProcess")


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _wait(proc: Stoppable, timeout: float) -> int | None:
    """Wait up to ``timeout`` seconds; return the exit status, or ``None`` if still running."""
    if isinstance(proc, subprocess.Popen):
        try:
            rc: int = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return rc
    proc.join(timeout)
    return proc.exitcode


def _poll(proc: Stoppable) -> int | None:
    return proc.poll() if isinstance(proc, subprocess.Popen) else proc.exitcode


def stop_process(proc: Stoppable | None, timeout: float = 10.0, *, sig: int = signal.SIGTERM,
                 kill_timeout: float = 10.0) -> int | None:
    """Stop a child process by PID: send ``sig`` (SIGTERM), wait ``timeout`` seconds, then
    SIGKILL and wait ``kill_timeout`` seconds more. Return its exit status (negative: the
    signal that ended it), or ``None`` if ``proc`` is ``None``.

    A process that already exited is only reaped. A paused process (SIGSTOP) is continued
    so that it can handle ``sig``. Raises :class:`TimeoutError` if it survives SIGKILL.
    """
    if proc is None:
        return None
    rc = _poll(proc)
    if rc is not None:
        return rc
    pid = proc.pid
    assert pid is not None, "the process was never started"
    if _signal(pid, sig):
        _signal(pid, signal.SIGCONT)
    rc = _wait(proc, timeout)
    if rc is None:
        _signal(pid, signal.SIGKILL)
        rc = _wait(proc, kill_timeout)
        if rc is None:
            raise TimeoutError(f"process {pid} survived SIGKILL for {kill_timeout} s")
    return rc


def stop_processes(procs: Sequence[Stoppable | None], timeout: float = 10.0) -> list[int | None]:
    """:func:`stop_process` for several processes at once: SIGTERM to all of them first, so
    that they stop side by side, then each is waited for (SIGKILL after ``timeout``)."""
    for proc in procs:
        if proc is not None and _poll(proc) is None and proc.pid is not None and _signal(proc.pid, signal.SIGTERM):
            _signal(proc.pid, signal.SIGCONT)
    return [_finish_stop(proc, timeout) for proc in procs]


def _finish_stop(proc: Stoppable | None, timeout: float) -> int | None:
    """Wait ``timeout`` seconds for a process sent SIGTERM, then SIGKILL it (see :func:`stop_process`)."""
    if proc is None:
        return None
    rc = _wait(proc, timeout)
    if rc is None:
        return stop_process(proc, 0.0, sig=signal.SIGKILL)
    return rc


def kill_process(proc: Stoppable | None, timeout: float = 30.0) -> int | None:
    """SIGKILL ``proc`` by PID and reap it (see :func:`stop_process`)."""
    return stop_process(proc, 0.0, sig=signal.SIGKILL, kill_timeout=timeout)


class ManagedProcess:
    """A server in a child process: started from an argument list, output appended to
    :attr:`log_path`, waited for until ready, stopped by PID.

    Subclasses implement :meth:`command` and :meth:`is_ready` (and may override
    :meth:`environment` and :meth:`before_start`). The object can be started again after
    it stopped (:meth:`restart`), with the same arguments, port and data. As a context
    manager it starts (if not running) on entry and stops on exit.
    """

    #: Name used in messages.
    name = "process"
    #: Seconds :meth:`start` waits for :meth:`is_ready` by default.
    start_timeout = 60.0
    #: Seconds :meth:`stop` waits after SIGTERM before SIGKILL by default.
    stop_timeout = 20.0

    def __init__(self, log_path: str | os.PathLike[str], cwd: str | os.PathLike[str] | None = None) -> None:
        self.log_path = Path(log_path)
        self.cwd = None if cwd is None else str(cwd)
        self.proc: subprocess.Popen[bytes] | None = None
        self.was_ready = False  # started successfully once (its ports are then kept)

    def _spawn(self) -> None:
        self.before_start()
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(list(self.command()), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=self.cwd, env=self.environment())

    # -- for subclasses ------------------------------------------------------------------
    def command(self) -> Sequence[str]:
        """The argument list to run."""
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        """The environment of the child (``None``: this process's)."""
        return None

    def before_start(self) -> None:
        """Called before each start (remove stale ready files, write configuration…)."""

    def is_ready(self) -> bool:
        """Whether the started process serves requests."""
        raise NotImplementedError

    def choose_new_ports(self) -> bool:
        """Pick new free ports for a first start whose ports were taken by another process
        after they were picked (:func:`~tstreams_embedded.testing.ports.free_port` races);
        return whether it did. By default it cannot (``False``)."""
        return False

    def port_taken(self, log_tail: str) -> bool:
        """Whether the process exited because one of its ports was taken (its log says
        :class:`~tstreams_embedded.errors.BindFailed`)."""
        return "BindFailed" in log_tail

    # -- lifecycle -----------------------------------------------------------------------
    def start(self: P, timeout: float | None = None) -> P:
        """Start the process and wait until :meth:`is_ready`.

        Raises :class:`RuntimeError` with the end of the log if it exits first or is not
        ready within ``timeout`` seconds (it is then stopped).
        """
        return self.spawn().wait_ready(timeout)

    def spawn(self: P) -> P:
        """Start the process without waiting for it (then :meth:`wait_ready`): several
        processes spawned before any is waited for start side by side."""
        if self.alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._spawn()
        return self

    def wait_ready(self: P, timeout: float | None = None) -> P:
        """Wait until the process :meth:`spawn` started :meth:`is_ready` (see :meth:`start`)."""
        limit = self.start_timeout if timeout is None else timeout
        retries = 3  # a first start whose picked ports were taken meanwhile: new ports

        def ready() -> bool:
            nonlocal retries
            assert self.proc is not None
            if self.proc.poll() is not None:
                self.stop()
                tail = self.log_tail()
                if not self.was_ready and retries and self.port_taken(tail[-2000:]) and self.choose_new_ports():
                    retries -= 1
                    self._spawn()
                    return False
                raise RuntimeError(f"{self.name} exited with status {self.proc.returncode} before it was ready; "
                                   f"log {self.log_path}:\n{tail}")
            return self.is_ready()

        if not wait_until(ready, limit, 0.02):
            self.stop()
            raise RuntimeError(f"{self.name} was not ready after {limit} s; log {self.log_path}:\n"
                               f"{self.log_tail()}")
        self.was_ready = True
        return self

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM by PID, SIGKILL after ``timeout`` seconds (:attr:`stop_timeout`); return
        the exit status (``None`` if never started). Safe to call twice."""
        return stop_process(self.proc, self.stop_timeout if timeout is None else timeout)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait (no SIGKILL): return the exit status of a graceful stop.

        Raises :class:`subprocess.TimeoutExpired` if it is still running after ``timeout``.
        """
        proc = self._running()
        _signal(proc.pid, signal.SIGTERM)
        _signal(proc.pid, signal.SIGCONT)
        return proc.wait(timeout)

    def kill(self) -> int | None:
        """SIGKILL by PID and reap; return the exit status (``-9`` if it was running)."""
        return kill_process(self.proc)

    def pause(self, timeout: float = 10.0) -> None:
        """SIGSTOP: the process stays alive but does nothing (a hung server). Returns once
        the process is stopped (the signal is delivered asynchronously: without waiting, a
        request sent right after could still be answered)."""
        pid = self._running().pid
        os.kill(pid, signal.SIGSTOP)

        def stopped() -> bool:
            try:
                status = psutil.Process(pid).status()
            except psutil.NoSuchProcess:  # gone: nothing to wait for
                return True
            return status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)

        wait_until(stopped, timeout, 0.002)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        os.kill(self._running().pid, signal.SIGCONT)

    def restart(self: P, timeout: float | None = None) -> P:
        """:meth:`stop` (if running), then :meth:`start` again with the same arguments."""
        self.stop()
        return self.start(timeout)

    # -- state ---------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        """PID of the current (or last) process."""
        if self.proc is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        """Exit status of the last process, ``None`` while it runs or if never started."""
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        """Whether the process runs (a paused one does)."""
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        """The whole log file (every start appends to it)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the log, for failure messages."""
        return self.log()[-chars:]

    def __enter__(self: P) -> P:
        return self if self.alive() else self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.proc.pid}" if self.alive() and self.proc else "stopped"
        return f"<{type(self).__name__} {state} log={str(self.log_path)!r}>"

    # -- internals -----------------------------------------------------------------------
    def _running(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} is not running")
        return self.proc
