"""Walking a partition's checkpointed transactions through any :class:`~.backend.Backend`.

:func:`iter_transactions` is the one loop over :meth:`Backend.fetch` that readers without a
consumer (the Spark source, tools, benchmarks) use. It follows the read rule of every
reader: transactions in ID order, cancelled/invalid/expired ones passed over, and a stop
at the first open transaction, so nothing is ever returned out of order.
"""

from __future__ import annotations

from collections.abc import Iterator

from .backend import Backend, TxnData
from .validate import MAX_ID

DEFAULT_BATCH = 1024


class TransactionIterator:
    """Iterates checkpointed transactions ``after < id <= upto`` of one partition.

    After (or during) iteration, ``position`` is the offset a consumer that processed every
    yielded transaction may store, and ``blocked`` tells whether the walk stopped at an open
    transaction (rather than at the end of the partition or at ``upto``).
    """

    def __init__(self, backend: Backend, stream: str, partition: int, after: int = 0, upto: int = MAX_ID,
                 batch: int = DEFAULT_BATCH) -> None:
        self.backend = backend
        self.stream = stream
        self.partition = partition
        self.position = after
        self.upto = upto
        self.batch = batch
        self.blocked = False

    def __iter__(self) -> Iterator[TxnData]:
        while self.position < self.upto:
            fetched = self.backend.fetch(self.stream, self.partition, self.position, self.batch)
            for txn in fetched.txns:
                if txn.id > self.upto:
                    self.position = self.upto  # IDs only grow: nothing can appear before it
                    return
                self.position = txn.id
                yield txn
            self.blocked = fetched.blocked
            if not fetched.txns:
                self.position = min(max(self.position, fetched.position), self.upto)
                return
            if not fetched.blocked:
                self.position = min(max(self.position, fetched.position), self.upto)
            # blocked after some transactions: ask again from here (an expired blocker is
            # invalidated by the engine on the next fetch)


def iter_transactions(backend: Backend, stream: str, partition: int, after: int = 0, upto: int = MAX_ID,
                      batch: int = DEFAULT_BATCH) -> TransactionIterator:
    """The checkpointed transactions ``after < id <= upto`` of ``partition``, in ID order,
    stopping at the first open one (see :class:`TransactionIterator`)::

        walk = iter_transactions(engine.backend, "clicks", 0)
        for txn in walk:
            handle(txn.items)
        store(walk.position)
    """
    return TransactionIterator(backend, stream, partition, after, upto, batch)
