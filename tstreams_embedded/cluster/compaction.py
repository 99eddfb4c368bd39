"""Replicated compaction: stream TTLs free space on every node of a cluster.

On a single node, :meth:`Core.compact <tstreams_embedded.engine.storage.core.Core.compact>`
deletes the transactions past their stream's TTL. In a cluster that would make the nodes'
states differ, so the **leader** computes the same work
(:meth:`~tstreams_embedded.engine.storage.core.Core.expired_compactions`, judged by the state clock
of :mod:`.clock`) and replicates it through the log as maintenance entries
(:meth:`Node.submit_maintenance <.node.Node.submit_maintenance>`): ``Compact`` records
naming the stream, its incarnation, the partition and the first transaction ID kept. Every
node applies them at the same log position, so the digests stay equal and a follower frees
exactly what the leader freed. A stream deleted or recreated in between makes its record
fail alone (``StreamNotFound``), deterministically everywhere.

Every node also trims its own engine commit log to ``log_retention`` entries: that log is
node-local (the replicated log is :mod:`.log`) and not part of the replicated state.

The interval is the cluster setting ``compaction_interval`` (``tstreams cluster init
--compaction-interval SECONDS``, 60 by default, 0 for never); the ``compact`` call runs
one pass at once on the leader.
"""

from __future__ import annotations

import logging
import threading

from .. import errors
from ..engine.protocol import ops as O
from .node import Node
from .retention import DEFAULT_COMPACTION_INTERVAL, check_compaction_interval

log = logging.getLogger(__name__)

class ReplicatedCompaction:
    """Runs compaction on ``node`` every ``compaction_interval`` seconds of the cluster's
    configuration, in its own thread (:meth:`start` / :meth:`stop`)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.transactions_removed = 0
        self.passes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one pass at a time (the loop and the ``compact`` call)

    @property
    def interval(self) -> float:
        return check_compaction_interval(self.node.config.get("compaction_interval", DEFAULT_COMPACTION_INTERVAL))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="cluster-compaction", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval or 60.0):
            if not self.interval:
                continue
            try:
                if self.node.serving():
                    self.run_once()
                else:
                    self.node.core.trim_log_to_retention()
            except (errors.NotLeader, errors.ClusterUnavailable, errors.EngineClosed) as exc:
                log.info("compaction pass stopped: %s", exc)
            except Exception:  # noqa: BLE001 - the loop must survive; the next pass retries
                log.exception("compaction pass failed")

    def run_once(self) -> dict[str, int]:
        """One pass (leader only, else ``NotLeader``): replicate the ``Compact`` records
        for everything past its TTL, then trim this node's engine commit log. Returns
        ``{"transactions_removed": n, "log_entries_trimmed": m}`` like ``Core.compact``."""
        with self._lock:
            self.node.check_serving()
            removed = 0
            for batch in self.node.core.expired_compactions(self.node.clock()):
                removed += self._submit(batch)
            self.transactions_removed += removed
            self.passes += 1
            return {"transactions_removed": removed, "log_entries_trimmed": self.node.core.trim_log_to_retention()}

    def _submit(self, batch: list[O.Compact]) -> int:
        ok, value = self.node.submit_maintenance(batch)
        if ok:
            return sum(int(n) for n in value)
        if not isinstance(value, errors.StreamNotFound):
            raise value
        removed = 0  # a stream was deleted or recreated meanwhile: the others one by one
        for op in batch:
            ok, value = self.node.submit_maintenance([op])
            if ok:
                removed += int(value[0])
            elif not isinstance(value, errors.StreamNotFound):
                raise value
        return removed
