"""Operator reads (``Backend.describe_partitions``, ``Backend.list_consumers``,
``Backend.first_open_at``), ``ts.open(create=False)``, and the consumer records
(``DeleteConsumer``, ``ResetOffsets``), embedded and remote alike."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.protocol.backend import MAX_DESCRIBED_PARTITIONS
from tstreams_embedded.testing import eventually


def test_describe_partitions_counts_heads_open_transactions_and_bytes(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=3)
    producer = engine.producer("s")
    ids = [producer.instant([b"a" * 10, b"b" * 10], partition=0) for _ in range(3)]
    cancelled = producer.new_transaction(partition=0)
    cancelled.send(b"gone")
    assert cancelled.id > ids[-1]
    cancelled.cancel()
    opened = producer.new_transaction(partition=1)
    opened.send(b"pending")
    opened.flush()
    before = engine.backend.now_ms()

    p0, p1, p2 = engine.backend.describe_partitions("s")
    assert (p0.partition, p0.first, p0.head, p0.checkpointed, p0.items, p0.open_count) == (0, ids[0], ids[-1], 3, 6, 0)
    assert p0.last_id == cancelled.id  # the highest ID allocated, even if cancelled
    assert p0.bytes > 3 * 2 * 10  # the items' bytes at least, plus keys and records
    assert (p1.checkpointed, p1.head, p1.open_count) == (0, 0, 1)
    assert [(t.id, t.items) for t in p1.open] == [(opened.id, 1)]
    assert p1.open[0].deadline >= before
    assert (p2.last_id, p2.head, p2.bytes) == (0, 0, 0)
    assert [p.partition for p in engine.backend.describe_partitions("s", first=1, count=5)] == [1, 2]
    opened.cancel()


@pytest.fixture(scope="module")
def stream_s(shared_engine: ts.Engine) -> ts.Engine:
    """The module's shared engine with an empty stream ``s`` (the bad-input cases only read)."""
    shared_engine.create_stream("s")
    return shared_engine


@pytest.mark.parametrize("args, error", [
    (("nope",), errors.StreamNotFound),
    (("s", -1), errors.InvalidArgument),
    (("s", 0, 0), errors.InvalidArgument),
    (("s", 0, MAX_DESCRIBED_PARTITIONS + 1), errors.InvalidArgument),
])
def test_describe_partitions_refuses_bad_input(stream_s: ts.Engine, args: tuple, error: type) -> None:
    with pytest.raises(error):
        stream_s.backend.describe_partitions(*args)


def test_first_open_at_finds_the_oldest_transaction_open_at_a_time(engine: ts.Engine) -> None:
    """Open at T: opened before T and checkpointed at or after T, or still open; a
    transaction checkpointed before T, cancelled, or opened at or after T is not."""
    engine.create_stream("s", partitions=2)
    producer = engine.producer("s")
    backend = engine.backend

    def next_ms() -> int:
        now = backend.now_ms()
        eventually(lambda: backend.now_ms() > now, timeout=5)
        return backend.now_ms()

    done = producer.instant([b"done before"], partition=0)
    cancelled = producer.new_transaction(0)
    cancelled.send(b"x")
    cancelled.flush()
    late = producer.new_transaction(0)
    late.send(b"late")
    late.flush()
    cancelled.cancel()
    opened = producer.new_transaction(1)
    opened.send(b"still open")
    opened.flush()
    t = next_ms()
    assert backend.first_open_at("s", 0, t) == late.id  # open at t, checkpointed later (below)
    next_ms()
    late.checkpoint()
    after = producer.instant([b"after"], partition=0)
    assert backend.first_open_at("s", 0, t) == late.id
    assert backend.first_open_at("s", 0, next_ms()) == 0  # everything was checkpointed by then
    assert backend.first_open_at("s", 1, t) == opened.id
    assert backend.first_open_at("s", 1, next_ms()) == opened.id
    assert backend.first_open_at("s", 0, ts.txn_id_at(ts.txn_time(done)) // 100_000) == 0  # not opened before
    assert done < late.id < after
    opened.cancel()


@pytest.mark.parametrize("args, error", [
    (("nope", 0, 1), errors.StreamNotFound),
    (("s", 1, 1), errors.PartitionOutOfRange),
    (("s", "0", 1), errors.InvalidArgument),
    (("s", 0, -1), errors.InvalidArgument),
    (("s", 0, 2**62), errors.InvalidArgument),
    (("s", 0, True), errors.InvalidArgument),
])
def test_first_open_at_refuses_bad_input(stream_s: ts.Engine, args: tuple, error: type) -> None:
    with pytest.raises(error):
        stream_s.backend.first_open_at(*args)


def test_open_with_create_false_needs_an_existing_data_directory(tmp_path) -> None:
    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.mkdir()
    for path in (missing, empty, str(empty)):
        with pytest.raises(errors.DataDirectoryNotFound, match="is not a tstreams data directory"):
            ts.open(path, create=False)
    assert not missing.exists() and list(empty.iterdir()) == []  # nothing created
    with pytest.raises(errors.InvalidArgument, match="create must be True or False"):
        ts.open(tmp_path / "x", create="no")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument, match="path must not be empty"):
        ts.open("", create=True)
    assert not (tmp_path / "x").exists()
    with ts.open(tmp_path / "made") as engine:  # create=True, the default
        engine.create_stream("s")
    with ts.open(tmp_path / "made", create=False) as engine:
        assert [s.name for s in engine.list_streams()] == ["s"]


def test_list_consumers_by_stream_and_all(engine: ts.Engine) -> None:
    for name in ("b", "a"):
        engine.create_stream(name, partitions=2)
        engine.producer(name).instant([b"x"], partition=1)
    for stream, consumer in (("a", "z"), ("a", "y"), ("b", "y")):
        c = engine.consumer(stream, consumer)
        assert c.get_transaction() is not None
        c.checkpoint()
    engine.consumer("b", "never-checkpointed")
    listed = [(c.stream, c.name, sorted(c.offsets)) for c in engine.backend.list_consumers()]
    assert listed == [("a", "y", [0, 1]), ("a", "z", [0, 1]), ("b", "y", [0, 1])]
    assert [c.name for c in engine.backend.list_consumers("a")] == ["y", "z"]
    assert len(engine.backend.list_consumers(limit=2)) == 2
    with pytest.raises(errors.StreamNotFound):
        engine.backend.list_consumers("nope")


def test_reset_offsets_is_guarded_by_the_offsets_read(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    ids = [engine.producer("s").instant([b"%d" % i], partition=0) for i in range(3)]
    c = engine.consumer("s", "c", partitions=[0])
    while c.get_transaction(0) is not None:
        pass
    c.checkpoint()
    stored = engine.backend.get_offsets("s", "c")
    assert stored == {0: ids[-1]}
    engine.backend.submit([O.ResetOffsets("s", "c", stored, {0: ids[0], 1: 0})])
    assert engine.backend.get_offsets("s", "c") == {0: ids[0], 1: 0}  # moved back, atomically
    with pytest.raises(errors.OffsetsConflict):  # the stored offsets are no longer `stored`
        engine.backend.submit([O.ResetOffsets("s", "c", stored, {0: 0})])
    assert engine.backend.get_offsets("s", "c") == {0: ids[0], 1: 0}
    with pytest.raises(errors.PartitionOutOfRange):
        engine.backend.submit([O.ResetOffsets("s", "c", {0: ids[0], 1: 0}, {2: 0})])
    again = engine.consumer("s", "c", partitions=[0])
    assert [t.id for t in iter(lambda: again.get_transaction(0), None)] == ids[1:]


def test_delete_consumer_removes_every_offset_of_that_consumer_only(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    engine.backend.submit([O.SetOffsets("s", "c", {0: 5, 1: 6}), O.SetOffsets("s", "c2", {0: 7})])
    assert engine.backend.submit([O.DeleteConsumer("s", "c")]) == [2]
    assert engine.backend.get_offsets("s", "c") == {}
    assert engine.backend.get_offsets("s", "c2") == {0: 7}
    assert engine.backend.submit([O.DeleteConsumer("s", "c")]) == [0]
    with pytest.raises(errors.StreamNotFound):
        engine.backend.submit([O.DeleteConsumer("nope", "c")])


class ConsumerOffsetsMachine(RuleBasedStateMachine):
    """``SetOffsets``, guarded ``ResetOffsets`` and ``DeleteConsumer`` against a dict model;
    ``get_offsets`` and ``list_consumers`` agree with it after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.engine = ts.open(self.tmp.name, compaction_interval=None)
        self.engine.create_stream("s", partitions=3)
        self.model: dict[str, dict[int, int]] = {}

    names = st.sampled_from(["a", "b", "c"])
    offsets = st.dictionaries(st.integers(0, 2), st.integers(0, 2**63 - 1), max_size=3)

    @rule(name=names, offsets=offsets)
    def set_offsets(self, name: str, offsets: dict[int, int]) -> None:
        self.engine.backend.submit([O.SetOffsets("s", name, offsets)])
        if offsets:
            self.model.setdefault(name, {}).update(offsets)

    @rule(name=names, offsets=offsets, stale=st.booleans())
    def reset(self, name: str, offsets: dict[int, int], stale: bool) -> None:
        current = dict(self.model.get(name, {}))
        stored = current.get(0, 0)
        expected = {**current, 0: stored + 1 if stored < 2**63 - 1 else 0} if stale else current  # != stored
        if expected != current:
            with pytest.raises(errors.OffsetsConflict):
                self.engine.backend.submit([O.ResetOffsets("s", name, expected, offsets)])
            return
        self.engine.backend.submit([O.ResetOffsets("s", name, expected, offsets)])
        if offsets:
            self.model.setdefault(name, {}).update(offsets)

    @rule(name=names)
    def delete(self, name: str) -> None:
        assert self.engine.backend.submit([O.DeleteConsumer("s", name)]) == [len(self.model.pop(name, {}))]

    @invariant()
    def agrees_with_the_model(self) -> None:
        listed = {c.name: c.offsets for c in self.engine.backend.list_consumers("s")}
        assert listed == self.model
        for name in ("a", "b", "c"):
            assert self.engine.backend.get_offsets("s", name) == self.model.get(name, {})

    def teardown(self) -> None:
        self.engine.close()
        self.tmp.cleanup()


ConsumerOffsetsMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=15, deadline=None)
test_consumer_offsets_machine = ConsumerOffsetsMachine.TestCase


def test_an_open_transaction_past_its_deadline_is_described_as_expired_not_open(engine: ts.Engine) -> None:
    """A writer that died leaves its open transactions to expire; from their deadline on they
    count as expired, never as open (so a script waiting for 0 open transactions ends)."""
    engine.create_stream("s")
    (abandoned,) = engine.backend.submit([O.Open("s", 0, 300)])  # no keep-alive: expires in 0.3 s
    (p,) = engine.backend.describe_partitions("s")
    assert (p.open_count, [t.id for t in p.open], p.expired) == (1, [abandoned], 0)

    def expired() -> bool:
        (p,) = engine.backend.describe_partitions("s")
        return (p.open_count, p.open, p.expired) == (0, [], 1)

    eventually(expired, timeout=10)
    assert engine.consumer("s", "c").get_transaction() is None  # a reader passes it (and invalidates it)
    (p,) = engine.backend.describe_partitions("s")
    assert (p.open_count, p.expired) == (0, 0)
