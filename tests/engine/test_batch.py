"""engine.batch(): many operations in one atomic write. Runs on every backend."""

from __future__ import annotations

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors


def test_batch_applies_everything_in_one_write(engine: ts.Engine) -> None:
    seq = engine.stats()["log_seq"]
    with engine.batch() as b:
        for i in range(5):
            b.create_stream(f"s{i}", partitions=2)
            b.instant(f"s{i}", [b"first", b"second"], partition=1)
            b.instant(f"s{i}", ["json"], serializer="json")
        b.set_offsets("s0", "c", {1: 7})
        assert len(b) == 16
    assert engine.stats()["log_seq"] == seq + 1
    assert [type(r).__name__ for r in b.results[:3]] == ["StreamInfo", "int", "int"]
    assert b.results[0].name == "s0" and b.results[0].partitions == 2
    c = engine.consumer("s3", "reader")
    assert c.get_transaction(1).id == b.results[3 * 3 + 1]
    assert c.get_transaction(1) is None and c.get_transaction(0).items == [b'"json"']
    assert engine.backend.get_offsets("s0", "c") == {1: 7}
    with pytest.raises(errors.TransactionFinished):
        b.commit()


@pytest.mark.parametrize("bad", ["duplicate", "partition", "unknown stream"])
def test_a_failing_batch_writes_nothing(engine: ts.Engine, bad: str) -> None:
    engine.create_stream("exists")
    seq = engine.stats()["log_seq"]
    b = engine.batch()
    b.create_stream("new")
    b.instant("new", [b"x"])
    b.instant("exists", [b"y"])
    if bad == "duplicate":
        b.create_stream("exists")
    elif bad == "partition":
        b.instant("exists", [b"z"], partition=3)
    else:
        b.instant("missing", [b"z"])
    with pytest.raises((errors.StreamExists, errors.PartitionOutOfRange, errors.StreamNotFound)):
        b.commit()
    assert engine.stats()["log_seq"] == seq
    assert not engine.has_stream("new")
    assert engine.consumer("exists", "c").get_transaction() is None


def test_an_exception_in_the_block_writes_nothing(engine: ts.Engine) -> None:
    with pytest.raises(RuntimeError):
        with engine.batch() as b:
            b.create_stream("never")
            raise RuntimeError("abort")
    assert not engine.has_stream("never") and b.results is None


def test_batch_argument_errors(engine: ts.Engine) -> None:
    b = engine.batch()
    for call in (lambda: b.create_stream(""), lambda: b.create_stream("s", partitions=0),
                 lambda: b.instant("s", []), lambda: b.instant("s", ["str without serializer"]),
                 lambda: b.set_offsets("s", "", {0: 1})):
        with pytest.raises(errors.InvalidArgument):
            call()
    assert len(b) == 0
    assert b.commit() == []


def test_ids_allocated_in_a_batch_are_stored_once_per_partition_and_survive_a_delete(engine: ts.Engine) -> None:
    """A batch writes each partition's last transaction ID once, at its end (not per
    record): a later batch, a read of the partition, and a deletion inside the same batch
    (which raises the ID floor from those IDs) all see the IDs the batch allocated."""
    engine.create_stream("ids", partitions=2)
    with engine.batch() as b:
        for i in range(30):
            b.instant("ids", [b"%d" % i], partition=i % 2)
    first = b.results
    for p in (0, 1):  # IDs are per partition: strictly increasing within each
        ids = first[p::2]
        assert ids == sorted(set(ids)) and len(ids) == 15
    assert engine.backend.last_txn_id("ids", 0) == first[-2]
    assert engine.backend.last_txn_id("ids", 1) == first[-1]
    later = engine.producer("ids").instant([b"later"], partition=1)
    assert later > first[-1]
    with engine.batch() as b:  # allocate, delete in the same batch, create again, allocate
        b.instant("ids", [b"gone"], partition=0)
        b.delete_stream("ids")
        b.create_stream("ids", partitions=2)
        b.instant("ids", [b"new"], partition=0)
    gone, new = b.results[0], b.results[3]
    # IDs never repeat in a partition, even across a deletion (``later`` is partition 1's: IDs of
    # two partitions may be equal when written in the same millisecond)
    assert new > gone > first[-2]
    assert [t.items for t in engine.backend.transactions_range("ids", 0, 0, 2**62)] == [[b"new"]]
    assert engine.backend.last_txn_id("ids", 0) == new
