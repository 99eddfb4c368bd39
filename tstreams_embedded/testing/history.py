"""A Jepsen-style history of a queue workload, and the checker that judges it.

Clients record what they did while faults are injected; afterwards :func:`check` compares
the history with the final state of every node and returns every violation it finds (an
empty list: the history is valid). The checker is pure Python, so it is tested with
hand-made bad histories (``tests/cluster/test_history.py``).

What is recorded (:class:`History`, thread-safe, times from ``time.monotonic()``):

* :class:`Write`: a client wrote uniquely named ``items`` as ONE transaction (an instant or
  open/send/checkpoint). Its outcome is ``"ok"`` (acknowledged, with the partition and
  transaction ID), ``"fail"`` (definitely not applied: an error the cluster decided) or
  ``"info"`` (indeterminate: a timeout or a lost leader; it may or may not have happened).
* :class:`Read`: a consumer incarnation read a transaction.
* :class:`Offsets`: a consumer's offsets, either ``"checkpoint"`` (it stored them; with an
  outcome) or ``"observe"`` (it read the stored offsets, e.g. when an incarnation starts:
  ``start=True`` marks the position that incarnation reads from).

The final state (:class:`FinalState`) is every checkpointed transaction per partition as the
cluster serves it after the run, the stored offsets, and each node's state digest.

The properties (each violation names one):

* ``lost``: an acknowledged item is missing, or present more than once, or in another
  transaction than the one acknowledged;
* ``failed-visible``: an item of a definitely failed write is visible;
* ``phantom``: a visible transaction was never written, or is not exactly one write's items
  (atomicity);
* ``dirty-read``: an item was read that the final state does not hold (as read);
* ``order``: transaction IDs not strictly increasing per partition (final state, and the
  reads of each consumer incarnation), or a write acknowledged before another began got a
  larger ID in the same partition (real-time order);
* ``skip``: a consumer incarnation passed over a transaction of the final state that lies
  between its start offset and its last read;
* ``offsets``: stored consumer offsets went back (acknowledged checkpoints and observations in
  time order), or the final offsets are behind an acknowledged checkpoint;
* ``divergence``: the nodes' state digests differ.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

OUTCOMES = ("ok", "fail", "info")


@dataclass
class Write:
    """One transaction written by a client (see the module docstring)."""

    client: str
    items: tuple[str, ...]
    kind: str
    start: float
    end: float | None = None
    outcome: str | None = None
    partition: int | None = None
    txn_id: int | None = None
    error: str = ""


@dataclass(frozen=True)
class Read:
    """One transaction read by consumer incarnation ``consumer``."""

    consumer: str
    partition: int
    txn_id: int
    items: tuple[str, ...]
    time: float


@dataclass
class Offsets:
    """Offsets checkpointed (``kind="checkpoint"``) or observed (``"observe"``) by a consumer."""

    consumer: str
    kind: str
    offsets: dict[int, int]
    start: float
    end: float | None = None
    outcome: str | None = None
    incarnation_start: bool = False
    error: str = ""


@dataclass
class FinalState:
    """The cluster after the run: ``partitions`` maps a partition to its checkpointed
    transactions ``[(txn_id, items), …]`` in the order served, ``offsets`` the consumer
    group's stored offsets, ``digests`` each node's state digest."""

    partitions: dict[int, list[tuple[int, tuple[str, ...]]]]
    offsets: dict[int, int] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)


class History:
    """The thread-safe record of a run (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.writes: list[Write] = []
        self.reads: list[Read] = []
        self.offsets: list[Offsets] = []

    @staticmethod
    def now() -> float:
        return time.monotonic()

    # -- writes ----------------------------------------------------------------------------
    def begin_write(self, client: str, items: Sequence[str], kind: str) -> Write:
        op = Write(client, tuple(items), kind, self.now())
        with self._lock:
            self.writes.append(op)
        return op

    def end_write(self, op: Write, outcome: str, partition: int | None = None, txn_id: int | None = None,
                  error: str = "") -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        with self._lock:
            op.end, op.outcome, op.partition, op.txn_id, op.error = self.now(), outcome, partition, txn_id, error

    # -- reads and offsets -----------------------------------------------------------------
    def read(self, consumer: str, partition: int, txn_id: int, items: Sequence[str]) -> None:
        with self._lock:
            self.reads.append(Read(consumer, partition, txn_id, tuple(items), self.now()))

    def observe(self, consumer: str, offsets: Mapping[int, int], incarnation_start: bool = False) -> None:
        t = self.now()
        with self._lock:
            self.offsets.append(Offsets(consumer, "observe", dict(offsets), t, t, "ok", incarnation_start))

    def begin_checkpoint(self, consumer: str, offsets: Mapping[int, int]) -> Offsets:
        op = Offsets(consumer, "checkpoint", dict(offsets), self.now())
        with self._lock:
            self.offsets.append(op)
        return op

    def end_checkpoint(self, op: Offsets, outcome: str, error: str = "") -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        with self._lock:
            op.end, op.outcome, op.error = self.now(), outcome, error

    # -- summaries -------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """How many writes ended each way, reads, and acknowledged checkpoints."""
        with self._lock:
            out = {o: sum(1 for w in self.writes if w.outcome == o) for o in OUTCOMES}
            out["pending"] = sum(1 for w in self.writes if w.outcome is None)
            out["reads"] = len(self.reads)
            out["checkpoints"] = sum(1 for o in self.offsets if o.kind == "checkpoint" and o.outcome == "ok")
        return out

    def to_json(self) -> str:
        with self._lock:
            return json.dumps({"writes": [asdict(w) for w in self.writes], "reads": [asdict(r) for r in self.reads],
                               "offsets": [asdict(o) for o in self.offsets]})


def spanning(writes: Iterable[Write], moments: Iterable[float], kind: str = "txn") -> list[Write]:
    """The acknowledged (``ok``) writes of ``kind`` that were under way at one of ``moments``
    (begun before it, ended after it): e.g. transactions open while a leader was killed.
    A run that claims open transactions survive failover must have some (a run where
    every such transaction failed, e.g. with ``TransactionExpired``, passes :func:`check`)."""
    times = sorted(moments)
    return [w for w in writes if w.kind == kind and w.outcome == "ok" and w.end is not None
            and any(w.start < t < w.end for t in times)]


def check(history: History, final: FinalState) -> list[str]:
    """Every violation of the properties in the module docstring (empty: valid)."""
    return [*_check_writes(history.writes, final), *_check_order(history.writes, final),
            *_check_reads(history.reads, history.offsets, final), *_check_offsets(history.offsets, final),
            *_check_digests(final)]


def _where(final: FinalState) -> tuple[dict[str, list[tuple[int, int]]], dict[tuple[int, int], tuple[str, ...]]]:
    """item -> [(partition, txn_id), …] and (partition, txn_id) -> items, of the final state."""
    where: dict[str, list[tuple[int, int]]] = {}
    txns: dict[tuple[int, int], tuple[str, ...]] = {}
    for p, rows in final.partitions.items():
        for tid, items in rows:
            txns[(p, tid)] = tuple(items)
            for item in items:
                where.setdefault(item, []).append((p, tid))
    return where, txns


def _check_writes(writes: Iterable[Write], final: FinalState) -> list[str]:
    out: list[str] = []
    where, txns = _where(final)
    by_items: dict[tuple[str, ...], Write] = {}
    for w in writes:
        by_items[w.items] = w
        if w.outcome == "ok":
            for item in w.items:
                seen = where.get(item, [])
                if len(seen) != 1:
                    out.append(f"lost: acknowledged item {item!r} ({w.client}, {w.kind}) is present {len(seen)} "
                               f"times in the final state")
                elif w.txn_id is not None and seen[0] != (w.partition, w.txn_id):
                    out.append(f"lost: acknowledged item {item!r} is in transaction {seen[0]}, acknowledged as "
                               f"{(w.partition, w.txn_id)}")
        elif w.outcome == "fail":
            for item in w.items:
                if item in where:
                    out.append(f"failed-visible: item {item!r} of a failed write ({w.error}) is visible at "
                               f"{where[item]}")
    for item, seen in where.items():
        if len(seen) > 1:
            out.append(f"phantom: item {item!r} is visible {len(seen)} times: {seen}")
    for key, items in txns.items():
        if items not in by_items:
            out.append(f"phantom: transaction {key} holds {list(items)[:5]}, which no single write wrote")
    return out


def _check_order(writes: Sequence[Write], final: FinalState) -> list[str]:
    out: list[str] = []
    for p, rows in final.partitions.items():
        ids = [tid for tid, _ in rows]
        for a, b in zip(ids, ids[1:], strict=False):
            if not a < b:
                out.append(f"order: partition {p} of the final state has ID {b} after {a}")
    acked = sorted((w for w in writes if w.outcome == "ok" and w.txn_id is not None and w.end is not None),
                   key=lambda w: w.start)
    by_partition: dict[int, list[Write]] = {}
    for w in acked:
        by_partition.setdefault(int(w.partition or 0), []).append(w)
    for p, ws in by_partition.items():
        # a write that completed before another began must have the smaller ID
        ends = sorted(ws, key=lambda w: w.end or 0.0)
        i = 0
        best: Write | None = None  # the largest ID among the writes completed so far
        for w in ws:  # by start time
            while i < len(ends) and (ends[i].end or 0.0) < w.start:
                if best is None or (ends[i].txn_id or 0) > (best.txn_id or 0):
                    best = ends[i]
                i += 1
            if best is not None and (w.txn_id or 0) <= (best.txn_id or 0):
                out.append(f"order: in partition {p}, write {w.items[:1]} (ID {w.txn_id}) began after "
                           f"{best.items[:1]} (ID {best.txn_id}) was acknowledged, yet has a smaller ID")
    return out


def _check_reads(reads: Sequence[Read], offsets: Sequence[Offsets], final: FinalState) -> list[str]:
    out: list[str] = []
    _where_, txns = _where(final)
    last: dict[tuple[str, int], int] = {}
    for r in reads:
        got = txns.get((r.partition, r.txn_id))
        if got != r.items:
            out.append(f"dirty-read: {r.consumer} read transaction {(r.partition, r.txn_id)} {list(r.items)[:5]}, "
                       f"the final state has {None if got is None else list(got)[:5]}")
        key = (r.consumer, r.partition)
        if key in last and not last[key] < r.txn_id:
            out.append(f"order: {r.consumer} read ID {r.txn_id} after {last[key]} in partition {r.partition}")
        last[key] = r.txn_id
    # skips: every final transaction between an incarnation's start and its last read was read by it
    starts = {o.consumer: o.offsets for o in offsets if o.kind == "observe" and o.incarnation_start}
    read_ids: dict[tuple[str, int], list[int]] = {}
    for r in reads:
        read_ids.setdefault((r.consumer, r.partition), []).append(r.txn_id)
    for (consumer, p), ids in read_ids.items():
        begin = starts.get(consumer, {}).get(p, 0)
        expected = [tid for tid, _ in final.partitions.get(p, []) if begin < tid <= max(ids)]
        missing = sorted(set(expected) - set(ids))
        if missing:
            out.append(f"skip: {consumer} read partition {p} from offset {begin} up to {max(ids)} but never read "
                       f"{len(missing)} transaction(s) in between, first {missing[:3]}")
    return out


def _check_offsets(offsets: Sequence[Offsets], final: FinalState) -> list[str]:
    out: list[str] = []
    known = [o for o in offsets if (o.kind == "observe" or o.outcome == "ok") and o.end is not None]
    known.sort(key=lambda o: o.end if o.kind == "checkpoint" and o.end is not None else o.start)
    floor: dict[int, tuple[int, Offsets]] = {}
    for o in known:
        for p, v in o.offsets.items():
            if p in floor and v < floor[p][0]:
                prev = floor[p][1]
                out.append(f"offsets: partition {p} went back from {floor[p][0]} ({prev.kind} by {prev.consumer}) to "
                           f"{v} ({o.kind} by {o.consumer})")
            if p not in floor or v > floor[p][0]:
                floor[p] = (v, o)
    for p, (v, o) in floor.items():
        if o.kind == "checkpoint" and final.offsets.get(p, 0) < v:
            out.append(f"offsets: the final offset of partition {p} is {final.offsets.get(p, 0)}, behind the "
                       f"acknowledged checkpoint {v}")
    return out


def _check_digests(final: FinalState) -> list[str]:
    if len(set(final.digests.values())) > 1:
        return [f"divergence: the nodes' state digests differ: {final.digests}"]
    return []


def report(violations: Sequence[str], history: History, limit: int = 20) -> str:
    """A failure message: the counts and the first ``limit`` violations."""
    lines = [f"{len(violations)} violation(s); history: {history.counts()}", *violations[:limit]]
    if len(violations) > limit:
        lines.append(f"… and {len(violations) - limit} more")
    return "\n".join(lines)


def as_final(partitions: Mapping[int, Iterable[tuple[int, Iterable[str]]]], offsets: Mapping[int, int] | None = None,
             digests: Mapping[str, str] | None = None) -> FinalState:
    """A :class:`FinalState` from plain mappings (tests)."""
    return FinalState({p: [(int(t), tuple(items)) for t, items in rows] for p, rows in partitions.items()},
                      dict(offsets or {}), dict(digests or {}))


__all__ = ["FinalState", "History", "Offsets", "Read", "Write", "as_final", "check", "report"]
