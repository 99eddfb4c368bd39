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
