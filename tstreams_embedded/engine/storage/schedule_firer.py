"""The firer thread of an embedded engine: it turns due schedules into transactions.

The schedules' layout, and what firing one does, are :mod:`..protocol.schedules`'s; the
records are applied by :mod:`.apply`. This thread belongs to storage: :class:`~.core.Core`
starts it with its own methods (no other backend runs one).

**Who fires.** :class:`Firer`, a thread of every embedded engine (``ts.open``, and so of
``tstreams serve``): it sleeps until the earliest due time (woken at once by a new
schedule written through this engine, within :data:`MAX_SLEEP` otherwise) and submits
:class:`~..protocol.ops.FireSchedule` records; two processes on one directory may both
try, only one write fires. A cluster's nodes do not run it: the leader fires (see
``docs/SCHEDULES.md``).

**Not behind an fsync.** The firer's writes do not wait for an fsync: a durable write that
arrives while another group's fsync runs would wait for it before it even commits (group
commit), and the firer would then wait for its own; under a durable write load that made
deliveries late by one or two fsyncs. A firing is atomic whether or not it is on disk yet
(the schedule is deleted in the write that creates its transaction), so a firing lost to a
power failure leaves the schedule pending and it fires again after the restart: exactly
once still holds (a process kill loses nothing committed). The firer makes its firings
durable itself (an fsync) as soon as no schedule is due within :data:`SYNC_SLACK_MS`, and at
the latest :data:`MAX_UNSYNCED_MS` after the first firing it has not synced yet, and
any durable write after a firing (a consumer's checkpoint of the fired transaction, say)
covers it, as an fsync covers every commit before it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ... import errors

log = logging.getLogger(__name__)

#: the longest a firer sleeps without a commit waking it (seconds)
MAX_SLEEP = 0.5
#: the firer syncs its firings to disk once no schedule is due within this many ms
SYNC_SLACK_MS = 50
#: ... and at the latest this many ms after the first unsynced firing (schedules due one
#: after the other without a gap of SYNC_SLACK_MS must not keep firings off the disk for ever)
MAX_UNSYNCED_MS = 1_000


class Firer:
    """The thread that fires the due schedules of one embedded engine (see the module
    docstring): ``next_due()`` is the earliest due time (None: none), ``fire_due()`` fires
    every schedule due now without waiting for an fsync, ``sync()`` makes what it fired
    durable. It sleeps until the earliest due time, at most :data:`MAX_SLEEP` (schedules
    written by other processes are seen within that), and :meth:`wake` (the engine calls it
    after each write of its own that stored a schedule) wakes it at once. Ordinary commits
    do not wake it: under a write load it costs nothing but its sleeps."""

    def __init__(self, clock: Callable[[], int], next_due: Callable[[], int | None],
                 fire_due: Callable[[], int], sync: Callable[[], None]) -> None:
        self._clock = clock
        self._next_due = next_due
        self._fire_due = fire_due
        self._sync = sync
        self._stop = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tstreams-schedules", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        unsynced_since: int | None = None  # the clock at the first firing since the last sync
        while not self._stop:
            try:
                due = self._next_due()
                now = self._clock()
                if unsynced_since is not None and (due is None or due - now > SYNC_SLACK_MS
                                                   or now - unsynced_since >= MAX_UNSYNCED_MS):
                    self._sync()  # nothing due soon, or fired unsynced for long enough: make it durable
                    unsynced_since = None
                    continue
                if due is not None and due <= now:
                    if self._fire_due() > 0 and unsynced_since is None:
                        unsynced_since = now
                    continue
                sleep = MAX_SLEEP if due is None else min(MAX_SLEEP, max(0.001, (due - now) / 1000))
                self._wake.wait(sleep)
                self._wake.clear()
            except errors.EngineClosed:
                return
            except Exception:  # noqa: BLE001 - the firer must not die silently, nor kill the app
                log.exception("tstreams: firing due schedules failed; will retry")
                self._wake.wait(MAX_SLEEP)

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
