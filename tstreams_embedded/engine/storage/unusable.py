"""Why a data directory cannot be used at all, as :class:`DataDirectoryUnusable`.

When creating or opening the LMDB environment fails, :func:`unusable_directory` tells a
path the engine can never use (a parent that is missing or a file, no permission, a
read-only or special file system such as ``/proc``, a ``data.mdb`` or ``lock.mdb`` that is a
directory) from other failures, which :func:`.store.translate` reports (a full disk is
``StorageFull``, a damaged file ``DataCorrupted``).
"""

from __future__ import annotations

import errno
import os

import lmdb

from ...errors import DataDirectoryUnusable
from .directory import DATA_FILE, LOCK_FILE

#: error numbers of a path that cannot be created or opened as a data directory
UNUSABLE_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.EROFS)


def check_files(path: str) -> None:
    """Refuse a directory whose ``data.mdb`` or ``lock.mdb`` is not a regular file, before
    LMDB creates anything in it."""
    for name in (DATA_FILE, LOCK_FILE):
        file = os.path.join(path, name)
        if os.path.exists(file) and not os.path.isfile(file):
            raise DataDirectoryUnusable(f"{file!r} is not a regular file (a directory?): {path!r} cannot be "
                                        f"opened as a data directory; move {name} away")


def unusable_directory(path: str, exc: BaseException) -> DataDirectoryUnusable | None:
    """The error for ``exc``, raised creating or opening the environment in ``path``, when
    ``path`` cannot be a data directory; None for any other failure."""
    code = exc.code if isinstance(exc, lmdb.Error) else getattr(exc, "errno", None)
    if code in UNUSABLE_ERRNOS:
        return DataDirectoryUnusable(f"{path!r} cannot be created or opened as a data directory: "
                                     f"{os.strerror(code)}")
    return None
