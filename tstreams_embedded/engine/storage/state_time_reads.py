"""Read-only reads of a Core's state judged at a given *state time* (a cluster follower's).

:class:`~.core.Core` judges expiry by its clock and, when a scan meets an expired open
transaction, *writes* an ``INVALIDATE`` before scanning on. A cluster follower must not
write on its own, and its wall clock means nothing for the replicated state: what counts is
the time of the last log entry it applied (``now_ms``). :class:`StateTimeReader` serves
the read methods of the network handlers over the same store, with:

* the clock replaced by ``state_time()`` (TTL floors, expiry);
* scans that step over an open transaction expired at that time *without writing*. This is
  consistent with the replicated log: entries' times never decrease, so a transaction
  expired at the applied entry's time can never be checkpointed by a later entry (its
  apply would fail with ``TransactionExpired`` on every node).

It is what :mod:`tstreams_embedded.cluster.follower_reads` serves follower reads with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ... import errors
from ..protocol.backend import IndexScan, StreamInfo
from . import paging, reads
from .core import Core
from .paging import ScanPage
from .store import Store


class StateTimeReader:
    """The read methods of ``core``, judged at ``state_time()`` and never writing."""

    def __init__(self, core: Core, state_time: Callable[[], int]) -> None:
        self.core = core
        self.store: Store = core.store
        self.clock = state_time
        self.path = core.path
        self.durability = core.durability

    @property
    def closed(self) -> bool:
        return self.core.closed

    @property
    def max_item_size(self) -> int:
        return self.core.max_item_size

    def _check(self) -> None:
        if self.core.closed:
            raise errors.EngineClosed(f"engine at {self.core.path!r} is closed")

    # -- reads with no time in them: the Core's own ---------------------------------
    def get_stream(self, name: str) -> StreamInfo:
        return self.core.get_stream(name)

    def list_streams(self, prefix: str = "", limit: int | None = None) -> list[StreamInfo]:
        return self.core.list_streams(prefix, limit)

    def last_txn_id(self, stream: str, partition: int) -> int:
        return self.core.last_txn_id(stream, partition)

    def get_offsets(self, stream: str, consumer: str) -> dict[int, int]:
        return self.core.get_offsets(stream, consumer)

    def get_marker(self, key: str) -> int | None:
        return self.core.get_marker(key)

    def wait_for_commit(self, seen: int, timeout: float) -> int:
        return self.core.wait_for_commit(seen, timeout)

    # -- reads at the state time -------------------------------------------------------
    def scan_index(self, stream: str, partition: int, after: int, upto: int = 2**63 - 1,
                   max_txns: int = 4096) -> IndexScan:
        self._check()
        # expired at the state time: passed over, never written
        return reads.scan_index(self.store, self.clock, stream, partition, after, upto, max_txns, lambda s: None)

    def page_scan(self, stream: str, partition: int, after: int, upto: int, max_txns: int, cursor: Any,
                  cap: int) -> ScanPage:
        self._check()
        return paging.scan(self, stream, partition, after, upto, max_txns, cursor, cap)

    def page_transaction(self, stream: str, partition: int, txn_id: int, cursor: Any, cap: int) -> list[Any]:
        self._check()
        return paging.one(self, stream, partition, txn_id, cursor, cap)

    def page_last_transaction(self, stream: str, partition: int, cursor: Any, cap: int) -> list[Any]:
        self._check()
        return paging.last(self, stream, partition, cursor, cap)
