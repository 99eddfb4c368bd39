"""The planning scan reads the index only (``Backend.scan_index``) and finds exactly what
reading the transactions finds, embedded and remote."""

from __future__ import annotations

import pytest

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.protocol.iteration import iter_transactions
from tstreams_embedded.spark import scan as S


def _reference(backend, stream, partition, after, upto=None, max_rows=None) -> S.PartitionScan:
    """What a scan must find, computed from full transactions read with ``fetch``."""
    walk = iter_transactions(backend, stream, partition, after, S.MAX_ID if upto is None else upto)
    txns = [(t.id, len(t.items)) for t in walk]
    if max_rows is not None:
        kept, rows = [], 0
        for tid, n in txns:
            if kept and rows + n > max_rows:
                return S.PartitionScan(kept, kept[-1][0], False, True)
            kept.append((tid, n))
            rows += n
    return S.PartitionScan(txns, walk.position, walk.blocked)


def _stage(backend, ttl_ms=60_000, items=(b"x",)):
    (tid,) = backend.submit([O.Open("s", 0, ttl_ms)])
    backend.submit([O.Data("s", 0, tid, O.pack_items(list(items)))])
    return tid


def test_index_scan_matches_reading_the_transactions(engine):
    engine.create_stream("s", partitions=1)
    backend = engine.backend
    producer = engine.producer("s")
    ids = [producer.instant([b"a"] * n, partition=0) for n in (3, 1, 5, 2)]
    cancelled = _stage(backend)
    backend.submit([O.Cancel("s", 0, cancelled)])
    ids += [producer.instant([b"b"] * n, partition=0) for n in (4, 4)]
    opened = _stage(backend)
    ids += [producer.instant([b"c"], partition=0)]
    for after in (0, ids[0], ids[3], cancelled, ids[5]):
        for upto in (None, ids[2], cancelled, ids[4] - 1, ids[-1]):
            for max_rows in (None, 1, 4, 5, 9, 100):
                got = S.scan_partition(backend, "s", 0, after, upto, max_rows)
                assert got == _reference(backend, "s", 0, after, upto, max_rows), (after, upto, max_rows)
    full = S.scan_partition(backend, "s", 0, 0)
    assert full.blocked and full.position == ids[5] and [t for t, _ in full.txns] == ids[:6]
    backend.submit([O.Checkpoint("s", 0, opened)])
    full = S.scan_partition(backend, "s", 0, 0)
    assert full == _reference(backend, "s", 0, 0) and not full.blocked
    assert [t for t, _ in full.txns] == ids[:6] + [opened, ids[6]]


def test_expired_open_transaction_is_invalidated_then_passed(data_dir, tstreams_clock):
    with ts.open(str(data_dir), clock=tstreams_clock) as engine:
        engine.create_stream("s", partitions=1)
        backend = engine.backend
        first = engine.producer("s").instant([b"a"], partition=0)
        _stage(backend, ttl_ms=300)
        last = engine.producer("s").instant([b"b"], partition=0)
        tstreams_clock.advance(299)
        assert S.scan_partition(backend, "s", 0, 0).blocked  # still open
        tstreams_clock.advance(2)
        fast = S.scan_partition(backend, "s", 0, 0)
        assert [t for t, _ in fast.txns] == [first, last] and not fast.blocked


def test_unknown_stream_and_partition(engine):
    from tstreams_embedded.errors import PartitionOutOfRange, StreamNotFound

    engine.create_stream("s", partitions=1)
    with pytest.raises(StreamNotFound):
        S.scan_partition(engine.backend, "nope", 0, 0)
    with pytest.raises(PartitionOutOfRange):
        S.scan_partition(engine.backend, "s", 3, 0)
