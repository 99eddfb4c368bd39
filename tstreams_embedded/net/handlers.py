"""Every :class:`~tstreams_embedded.engine.protocol.backend.Backend` method as a server handler.

Method names and argument lists are the Backend's, so a :class:`RemoteBackend` call and an
embedded call run the very same engine code and raise the same exceptions. Results travel
in their ``to_wire()`` forms.

* ``submit(ops, durable)`` runs on the server's ordered write executor. Every queued submit
  is handed to the engine's group committer at once: each call stays atomic on its own (one
  nested LMDB transaction each), the whole burst shares one LMDB commit and one fsync, and
  calls apply in arrival order.
* Reads (``get_stream`` … ``now_ms``) are fast LMDB snapshot reads and run inline. The
  reads that return items (``get_transaction``, ``last_transaction``,
  ``transactions_range``, ``fetch``) are paged (:mod:`~tstreams_embedded.engine.storage.paging`): no
  reply carries more than ``page_bytes`` of items; it then ends with a cursor, and the
  client asks again with it.
* ``wait_for_commit(seen, timeout)`` is a generator: it parks on the server's commit watch
  (never blocking the loop) and returns the newest commit sequence.
* ``watch(seen)`` is a subscription: one response per commit-sequence change, until the
  client cancels it (``cancel(request_id)``) or goes away.
* ``compact()``, ``list_consumers`` and ``describe_partitions`` (operator reads that visit
  every offset or transaction record they cover) and ``store_snapshot`` (several store
  ranges in one read transaction, its answer bounded in bytes) run on the thread pool.

The served object must provide :class:`ServedBackend`: the Backend, plus what the server
reports (``path``, ``durability``) and runs (``compact``, ``submit_many``).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Sequence
from typing import Any, Protocol

from .. import errors
from ..engine.protocol import ops as O
from ..engine.protocol.backend import Backend, StoreScan
from ..engine.protocol.validate import check_int, check_wait
from ..engine.storage.paging import ScanPage
from . import framing
from .registry import Registry, WaitCommit
from .session import Session

MAX_WAIT = 300.0
DEFAULT_PAGE_BYTES = 16 * 1024 * 1024


class ServedBackend(Backend, Protocol):
    """What :func:`backend_registry` serves (the embedded :class:`~tstreams_embedded.engine.storage.core.Core`)."""

    #: The data directory.
    path: str
    #: ``"sync"``, ``"strict"`` or ``"async"``.
    durability: str

    def submit_many(self, calls: Sequence[tuple[Sequence[O.Operation], bool]]) -> list[tuple[bool, Any]]:
        """Several ``submit(ops, durable)`` calls in one commit group; one ``(ok, value)`` each."""
        ...

    def page_transaction(self, stream: str, partition: int, txn_id: int, cursor: Any, cap: int) -> list[Any]:
        """``get_transaction`` in pages of at most ``cap`` bytes of items."""
        ...

    def page_last_transaction(self, stream: str, partition: int, cursor: Any, cap: int) -> list[Any]:
        """``last_transaction`` in pages."""
        ...

    def page_scan(self, stream: str, partition: int, after: int, upto: int, max_txns: int, cursor: Any,
                  cap: int) -> ScanPage:
        """``fetch`` / ``transactions_range`` in pages."""
        ...


Outcome = tuple[bool, Any]
"""``(True, results)`` or ``(False, exception)`` for one submit call."""


#: The record classes whose batches may be concatenated (:attr:`.ops.OpSpec.mergeable`).
_MERGEABLE: frozenset[type] = frozenset(spec.record for spec in O.all_specs() if spec.mergeable)


def submit_many(core: ServedBackend, calls: Sequence[Sequence[Any]]) -> list[Outcome]:
    """Submit several wire ``(ops, durable)`` calls in arrival order; one outcome each.

    Each call's rows are decoded into operation records (:func:`.ops.decode_all`); the
    engine then checks them as a client batch. Each call stays atomic on its own and sees
    the effects of the calls before it, exactly as if they were submitted one after the
    other. How:

    1. When every call is made of mergeable records (:attr:`.ops.OpSpec.mergeable`: they do
       not create or delete streams, so concatenating them changes nothing), the calls are
       first tried as ONE engine batch (one nested transaction and one commit-log entry
       instead of one per call: half the engine's cost per call). If that batch fails,
       nothing of it was written, and the calls are submitted again separately (step 2) so
       that only the bad one fails.
    2. Otherwise they go to ``core.submit_many``: one commit group (one LMDB commit, one
       fsync) for all, one nested transaction per call.

    Decoding, the checks and the mergeability test are one pass over the calls (this runs
    for every write request the server receives).
    """
    out: list[Outcome | None] = [None] * len(calls)
    reqs: list[tuple[int, tuple[list[O.Operation], bool]]] = []
    merged: list[O.Operation] = []  # every call's records, while all of them are mergeable
    mergeable = True
    durable_any = False
    decode_all = O.decode_all
    for i, args in enumerate(calls):
        try:
            ops = decode_all(args[0])
            durable = args[1] if len(args) > 1 else True
            if type(durable) is not bool:
                raise errors.InvalidArgument(f"durable must be a boolean, got {type(durable).__name__}")
            if core.closed:
                raise errors.EngineClosed(f"engine at {core.path!r} is closed")
            if not ops:
                out[i] = (True, [])
                continue
            reqs.append((i, (ops, durable)))
            if mergeable:
                for op in ops:
                    if type(op) not in _MERGEABLE:
                        mergeable = False
                        break
                else:
                    merged += ops
                    durable_any = durable_any or durable
        except Exception as e:
            out[i] = (False, e)
    if len(reqs) == 1:
        i, (ops, durable) = reqs[0]
        try:
            out[i] = (True, core.submit(ops, durable))
        except Exception as e:
            out[i] = (False, e)
    elif reqs and not (mergeable and _merged(core, reqs, merged, durable_any, out)):
        results = core.submit_many([c for _, c in reqs])
        for (i, _), res in zip(reqs, results, strict=True):
            out[i] = res
    return [o if o is not None else (False, errors.TStreamsError("no outcome")) for o in out]


def _merged(core: ServedBackend, reqs: list[tuple[int, tuple[list[O.Operation], bool]]],
            merged: list[O.Operation], durable: bool, out: list[Outcome | None]) -> bool:
    """Step 1 of :func:`submit_many`: ``merged`` (the records of every call of ``reqs``, in
    order) as one batch. False when the batch failed (nothing of it was written)."""
    try:
        results = core.submit(merged, durable)
    except errors.TStreamsError:
        return False  # nothing was written; retried call by call
    k = 0
    for i, (ops, _) in reqs:
        n = len(ops)
        out[i] = (True, results[k : k + n] if n > 1 else [results[k]])
        k += n
    return True


def backend_registry(core: ServedBackend, server_info: dict[str, Any] | None = None,
                     page_bytes: int = DEFAULT_PAGE_BYTES) -> Registry:
    """A :class:`Registry` exposing ``core``; item-returning reads answer at most
    ``page_bytes`` of items per reply."""
    if isinstance(page_bytes, bool) or not isinstance(page_bytes, int) or page_bytes < 1:
        raise errors.InvalidArgument(f"page_bytes must be a positive integer, got {page_bytes!r}")
    reg = Registry()
    info = dict(server_info or {})

    def submit(session: Session, ops: Any, durable: bool = True) -> list[Any]:
        (ok, value), = submit_many(core, [(ops, durable)])
        if not ok:
            raise value
        results: list[Any] = value
        return results

    reg.add("submit", submit, executor="write", batch=lambda calls: submit_many(core, calls))

    @reg.call("get_stream")
    def get_stream(session: Session, name: str) -> list[Any]:
        return core.get_stream(name).to_wire()

    @reg.call("list_streams")
    def list_streams(session: Session, prefix: str = "", limit: int | None = None) -> list[Any]:
        return [s.to_wire() for s in core.list_streams(prefix, limit)]

    @reg.call("fetch")
    def fetch(session: Session, stream: str, partition: int, after: int, max_txns: int = 256,
              cursor: Any = None) -> list[Any]:
        """``[[txns, position, blocked, stream_id], cursor, dropped]`` (see :mod:`..engine.storage.paging`)."""
        check_int(max_txns, "max_txns", 0 if cursor is not None else 1, 1 << 20)
        page, position, blocked = core.page_scan(stream, partition, after, 2**63 - 1, max_txns, cursor, page_bytes)
        return [[page.txns, position, blocked, page.stream_id], page.cursor, page.dropped]

    @reg.call("scan_index")
    def scan_index(session: Session, stream: str, partition: int, after: int, upto: int = 2**63 - 1,
                   max_txns: int = 4096) -> list[Any]:
        return core.scan_index(stream, partition, after, upto, max_txns).to_wire()

    @reg.call("get_transaction")
    def get_transaction(session: Session, stream: str, partition: int, txn_id: int,
                        cursor: Any = None) -> list[Any]:
        """``[txn or None, cursor]``."""
        return core.page_transaction(stream, partition, txn_id, cursor, page_bytes)

    @reg.call("transactions_range")
    def transactions_range(session: Session, stream: str, partition: int, from_id: int, to_id: int,
                           cursor: Any = None) -> list[Any]:
        """``[txns, cursor, dropped]``."""
        check_int(from_id, "from_id", 0, 2**63 - 1)
        check_int(to_id, "to_id", 0, 2**63 - 1)
        page, _, _ = core.page_scan(stream, partition, max(from_id - 1, 0), to_id, 2**62, cursor, page_bytes)
        return [page.txns, page.cursor, page.dropped]

    @reg.call("last_transaction")
    def last_transaction(session: Session, stream: str, partition: int, cursor: Any = None) -> list[Any]:
        """``[txn or None, cursor]``."""
        return core.page_last_transaction(stream, partition, cursor, page_bytes)

    @reg.call("last_txn_id")
    def last_txn_id(session: Session, stream: str, partition: int) -> int:
        return core.last_txn_id(stream, partition)

    @reg.call("get_offsets")
    def get_offsets(session: Session, stream: str, consumer: str) -> dict[int, int]:
        return core.get_offsets(stream, consumer)

    @reg.call("store_get")
    def store_get(session: Session, store: str, key: bytes) -> bytes | None:
        return core.store_get(store, key)

    @reg.call("store_range")
    def store_range(session: Session, store: str, start: bytes | None = None, end: bytes | None = None,
                    limit: int = 10_000) -> list[Any]:
        return [list(kv) for kv in core.store_range(store, start, end, limit)]

    @reg.call("store_windows")
    def store_windows(session: Session, store: str, key: bytes | None, end_from: int, end_to: int,
                      limit: int = 10_000) -> list[Any]:
        return [list(kv) for kv in core.store_windows(store, key, end_from, end_to, limit)]

    @reg.call("store_snapshot", executor="pool")
    def store_snapshot(session: Session, scans: Any, max_bytes: int | None = None) -> list[Any]:
        if not isinstance(scans, (list, tuple)):
            raise errors.InvalidArgument(f"scans must be a list, got {type(scans).__name__}")
        return [[list(kv) for kv in got]
                for got in core.store_snapshot([StoreScan.from_wire(s) for s in scans], max_bytes)]

    @reg.call("get_marker")
    def get_marker(session: Session, key: str) -> int | None:
        return core.get_marker(key)

    @reg.call("list_consumers", executor="pool")
    def list_consumers(session: Session, stream: str | None = None, limit: int | None = None) -> list[Any]:
        return [c.to_wire() for c in core.list_consumers(stream, limit)]

    @reg.call("backup_begin", executor="pool")
    def backup_begin(session: Session) -> list[Any]:
        return core.backup_begin().to_wire()

    @reg.call("backup_read", executor="pool")
    def backup_read(session: Session, token: str, offset: int, size: int) -> bytes:
        return core.backup_read(token, offset, size)

    @reg.call("backup_end", executor="pool")
    def backup_end(session: Session, token: str) -> None:
        core.backup_end(token)

    @reg.call("queue_status", executor="pool")
    def queue_status(session: Session, stream: str, group: str, full: bool = False) -> list[Any]:
        return core.queue_status(stream, group, full).to_wire()

    @reg.call("describe_partitions", executor="pool")
    def describe_partitions(session: Session, stream: str, first: int = 0, count: int = 256) -> list[Any]:
        return [p.to_wire() for p in core.describe_partitions(stream, first, count)]

    @reg.call("first_open_at", executor="pool")
    def first_open_at(session: Session, stream: str, partition: int, ms: int) -> int:
        return core.first_open_at(stream, partition, ms)

    @reg.call("stats")
    def stats(session: Session) -> dict[str, Any]:
        return core.stats()

    @reg.call("now_ms")
    def now_ms(session: Session) -> int:
        return core.now_ms()

    @reg.call("compact", executor="pool")
    def compact(session: Session) -> dict[str, int]:
        return core.compact()

    @reg.stream("wait_for_commit")
    def wait_for_commit(session: Session, seen: int, timeout: float) -> Generator[WaitCommit, int, int]:
        timeout = check_wait(seen, timeout)  # the engine's own check: nan or inf would never end
        if core.closed:
            raise errors.EngineClosed(f"engine at {core.path!r} is closed")
        if timeout <= 0:
            return core.wait_for_commit(seen, 0)
        yield WaitCommit(seen, min(timeout, MAX_WAIT))
        return core.wait_for_commit(seen, 0)  # the newest sequence, read now

    @reg.stream("watch")
    def watch(session: Session, seen: int) -> Generator[WaitCommit | int, int, None]:
        check_wait(seen, 0)
        while True:
            current = yield WaitCommit(seen, 30.0)
            if current > seen:
                seen = current
                yield current

    @reg.call("server_info")
    def get_server_info(session: Session) -> dict[str, Any]:
        return {
            **info,
            "pid": os.getpid(),
            "max_item_size": core.max_item_size,
            "durability": core.durability,
            "methods": reg.names(),
            "protocol_versions": list(framing.SUPPORTED_VERSIONS),
        }

    return reg
