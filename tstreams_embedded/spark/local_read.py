"""The embedded read path: record batches built from a segment's stored chunk payloads,
straight from LMDB snapshots.

Through the :class:`~tstreams_embedded.engine.protocol.backend.Backend` protocol a read decodes every
item into a Python ``bytes`` object (:meth:`Backend.fetch`), which is most of the cost of
filling Arrow columns. When the engine is embedded (a :class:`~tstreams_embedded.engine.storage.core.Core`
in this process), :func:`local_batches` hands each transaction's verified, undecoded chunk
payloads (:class:`~tstreams_embedded.engine.storage.bulk.PayloadSnapshot`) to the batch builder,
which copies fixed-size items from the memory map into the Arrow buffers in one pass
(:mod:`.payloads`).

The read rule is the engine's own (:meth:`PayloadSnapshot.scan`, index only):
checkpointed transactions in ID order, cancelled/invalid/expired-by-TTL ones passed over, a
stop at the first open one. A segment planned by the reader holds no open transaction, but if
one is met anyway (``blocked``), the read continues from there through the Backend (which
invalidates an expired one), so the result is the same as the generic path's.

**One read-only snapshot per record batch**, opened with ``buffers`` (values are views into
the memory map, no copy) and closed before the batch is yielded: the builder is always
flushed inside the snapshot, so no view outlives it, and no snapshot is held while Spark
consumes a batch. A batch ends after the transaction that fills it (``BATCH_ROWS`` /
``BATCH_BYTES``): transactions are never split across snapshots, so each one is read whole
from one snapshot, as through ``Backend.fetch`` (a batch exceeds the bounds by at most one
transaction).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from ..engine.protocol.iteration import iter_transactions
from ..engine.storage.bulk import PayloadSnapshot
from ..engine.storage.core import Core
from .decoding import Decoding
from .rows import BatchBuilder, record_batches

#: transactions per index scan inside a snapshot
SCAN_TXNS = 256
#: transactions per fetch when a blocked read continues through the Backend
FETCH_TXNS = 256


class SegmentReader:
    """Reads the checkpointed transactions ``after < id <= upto`` of one partition of an
    embedded engine as record batches (iterate it). Afterwards ``position`` is the offset
    reached and ``blocked`` tells whether an open transaction stopped the snapshot walk."""

    def __init__(self, core: Core, stream: str, partition: int, after: int, upto: int,
                 value_format: str | Decoding) -> None:
        self.core = core
        self.stream = stream
        self.partition = partition
        self.position = after
        self.upto = upto
        self.blocked = False
        self.done = after >= upto
        self.builder = BatchBuilder(stream, partition, value_format)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        while not self.done:
            batch = self._batch()
            if batch is not None:
                yield batch

    def _batch(self) -> pa.RecordBatch | None:
        """Fill and flush one batch in one snapshot."""
        with self.core.payload_snapshot(self.stream, self.partition) as snapshot:
            while not self.builder.full() and not self.done:
                scan = snapshot.scan(self.position, self.upto, SCAN_TXNS)
                for txn_id, _ in scan.index:
                    self._add(snapshot, txn_id)
                    if self.builder.full():
                        break
                else:
                    self.position = max(self.position, scan.position)
                    if not scan.full:  # the end of the partition, ``upto``, or an open transaction
                        self.done = True
                        self.blocked = scan.blocked
            return self.builder.flush()  # inside the snapshot: the builder may hold views into it

    def _add(self, snapshot: PayloadSnapshot, txn_id: int) -> None:
        """Add every chunk of transaction ``txn_id``."""
        seq = 0
        for payload in snapshot.payloads(txn_id):
            seq += self.builder.add_payload(txn_id, seq, payload)
        self.position = txn_id


def local_batches(core: Core, stream: str, partition: int, after: int, upto: int,
                  value_format: str | Decoding) -> Iterator[pa.RecordBatch]:
    """Record batches of the checkpointed transactions ``after < id <= upto`` of one
    partition, read from the embedded engine ``core`` (see the module docstring)."""
    reader = SegmentReader(core, stream, partition, after, upto, value_format)
    yield from reader
    if reader.blocked:
        rest = iter_transactions(core, stream, partition, reader.position, upto, FETCH_TXNS)
        yield from record_batches(rest, stream, partition, value_format)
