"""Giving back the pages of the engine's memory map that an app has read
(:class:`MappedPages`).

An embedded engine reads its LMDB file through a shared, read-only memory map: every page an
app reads stays mapped into the process, so its resident set grows with the input it has
read (about the input's size on disk after one pass), although those pages are the kernel's
page cache and not the app's memory. After every ``every_bytes`` of input read, the app
tells the kernel (``madvise(MADV_DONTNEED)`` on the map) that it does not need them mapped
any more: they stay in the page cache, and a later read maps them again. On a served engine
(no map in this process) and off Linux it does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger(__name__)

MADV_DONTNEED = 4  # Linux
#: input read between two releases
DEFAULT_EVERY_BYTES = 8 << 20


class MappedPages:
    """Counts the input an app reads from an engine directory and releases the map's pages."""

    def __init__(self, directory: str | None, every_bytes: int = DEFAULT_EVERY_BYTES) -> None:
        self.data_file = None if directory is None or not sys.platform.startswith("linux") \
            else os.path.realpath(os.path.join(directory, "data.mdb"))
        self.every_bytes = every_bytes
        self.read_bytes = 0
        self._madvise = None
        if self.data_file is not None:
            try:
                self._madvise = ctypes.CDLL(None, use_errno=True).madvise
            except (OSError, AttributeError):  # pragma: no cover - no libc madvise
                self.data_file = None

    def read(self, n_bytes: int) -> None:
        """``n_bytes`` of input were read; release the map's pages every ``every_bytes``."""
        if self.data_file is None:
            return
        self.read_bytes += n_bytes
        if self.read_bytes >= self.every_bytes:
            self.read_bytes = 0
            self.release()

    def release(self) -> int:
        """Unmap the read-only map's resident pages (they stay in the page cache); the bytes
        of the map advised."""
        if self.data_file is None or self._madvise is None:
            return 0
        advised = 0
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    fields = line.split(maxsplit=5)
                    if len(fields) == 6 and fields[5].rstrip("\n") == self.data_file and "w" not in fields[1] \
                            and "s" in fields[1]:
                        lo, hi = (int(x, 16) for x in fields[0].split("-"))
                        if self._madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), MADV_DONTNEED) == 0:
                            advised += hi - lo
        except OSError as exc:  # pragma: no cover - /proc not mounted
            log.debug("cannot release the engine map's pages: %s", exc)
            self.data_file = None
        return advised
