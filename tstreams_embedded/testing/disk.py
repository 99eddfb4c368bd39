"""A node's log fsync under test control: :class:`FaultyDisk` (``Node(..., log_fsync=disk.fsync)``)
makes every fsync fail with ``EIO`` while :attr:`FaultyDisk.failing` is set, and wait while
:attr:`FaultyDisk.stalled` is set (a slow disk: a crash meanwhile loses what it was syncing)."""

from __future__ import annotations

import errno

import lmdb

from ..cluster.runtime import REAL, Runtime


class FaultyDisk:
    """See the module docstring."""

    def __init__(self, runtime: Runtime = REAL) -> None:
        self.failing = False
        self.failures = 0
        self.stalled = runtime.event()
        self._released = runtime.event()

    def release(self) -> None:
        """End a stall: fsyncs waiting fail (the node crashed meanwhile) or go on."""
        self.stalled.clear()
        self._released.set()

    def fsync(self, env: lmdb.Environment) -> None:
        if self.stalled.is_set():
            self._released.clear()
            self._released.wait(30)
        if self.failing:
            self.failures += 1
            raise OSError(errno.EIO, "fsync failed (injected)")
        env.sync(True)
