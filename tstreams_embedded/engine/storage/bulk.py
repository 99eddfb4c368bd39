"""Bulk reads for columnar consumers: a partition's stored, undecoded chunk payloads in
one read-only snapshot (:meth:`Core.payload_snapshot <.core.Core.payload_snapshot>`).

Reading through the :class:`~..protocol.backend.Backend` decodes every item into a Python ``bytes``
object, which dominates the cost of filling Arrow columns (the Spark source). A
:class:`PayloadSnapshot` instead gives each checkpointed transaction's verified payloads
(msgpack arrays of items) as views into the memory map, valid only inside the ``with``
block, so a bulk reader can copy them into its own buffers in one pass. The read rule is
the engine's own (:func:`.reads.scan`, index only): checkpointed transactions in ID order,
cancelled, invalid and TTL-expired ones passed over, a stop at the first open one.
"""

from __future__ import annotations

import lmdb

from ..protocol.backend import StreamInfo
from . import reads
from .store import Store


class PayloadSnapshot:
    """A read-only snapshot of one stream partition for bulk readers (see the module
    docstring), made by ``with core.payload_snapshot(stream, partition) as snapshot``;
    :meth:`scan` and :meth:`payloads`, and the payloads they return, are valid inside that
    block only."""

    def __init__(self, txn: lmdb.Transaction, store: Store, info: StreamInfo, partition: int, now: int) -> None:
        self._txn = txn
        self._store = store
        self.info = info
        self.partition = partition
        self.now = now

    def scan(self, after: int, upto: int, max_txns: int) -> reads.Scan:
        """The checkpointed transactions ``after < id <= upto`` (``index`` as ``(id, item
        count)``; ``position``, ``full`` and ``blocked`` as in :func:`.reads.scan`)."""
        return reads.scan(self._txn, self._store, self.info.name, self.partition, after, upto, max_txns, self.now,
                          load=False)

    def payloads(self, txn_id: int) -> list[memoryview | bytes]:
        """The verified, undecoded payloads of transaction ``txn_id``'s chunks, in order
        (:func:`.reads.transaction_payloads`; ``DataCorrupted`` names a damaged one)."""
        return reads.transaction_payloads(self._txn, self._store, self.info, self.partition, txn_id)
