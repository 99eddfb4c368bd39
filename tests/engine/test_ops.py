"""Operation records: one typed record per operation, its encoding, and the rules that
separate client submits from log replay."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O

names = st.text(min_size=1, max_size=12).filter(lambda s: "\x00" not in s)
ints = st.integers(min_value=0, max_value=2**63 - 1)
small = st.integers(min_value=0, max_value=1000)
chunks = st.lists(st.binary(max_size=20), max_size=4).map(O.pack_items)
optional = st.none() | ints
targets = (st.tuples(names, small, ints) | st.tuples(names, small, ints, ints)).map(list)

RECORD_STRATEGIES: dict[type, Any] = {
    O.CreateStream: st.builds(O.CreateStream, names, small, small, st.text(max_size=8)),
    O.DeleteStream: st.builds(O.DeleteStream, names),
    O.Open: st.builds(O.Open, names, small, small, optional, optional, st.none() | chunks, stream_id=optional),
    O.Data: st.builds(O.Data, names, small, ints, chunks, stream_id=optional),
    O.Checkpoint: st.builds(O.Checkpoint, names, small, ints, st.none() | chunks, stream_id=optional),
    O.Cancel: st.builds(O.Cancel, names, small, ints, stream_id=optional),
    O.Instant: st.builds(O.Instant, names, small, chunks, optional, stream_id=optional),
    O.KeepAlive: st.builds(O.KeepAlive, st.lists(targets, max_size=3), small, optional),
    O.Invalidate: st.builds(O.Invalidate, names, small, ints, stream_id=optional),
    O.SetOffsets: st.builds(O.SetOffsets, names, names, st.dictionaries(small, ints, max_size=3),
                            stream_id=optional),
    O.Compact: st.builds(O.Compact, names, small, ints, stream_id=optional),
    O.SetMarker: st.builds(O.SetMarker, names, st.integers(-(2**63), 2**63 - 1), st.booleans()),
    O.CancelIfOpen: st.builds(O.CancelIfOpen, names, small, ints, stream_id=optional),
    O.DeleteConsumer: st.builds(O.DeleteConsumer, names, names, stream_id=optional),
    O.ResetOffsets: st.builds(O.ResetOffsets, names, names, st.dictionaries(small, ints, max_size=3),
                              st.dictionaries(small, ints, max_size=3), stream_id=optional),
    O.StoreWrite: st.builds(O.StoreWrite, names, st.lists(st.lists(st.binary(max_size=8), min_size=2, max_size=2),
                                                          max_size=3),
                            st.none() | st.lists(st.binary(max_size=8), min_size=1, max_size=3),
                            st.none() | st.lists(st.lists(st.none() | st.binary(max_size=8), min_size=2,
                                                          max_size=2), min_size=1, max_size=2)),
    O.Lease: st.builds(O.Lease, names, st.binary(max_size=8), names, small, small, st.booleans(), optional),
    O.CheckLease: st.builds(O.CheckLease, names, st.binary(max_size=8), names, small),
    O.QueueDeclare: st.builds(O.QueueDeclare, names, names, small, small, st.none() | names,
                              st.lists(small, max_size=3), small, stream_id=optional),
    O.QueueReceive: st.builds(O.QueueReceive, names, names, names, small, small, stream_id=optional,
                              deliveries=st.none() | st.lists(st.lists(small, min_size=4, max_size=4), max_size=3)),
    O.QueueSettle: st.builds(O.QueueSettle, names, names, names, st.integers(1, 4),
                             st.lists(st.lists(small, min_size=4, max_size=4), min_size=1, max_size=3),
                             st.none() | small, st.none() | st.text(max_size=8), stream_id=optional),
    O.Schedule: st.builds(O.Schedule, names, small, chunks, st.none() | ints, st.none() | ints, optional, optional,
                          optional, stream_id=optional),
    O.CancelSchedule: st.builds(O.CancelSchedule, ints),
    O.FireSchedule: st.builds(O.FireSchedule, ints, optional),
}
any_record = st.one_of(*RECORD_STRATEGIES.values())


def test_every_record_has_a_strategy_here_and_a_unique_opcode() -> None:
    assert set(RECORD_STRATEGIES) == set(O.RECORDS)
    assert sorted(s.opcode for s in O.all_specs()) == sorted(O.Opcode)


@given(st.lists(any_record, max_size=6), st.integers(0, 2**62))
def test_log_encoding_round_trips(records: list[Any], now: int) -> None:
    assert O.unpack_batch(O.pack_batch(now, records)) == (now, records)
    assert [O.decode(O.encode(r)) for r in records] == records


def test_logs_written_before_typed_records_still_decode() -> None:
    """The commit-log value format is unchanged: ``[now_ms, [[opcode, *fields], ...]]``."""
    chunk = O.pack_items([b"a"])
    old = msgpack.packb([123, [[1, "s", 2, 60, ""], [7, "s", 0, chunk, 99], [3, "s", 1, 500, 100, 900, None],
                               [10, "s", "c", {0: 99}], [12, "m", 5, True]]], use_bin_type=True)
    now, records = O.unpack_batch(old)
    assert now == 123
    assert records == [O.CreateStream("s", 2, 60), O.Instant("s", 0, chunk, 99), O.Open("s", 1, 500, 100, 900),
                       O.SetOffsets("s", "c", {0: 99}), O.SetMarker("m", 5, True)]


@pytest.mark.parametrize("row", [[], [0], [99, "s"], ["OPEN", "s"], [True, "s"], [7, "s"],
                                 [7, "s", 0, b"", None, 1, 2]])
def test_malformed_rows_are_refused_by_decode(row: list[Any]) -> None:
    with pytest.raises(errors.InvalidArgument):
        O.decode(row)


def test_client_batches_accept_client_records_only() -> None:
    chunk = O.pack_items([b"x"])
    assert O.check_client_batch((O.Instant("s", 0, chunk),)) == [O.Instant("s", 0, chunk)]
    refused = [O.Instant("s", 0, chunk, 5), O.Open("s", 0, 10, deadline=5), O.KeepAlive([], 10, 5),
               O.Compact("s", 0, 1), O.Invalidate("s", 0, 1), (7, "s", 0, chunk, None), "ops"]
    for op in refused:
        with pytest.raises(errors.InvalidArgument):
            O.check_client_batch([op])
    with pytest.raises(errors.InvalidArgument, match="list"):
        O.check_client_batch("not a list")


def test_replay_accepts_resolved_records_and_reproduces_ids(make_engine) -> None:
    """The privileged path: a replica applies the leader's resolved records as given."""
    leader = make_engine()
    leader.create_stream("s")
    tid = leader.producer("s").instant([b"a"])
    replica = make_engine()
    core = replica.backend
    entries = leader.backend.read_log(1)
    assert any(isinstance(op, O.Instant) and op.txn_id == tid for _, _, ops in entries for op in ops)
    core.apply_log(entries)
    assert core.get_transaction("s", 0, tid).items == [b"a"]
    with pytest.raises(errors.InvalidArgument):
        core.apply_log([(99, 1, [("not", "a", "record")])])


def test_specs_describe_the_records() -> None:
    assert O.spec(O.Data("s", 0, 1, b"")).addresses_txn
    assert O.txn_address(O.Checkpoint("s", 1, 7)) == ("s", 1, 7)
    assert O.txn_address(O.Instant("s", 1, b"")) is None
    assert not O.is_mergeable(O.CreateStream("s", 1, 1)) and O.is_mergeable(O.Instant("s", 0, b""))
    assert O.spec(O.Instant("s", 0, b"")).resolved == ("txn_id",)
    assert O.describe(O.Cancel("s", 2, 9)) == "CANCEL('s', 2)"
    assert O.TxnState.OPENED.label == "open" and O.TxnState(5) is O.TxnState.CHECKPOINTED


@pytest.mark.parametrize("spec", O.all_specs(), ids=lambda s: s.name)
def test_decode_of_a_full_row_equals_the_constructor_and_short_rows_get_defaults(spec: O.OpSpec) -> None:
    """A row with every field (what ``encode`` writes) is built without the record's
    Python-level ``__new__``: it must give the very record the constructor gives; rows that
    leave defaulted fields out still get the defaults, and a row with a field too many fails."""
    fields = spec.record._fields  # type: ignore[attr-defined]
    assert spec.width == len(fields)
    required = [f for f in fields if f not in spec.record._field_defaults]  # type: ignore[attr-defined]
    full = [int(spec.opcode), *[f"v{i}" for i in range(len(fields))]]
    op = O.decode(full)
    assert type(op) is spec.record and op == spec.record(*full[1:]) and op._fields == fields
    short = full[: 1 + len(required)]
    assert O.decode(short) == spec.record(*short[1:])
    with pytest.raises(errors.InvalidArgument, match="takes"):
        O.decode([*full, "extra"])
