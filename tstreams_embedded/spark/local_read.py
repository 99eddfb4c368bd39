"""The embedded read path: a segment's stored chunk payloads straight from LMDB snapshots.

Through the :class:`~tstreams_embedded.engine.backend.Backend` protocol a read decodes every
item into a Python ``bytes`` object (:meth:`Backend.fetch`), which is most of the cost of
filling Arrow columns. When the engine is embedded (a :class:`~tstreams_embedded.engine.core.Core`
in this process), :class:`PayloadWalk` instead hands over each transaction's verified, undecoded
chunk payloads (:func:`~tstreams_embedded.engine.reads.transaction_payloads`) and the batch
builder decodes them in bulk (:mod:`.payloads`).

The read rule is the engine's own (:func:`~tstreams_embedded.engine.reads.scan`, index only):
checkpointed transactions in ID order, cancelled/invalid/expired-by-TTL ones passed over, a
stop at the first open one. A segment planned by the reader holds no open transaction, but if
one is met anyway (``blocked``), the caller continues from ``position`` through the Backend
(which invalidates an expired one), so the result is the same as the generic path's.

Each page of transactions is read in its own short read-only snapshot, never held while the
caller works: at most ``PAGE_TXNS`` transactions or about ``PAGE_BYTES`` of payloads, whose
bytes are copies (the snapshot is opened without ``buffers``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from ..engine import reads
from ..engine.catalog import lookup_stream
from ..engine.core import Core
from ..engine.iteration import iter_transactions
from .rows import BatchBuilder, record_batches

#: transactions per fetch when a blocked walk continues through the Backend
FETCH_TXNS = 256
PAGE_TXNS = 256
PAGE_BYTES = 16 << 20

Payload = memoryview | bytes


class PayloadWalk:
    """Iterates ``(txn_id, chunk payloads)`` of the checkpointed transactions
    ``after < id <= upto`` of one partition of an embedded engine.

    Afterwards ``position`` is the offset reached (every transaction up to it was yielded or
    passed over by the read rule) and ``blocked`` tells whether the walk stopped at an open
    transaction before ``upto``.
    """

    def __init__(self, core: Core, stream: str, partition: int, after: int, upto: int) -> None:
        self.core = core
        self.stream = stream
        self.partition = partition
        self.position = after
        self.upto = upto
        self.blocked = False

    def __iter__(self) -> Iterator[tuple[int, list[Payload]]]:
        while self.position < self.upto:
            page, end, more = self._page()
            for txn_id, payloads in page:
                yield txn_id, payloads
                self.position = txn_id
            self.position = max(self.position, end)
            if not more:
                return

    def _page(self) -> tuple[list[tuple[int, list[Payload]]], int, bool]:
        """One snapshot's worth: ``(transactions, position passed, more may follow)``."""
        store = self.core.store
        page: list[tuple[int, list[Payload]]] = []
        size = 0
        with store.read() as txn:
            info = lookup_stream(txn, store, self.stream)
            scan = reads.scan(txn, store, self.stream, self.partition, self.position, self.upto, PAGE_TXNS,
                              self.core.clock(), load=False)
            for txn_id, _ in scan.index:
                payloads = reads.transaction_payloads(txn, store, info, self.partition, txn_id)
                page.append((txn_id, payloads))
                size += sum(map(len, payloads))
                if size >= PAGE_BYTES and txn_id != scan.index[-1][0]:
                    return page, txn_id, True  # the rest of the scan is read by the next page
        self.blocked = scan.blocked
        return page, scan.position, scan.full


def local_batches(core: Core, stream: str, partition: int, after: int, upto: int,
                  value_format: str) -> Iterator[pa.RecordBatch]:
    """Record batches of the checkpointed transactions ``after < id <= upto`` of one
    partition, read from the embedded engine ``core`` (see the module docstring)."""
    builder = BatchBuilder(stream, partition, value_format)
    walk = PayloadWalk(core, stream, partition, after, upto)
    for txn_id, payloads in walk:
        seq = 0
        for payload in payloads:
            seq += builder.add_payload(txn_id, seq, payload)
            if builder.full():
                batch = builder.flush()
                if batch is not None:
                    yield batch
    rest = iter_transactions(core, stream, partition, walk.position, upto, FETCH_TXNS) if walk.blocked else ()
    yield from record_batches(rest, stream, partition, value_format, builder)
