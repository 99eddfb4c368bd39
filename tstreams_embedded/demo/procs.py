"""Starting a Spark job as a child process and killing all of it with SIGKILL.

A PySpark driver is a process tree: the Python driver, the JVM it launches (same process
group), and PySpark's worker *daemon*, which the JVM starts and which moves itself and its
forked Python workers into a **process group of its own** (``os.setpgid(0, 0)`` in
``pyspark/daemon.py``). Killing "the Spark job" therefore means killing the job's group and
every group its descendants lead. :func:`kill_tree` finds those groups while the tree is
intact, SIGKILLs the job's group first (so the JVM cannot start a new daemon), then the
others, and waits until no process of any of them is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence

import psutil

from tstreams_embedded.testing.polling import wait_until


def _proc_table() -> dict[int, tuple[int, int]]:
    """``pid -> (ppid, pgid)`` of every live process."""
    table: dict[int, tuple[int, int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        try:
            table[proc.pid] = (proc.info["ppid"], os.getpgid(proc.pid))
        except (ProcessLookupError, psutil.Error):
            continue
    return table


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid``."""
    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def process_groups(pid: int) -> list[int]:
    """The process groups of ``pid`` and its descendants (``pid``'s own group first)."""
    first = os.getpgid(pid)
    groups = [first]
    for d in sorted(descendants(pid)):
        try:
            g = os.getpgid(d)
        except ProcessLookupError:
            continue
        if g and g not in groups:
            groups.append(g)
    return groups


def members(groups: Sequence[int]) -> list[int]:
    """Live processes (not zombies) that belong to any of ``groups``."""
    wanted = set(groups)
    out = []
    for p, (_, g) in _proc_table().items():
        if g in wanted:
            try:
                if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.NoSuchProcess:
                continue
    return out


def start_job(argv: Sequence[str], log_path: str, env: dict[str, str] | None = None,
              cwd: str | None = None) -> subprocess.Popen:
    """Start ``argv`` as the leader of a new session/process group, output to ``log_path``."""
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
    finally:
        log.close()


def kill_tree(proc: subprocess.Popen, sig: int = signal.SIGKILL, timeout: float = 60.0) -> list[int]:
    """Send ``sig`` to every process group of ``proc``'s tree; wait until all are gone.

    Returns the groups signalled. Never signals this process's own group.
    """
    try:
        groups = process_groups(proc.pid)
    except ProcessLookupError:
        groups = []
    own = os.getpgrp()
    groups = [g for g in groups if g != own and g > 1]
    for g in groups:
        try:
            os.killpg(g, sig)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass

    def all_gone() -> bool:
        if not members(groups):
            return True
        if sig == signal.SIGKILL:  # a member forked after the first signal
            for g in groups:
                try:
                    os.killpg(g, sig)
                except ProcessLookupError:
                    pass
        return False

    if not wait_until(all_gone, timeout, 0.1) and (left := members(groups)):
        raise RuntimeError(f"processes {left} of groups {groups} survived signal {sig}")
    return groups
