"""A node's disks under test control. The log's fsync: :class:`FaultyDisk` (``Node(..., log_fsync=disk.fsync)``)
makes every fsync fail with ``EIO`` while :attr:`FaultyDisk.failing` is set, and wait while
:attr:`FaultyDisk.stalled` is set (a slow disk: a crash meanwhile loses what it was syncing). The engine state's:
:class:`StateDisk` keeps what a power loss would leave of it."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import lmdb

if TYPE_CHECKING:
    from ..engine.storage.core import Core

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


class StateDisk:
    """A node's engine state as a power loss would leave it (``Node(..., state_fsync=disk.fsync)``):
    each fsync of the state also keeps a copy of it (the *image*, in ``image_dir``), and
    :meth:`restore` puts the image back in place of the data file, losing every apply made
    after the last fsync (LMDB with ``sync=False, metasync=False``: a crash can lose the last
    commits). :meth:`keep` takes an image at once (a node's start: what it opens is on disk)."""

    def __init__(self, image_dir: str | os.PathLike[str]) -> None:
        self.image_dir = Path(image_dir)
        self.syncs = 0

    def fsync(self, core: Core) -> None:
        core.store.sync()
        self.keep(core)
        self.syncs += 1

    def keep(self, core: Core) -> None:
        tmp = self.image_dir.with_name(self.image_dir.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        core.store.env.copy(str(tmp))
        shutil.rmtree(self.image_dir, ignore_errors=True)
        os.replace(tmp, self.image_dir)

    def restore(self, data: str | os.PathLike[str]) -> None:
        """Replace the (closed) engine's data file in ``data`` with the image."""
        shutil.copyfile(self.image_dir / "data.mdb", Path(data) / "data.mdb")
