"""A bounded overview of the streams of one store, for metrics and status pages.

:func:`stream_overview` reads, in ONE read transaction: the streams (first by name), the
head of each partition (the newest allocated transaction ID) and, for each consumer that
checkpointed offsets, its lag per partition. Its cost is bounded by :class:`OverviewLimits`
whatever the size of the store, so a monitoring system scraping every few seconds never
weighs on the engine:

* at most ``streams`` streams, ``partitions`` partitions per stream, ``consumers``
  consumers per stream and ``rows`` (consumer, partition) lag rows in all are listed; what
  is left out is only flagged (``truncated``);
* the lag in *transactions* (checkpointed transactions after the consumer's offset) is
  counted with a cursor, up to ``count_cap`` per row and ``scan_budget`` cursor steps per
  overview; past the cap the count stops at the cap (read it as "at least"), past the
  budget it is ``None`` (not counted);
* the lag in *seconds* comes from the transaction IDs alone (an ID is its opening time,
  :mod:`tstreams_embedded.ids`): the time between the consumer's offset and the
  partition's head. It is always given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import lmdb

from ...ids import ID_MULTIPLIER
from ..protocol.ops import TxnState
from ..storage import expiry, keys
from ..storage.catalog import stream_of
from ..storage.store import Store, entries

_CHECKPOINTED = int(TxnState.CHECKPOINTED)


@dataclass(frozen=True)
class OverviewLimits:
    """Bounds of one :func:`stream_overview` (see the module docstring)."""

    streams: int = 100
    partitions: int = 64
    consumers: int = 20
    rows: int = 2000
    count_cap: int = 1000
    scan_budget: int = 50_000


@dataclass
class ConsumerLag:
    """A consumer's position on one partition."""

    consumer: str
    partition: int
    offset: int  # the last checkpointed transaction ID
    lag_txns: int | None  # checkpointed transactions after it (capped; None: not counted)
    lag_seconds: float  # the partition head's time minus the offset's time (>= 0)
    expired_unread: int = 0  # items TTL compaction deleted before it read them (:mod:`..storage.expiry`)


@dataclass
class StreamOverview:
    name: str
    partitions: int
    ttl: int
    heads: list[int]  # newest allocated transaction ID per listed partition (0: none)
    consumers: list[ConsumerLag] = field(default_factory=list)
    partitions_truncated: bool = False
    consumers_truncated: bool = False


@dataclass
class Overview:
    streams: list[StreamOverview]
    truncated: bool  # some streams, partitions, consumers or rows were left out
    scan_steps: int  # cursor steps spent counting lags


def stream_overview(store: Store, limits: OverviewLimits = OverviewLimits()) -> Overview:
    """The bounded overview of ``store`` (see the module docstring)."""
    out: list[StreamOverview] = []
    truncated = False
    budget = [limits.scan_budget]
    rows = 0
    with store.read() as txn:
        cur = txn.cursor(db=store.streams)
        for k, v in entries(cur.iternext()):
            if len(out) >= limits.streams:
                truncated = True
                break
            info = stream_of(store, k, v)
            shown = min(info.partitions, limits.partitions)
            heads = []
            for p in range(shown):
                raw = store.get(txn, "parts", keys.part_key(info.id, p))
                heads.append(keys.U64.unpack(raw)[0] if raw else 0)
            s = StreamOverview(info.name, info.partitions, info.ttl, heads,
                               partitions_truncated=shown < info.partitions)
            rows, full = _consumers(txn, store, info.id, s, limits, budget, rows)
            truncated = truncated or full or s.partitions_truncated or s.consumers_truncated
            out.append(s)
    return Overview(out, truncated, limits.scan_budget - budget[0])


def _consumers(txn: lmdb.Transaction, store: Store, stream_id: int, s: StreamOverview, limits: OverviewLimits,
               budget: list[int], rows: int) -> tuple[int, bool]:
    """Fill ``s.consumers``; return the rows listed so far and whether ``rows`` ran out."""
    prefix = keys.stream_prefix(stream_id)
    names: set[str] = set()
    cur = txn.cursor(db=store.offsets)
    if not cur.set_range(prefix):
        return rows, False
    for k, v in entries(cur.iternext()):
        if not k.startswith(prefix):
            break
        name = k[len(prefix):-5].decode("utf-8", "replace")
        partition = keys.partition_of_offset_key(k)
        if name not in names:
            if len(names) >= limits.consumers:
                s.consumers_truncated = True
                break
            names.add(name)
        if partition >= len(s.heads):
            continue
        if rows >= limits.rows:
            return rows, True
        rows += 1
        offset = keys.U64.unpack(store.unseal("offsets", k, v))[0]
        head = s.heads[partition]
        lag_s = max(0, head // ID_MULTIPLIER - offset // ID_MULTIPLIER) / 1000.0
        raw = store.get(txn, "meta", expiry.PREFIX + k)
        s.consumers.append(ConsumerLag(name, partition, offset, count_after(txn, store, stream_id, partition,
                                                                             offset, limits.count_cap, budget), lag_s,
                                       keys.U64.unpack(raw)[0] if raw else 0))
    return rows, False


def count_after(txn: lmdb.Transaction, store: Store, stream_id: int, partition: int, offset: int, cap: int,
                 budget: list[int]) -> int | None:
    """Checkpointed transactions of the partition with an ID above ``offset`` (at most
    ``cap``), or ``None`` once ``budget[0]`` cursor steps are spent."""
    if budget[0] <= 0:
        return None
    prefix = keys.part_key(stream_id, partition)
    count = 0
    cur = txn.cursor(db=store.txns)
    if not cur.set_range(keys.txn_key(stream_id, partition, offset + 1)):
        return 0
    for k, v in entries(cur.iternext()):
        if k[: keys.PART_LEN] != prefix or count >= cap:
            break
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        if store.unseal("txns", k, v)[0] == _CHECKPOINTED:
            count += 1
    return count
