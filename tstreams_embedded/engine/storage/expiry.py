"""Items that TTL compaction deleted before a registered consumer had read them.

**The rule:** a stream's TTL deletes transactions by age, whoever has or has not read them.
A consumer (or a streams app) that falls further behind than the TTL loses input. This is
never silent: when a :class:`~..protocol.ops.Compact` record deletes checkpointed transactions past
the stored offset of a consumer of that stream (a consumer with stored offsets on it; a
partition it has no offset for counts from the start), their items are counted per stream,
consumer and partition, and a warning is logged. The counts are kept in ``meta`` under
``expired_unread | offset key`` (u64), dropped with the stream or the consumer, shown by
``tstreams consumers describe`` and returned in :attr:`ConsumerInfo.expired_unread
<..protocol.backend.ConsumerInfo.expired_unread>` (``Backend.list_consumers``, embedded and remote).
Compaction applies the same records on every node of a cluster, so the counts agree.
"""

from __future__ import annotations

import logging

import lmdb

from ..protocol.backend import StreamInfo
from . import keys
from .store import Store, as_bytes

log = logging.getLogger(__name__)

PREFIX = b"expired_unread:"


def readers(txn: lmdb.Transaction, store: Store, info: StreamInfo, partition: int) -> dict[str, int]:
    """The consumers with stored offsets on the stream: name -> offset in ``partition``
    (0 when it has none there: nothing of it read)."""
    prefix = keys.stream_prefix(info.id)
    found: dict[str, int] = {}
    cur = txn.cursor(db=store.offsets)
    if cur.set_range(prefix):
        for k, v in cur.iternext():
            key = as_bytes(k)
            if key[: len(prefix)] != prefix:
                break
            name = key[len(prefix) : -5].decode("utf-8")
            offset = (keys.U64.unpack(store.unseal("offsets", key, as_bytes(v)))[0]
                      if keys.partition_of_offset_key(key) == partition else 0)
            found[name] = max(found.get(name, 0), offset)
    return found


def count(txn: lmdb.Transaction, store: Store, info: StreamInfo, partition: int, unread: dict[str, int]) -> None:
    """Add ``unread`` (consumer -> items deleted before it read them) to the counts, and warn."""
    for consumer, items in sorted(unread.items()):
        if not items:
            continue
        key = PREFIX + keys.offset_key(info.id, consumer, partition)
        raw = store.get(txn, "meta", key)
        total = (keys.U64.unpack(raw)[0] if raw else 0) + items
        store.put(txn, "meta", key, keys.U64.pack(total))
        log.warning("TTL compaction of stream %r (ttl %d s) partition %d deleted %d items that consumer %r had "
                    "not read (%d in all): it is more than the TTL behind", info.name, info.ttl, partition, items,
                    consumer, total)


def of_consumer(txn: lmdb.Transaction, store: Store, info: StreamInfo, consumer: str) -> dict[int, int]:
    """A consumer's counts: partition -> items that expired before it read them."""
    prefix = PREFIX + keys.offsets_prefix(info.id, consumer)
    out: dict[int, int] = {}
    cur = txn.cursor(db=store.meta)
    if cur.set_range(prefix):
        for k, v in cur.iternext():
            key = as_bytes(k)
            if key[: len(prefix)] != prefix or len(key) != len(prefix) + 4:
                break
            out[keys.partition_of_offset_key(key)] = keys.U64.unpack(store.unseal("meta", key, as_bytes(v)))[0]
    return out


def forget(txn: lmdb.Transaction, store: Store, stream_id: int, consumer: str | None = None) -> None:
    """Drop the counts of a deleted stream, or of one deleted consumer of it."""
    prefix = PREFIX + (keys.offsets_prefix(stream_id, consumer) if consumer is not None
                       else keys.stream_prefix(stream_id))
    cur = txn.cursor(db=store.meta)
    if cur.set_range(prefix):
        while as_bytes(cur.key())[: len(prefix)] == prefix:
            if not cur.delete():
                break
