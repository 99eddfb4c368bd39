"""Replicated scheduled delivery: the leader fires the due schedules through the log.

On one engine, the firer thread of :mod:`tstreams_embedded.engine.storage.schedule_firer` turns due
schedules into transactions. A cluster's nodes run none (a follower must change its state
only through the replicated log); instead the **leader** lists the schedules due by its wall
clock (:meth:`Core.due_schedule_firings <tstreams_embedded.engine.storage.core.Core.due_schedule_firings>`)
and replicates the ``FireSchedule`` records as a maintenance entry
(:meth:`Node.submit_maintenance <.node.Node.submit_maintenance>`), which every node applies
at the same log position and entry time, so every node delivers the same transaction with
the same ID. A ``FireSchedule`` applies only to a schedule still pending and due at the
entry's time: a record replicated twice (a leader that failed over mid-way, and its
successor) fires once. After a failover the new leader finds the schedules still pending
in its state and fires them.
"""

from __future__ import annotations

import logging
import threading

from .. import errors
from ..engine.storage.schedule_firer import MAX_SLEEP
from .node import Node

log = logging.getLogger(__name__)

#: how often the leader looks for due schedules when none is due sooner (seconds)
POLL = 0.05


class ReplicatedSchedules:
    """Fires due schedules while ``node`` leads, in its own thread (:meth:`start` /
    :meth:`stop`)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.fired = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="cluster-schedules", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self._pause()):
            try:
                if self.node.serving():
                    self.run_once()
            except (errors.NotLeader, errors.ClusterUnavailable, errors.EngineClosed) as exc:
                log.info("firing schedules stopped: %s", exc)
            except Exception:  # noqa: BLE001 - the loop must survive; the next pass retries
                log.exception("firing schedules failed")

    def _pause(self) -> float:
        try:
            due = self.node.core.next_schedule_due() if self.node.serving() else None
        except errors.TStreamsError:
            return MAX_SLEEP
        if due is None:
            return POLL * 4
        return min(POLL, max(0.0, (due - self.node.timer.wall_ms()) / 1000))

    def run_once(self) -> int:
        """Leader only (else ``NotLeader``): replicate the firing of every schedule due by
        the wall clock; how many fired."""
        self.node.check_serving()
        fired = 0
        while True:
            batch = self.node.core.due_schedule_firings(self.node.timer.wall_ms())
            if not batch:
                break
            ok, value = self.node.submit_maintenance(batch)
            if not ok:
                raise value
            n = sum(1 for txn_id in value if txn_id is not None)
            fired += n
            if n == 0:  # listed but not due at the entry's time (clock skew): wait for the next pass
                break
        self.fired += fired
        return fired
