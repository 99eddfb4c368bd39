"""A node's log fsync under test control: :class:`FaultyDisk` (``Node(..., log_fsync=disk.fsync)``)
makes every fsync fail with ``EIO`` while :attr:`FaultyDisk.failing` is set."""

from __future__ import annotations

import errno

import lmdb


class FaultyDisk:
    """See the module docstring."""

    def __init__(self) -> None:
        self.failing = False
        self.failures = 0

    def fsync(self, env: lmdb.Environment) -> None:
        if self.failing:
            self.failures += 1
            raise OSError(errno.EIO, "fsync failed (injected)")
        env.sync(True)
