"""Which process runs a member, and whether that process is provably dead.

A streams member records its :class:`ProcessId` in its group's table (see
:mod:`.app_members`). Another instance of the application on the **same host** can then tell
a member whose process is gone (SIGKILL, a crash, an OOM kill) from a member that is alive
but slow, without waiting for its lease to run out: the PID is not running any more, is a
zombie, or runs another process (PID reuse: its start time differs).

"Same host" is the host name *and* the boot (Linux ``boot_id``) *and* the PID namespace:
two containers sharing the host name and the kernel (``--network host``) do not see each
other's PIDs, so they never judge each other. A member on any other host (or with no
process record) is never judged: it expires by its lease.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import cache
from typing import Any

import psutil

#: start times of one process read by two processes may differ by rounding only
START_TIME_TOLERANCE_S = 0.01


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


@cache
def host_key() -> str:
    """This host's identity for PID checks: host name, boot, PID namespace."""
    try:
        pid_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_ns = ""
    boot = _read("/proc/sys/kernel/random/boot_id") or repr(psutil.boot_time())
    return f"{socket.gethostname()}|{boot}|{pid_ns}"


@dataclass(frozen=True)
class ProcessId:
    """A process: the host it runs on (:func:`host_key`), its PID and its start time."""

    host: str
    pid: int
    started: float

    @classmethod
    def current(cls) -> ProcessId:
        """This process."""
        return cls(host_key(), os.getpid(), psutil.Process().create_time())

    def to_wire(self) -> list[Any]:
        return [self.host, self.pid, self.started]

    @classmethod
    def from_wire(cls, v: Any) -> ProcessId | None:
        """The record written by :meth:`to_wire`, or None if ``v`` is not one."""
        if (isinstance(v, (list, tuple)) and len(v) == 3 and isinstance(v[0], str)
                and isinstance(v[1], int) and isinstance(v[2], (int, float))):
            return cls(v[0], v[1], float(v[2]))
        return None

    def is_dead_here(self) -> bool:
        """True only if this process ran on this host and provably is not running any more
        (no such PID, a zombie, or another process under its PID). False for a process of
        another host: that cannot be checked from here."""
        if self.host != host_key():
            return False
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.started) > START_TIME_TOLERANCE_S:
                return True  # the PID was reused
            return bool(proc.status() == psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:  # e.g. access denied: cannot tell, so not dead
            return False
