"""Bulk reads for columnar consumers: a partition's stored, undecoded chunk payloads in
one read-only snapshot (:meth:`Core.payload_snapshot <.core.Core.payload_snapshot>`).

Reading through the :class:`~.backend.Backend` decodes every item into a Python ``bytes``
object, which dominates the cost of filling Arrow columns (the Spark source). A
:class:`PayloadSnapshot` instead gives each checkpointed transaction's verified payloads
(msgpack arrays of items) as views into the memory map, valid only inside the ``with``
block, so a bulk reader can copy them into its own buffers in one pass. The read rule is
the engine's own (:func:`.reads.scan`, index only): checkpointed transactions in ID order,
cancelled, invalid and TTL-expired ones passed over, a stop at the first open one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import TracebackType

import lmdb

from . import reads
from .backend import StreamInfo
from .catalog import lookup_stream
from .store import Store


class PayloadSnapshot:
    """A read-only snapshot of one stream partition for bulk readers (see the module
    docstring). Use as a context manager; :meth:`scan` and :meth:`payloads` are valid
    inside it only, and so are the payloads they return."""

    def __init__(self, store: Store, clock: Callable[[], int], stream: str, partition: int) -> None:
        self._store = store
        self._clock = clock
        self.stream = stream
        self.partition = partition
        self._read = store.read(buffers=True)
        self._txn: lmdb.Transaction | None = None
        self.info: StreamInfo | None = None
        self.now = 0

    def __enter__(self) -> PayloadSnapshot:
        self._txn = self._read.__enter__()
        try:
            self.info = lookup_stream(self._txn, self._store, self.stream)
        except BaseException as exc:
            self._read.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self.now = self._clock()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._txn = None
        self._read.__exit__(kind, exc, tb)

    def _open(self) -> lmdb.Transaction:
        if self._txn is None:
            raise RuntimeError("a PayloadSnapshot is read inside its 'with' block only")
        return self._txn

    def scan(self, after: int, upto: int, max_txns: int) -> reads.Scan:
        """The checkpointed transactions ``after < id <= upto`` (``index`` as ``(id, item
        count)``; ``position``, ``full`` and ``blocked`` as in :func:`.reads.scan`)."""
        return reads.scan(self._open(), self._store, self.stream, self.partition, after, upto, max_txns,
                          self.now, load=False)

    def payloads(self, txn_id: int) -> Iterator[memoryview | bytes]:
        """The verified, undecoded payloads of transaction ``txn_id``'s chunks, in order
        (:func:`.reads.transaction_payloads`; ``DataCorrupted`` names a damaged one)."""
        assert self.info is not None
        yield from reads.transaction_payloads(self._open(), self._store, self.info, self.partition, txn_id)
