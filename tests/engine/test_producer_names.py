"""Producer names: ``Engine.producer(name=...)`` (default ``host:pid/N``) is recorded with
each transaction it opens (``Open.producer``) while that transaction is open, shown by
``Backend.describe_partitions``, gone once it is checkpointed; records written without it
(older versions, or a bare ``Open``) still read, replay and report ``None``; bad names are
refused before anything is written. Embedded and remote alike."""

from __future__ import annotations

import os
import re
import socket

import lmdb
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.operator import check
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.protocol.ops import TxnState
from tstreams_embedded.engine.protocol.validate import MAX_PRODUCER_BYTES, check_producer_name
from tstreams_embedded.engine.storage import keys, seals


def open_producers(engine: ts.Engine, stream: str = "s") -> list[str | None]:
    return [t.producer for p in engine.backend.describe_partitions(stream) for t in p.open]


def test_an_open_transaction_names_its_producer_until_checkpointed(engine: ts.Engine) -> None:
    engine.create_stream("s", partitions=2)
    producer = engine.producer("s", partition=0, name="billing-7 ✓")
    txn = producer.new_transaction()
    txn.send(b"a")
    txn.flush()  # Open with its first chunk
    assert open_producers(engine) == ["billing-7 ✓"]
    txn.send(b"b")
    txn.flush()  # Data keeps the name
    engine.backend.submit([O.KeepAlive([["s", 0, txn.id]], 30_000)])  # so does a keep-alive
    [p0, _] = engine.backend.describe_partitions("s")
    assert [(t.id, t.items, t.producer) for t in p0.open] == [(txn.id, 2, "billing-7 ✓")]
    txn.checkpoint()
    assert open_producers(engine) == []
    other = engine.producer("s", partition=1, name="other").new_transaction()
    assert other.id and open_producers(engine) == ["other"]  # registered eagerly, without items
    other.cancel()
    assert open_producers(engine) == []


def test_the_default_name_is_host_pid_and_a_number(engine: ts.Engine) -> None:
    engine.create_stream("s")
    first, second = engine.producer("s"), engine.producer("s")
    pattern = re.escape(f"{socket.gethostname()}:{os.getpid()}/") + r"\d+"
    assert re.fullmatch(pattern, first.name) and re.fullmatch(pattern, second.name)
    assert first.name != second.name  # two producers of one process are told apart
    txn = first.new_transaction(0)
    txn.send(b"x")
    txn.flush()
    assert open_producers(engine) == [first.name]
    txn.cancel()


@pytest.mark.parametrize("name", [
    "", "x" * (MAX_PRODUCER_BYTES + 1), "é" * (MAX_PRODUCER_BYTES // 2 + 1), "line\nbreak", "nul\x00", "\ud800", 7,
])
def test_bad_names_are_refused(shared_engine: ts.Engine, name: object) -> None:
    if "s" not in [s.name for s in shared_engine.list_streams()]:
        shared_engine.create_stream("s")
    with pytest.raises(errors.InvalidArgument, match="producer name"):
        shared_engine.producer("s", name=name)  # type: ignore[arg-type]
    # the engine (the server, for a remote client) refuses a bad Open on its own, writing nothing
    last_id = shared_engine.backend.describe_partitions("s")[0].last_id
    # (a remote client cannot even encode a lone surrogate: refused before it is sent)
    with pytest.raises(errors.InvalidArgument, match="producer name|cannot be encoded"):
        shared_engine.backend.submit([O.Open("s", 0, 10_000, chunk=O.pack_items([b"x"]), producer=name)])
    [p0] = shared_engine.backend.describe_partitions("s")
    assert (p0.last_id, p0.open_count) == (last_id, 0)


def test_the_longest_name_is_kept_whole(engine: ts.Engine) -> None:
    engine.create_stream("s")
    name = "é" * (MAX_PRODUCER_BYTES // 2)  # exactly MAX_PRODUCER_BYTES UTF-8 bytes
    assert engine.producer("s", name=name).new_transaction(0).id  # registers it
    assert open_producers(engine) == [name]


def test_an_open_record_without_a_name_still_reads(engine: ts.Engine) -> None:
    """A bare Open (what every version before producer names wrote) has no name: reported
    None, and the transaction takes items, is kept alive and checkpoints as before."""
    engine.create_stream("s")
    [tid] = engine.backend.submit([O.Open("s", 0, 30_000, chunk=O.pack_items([b"a"]))])
    assert open_producers(engine) == [None]
    engine.backend.submit([O.Data("s", 0, tid, O.pack_items([b"b"])), O.KeepAlive([["s", 0, tid]], 30_000)])
    assert open_producers(engine) == [None]
    assert engine.backend.submit([O.Checkpoint("s", 0, tid)]) == [2]
    assert engine.backend.get_transaction("s", 0, tid).items == [b"a", b"b"]


def test_old_log_rows_decode_and_replay_and_new_ones_replicate_the_name(make_engine, tmp_path) -> None:
    leader = make_engine()
    leader.create_stream("s", partitions=2)
    named = leader.producer("s", partition=0, name="leader-side").new_transaction()
    named.send(b"a")
    named.flush()
    [bare] = leader.backend.submit([O.Open("s", 1, 30_000, chunk=O.pack_items([b"b"]))])
    entries = leader.backend.read_log(1)
    # an Open row as versions before producer names logged it: one field fewer
    [old_row] = [O.encode(op)[:-1] for _, _, ops in entries for op in ops if isinstance(op, O.Open) and
                 op.producer is None]
    assert len(old_row) == O.spec(O.Open("s", 0, 1)).width
    now_ms, [old] = O.unpack_batch(msgpack.packb([123, [old_row]], use_bin_type=True))
    assert isinstance(old, O.Open) and old.producer is None and old.txn_id == bare

    replica = make_engine()
    replica.backend.apply_log(entries)  # what a cluster follower does with the leader's log
    assert open_producers(replica) == ["leader-side", None]
    named.checkpoint()
    replica.backend.apply_log(leader.backend.read_log(replica.backend.log_seq() + 1))
    assert open_producers(replica) == [None]
    path = replica.backend.path
    replica.close()
    assert check.check_directory(str(path)).ok  # a finished transaction keeps no name


def test_check_accepts_a_named_open_transaction_and_reports_a_named_finished_one(make_engine) -> None:
    engine = make_engine()
    engine.create_stream("s")
    txn = engine.producer("s", name="p").new_transaction(0)
    txn.send(b"x")
    txn.flush()
    path = engine.backend.path
    engine.close()
    assert check.check_directory(str(path)).ok  # an open transaction may name its producer

    env = lmdb.open(str(path), max_dbs=16)
    txns = env.open_db(b"txns")
    with env.begin(write=True) as w:
        [(k, v)] = list(w.cursor(db=txns))
        finished = keys.STATE.pack(TxnState.CHECKPOINTED, 1, 1, 1) + b"p"  # a name where none may be
        w.put(k, seals.seal(bytes(k), finished), db=txns)
    env.close()
    report = check.check_directory(str(path))
    assert not report.ok and any("malformed txns record" in p for p in report.problems)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=120))
def test_a_name_is_accepted_exactly_when_printable_and_short(name: str) -> None:
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        ok = False
    else:
        ok = len(raw) <= MAX_PRODUCER_BYTES and name.isprintable()
    if ok:
        assert check_producer_name(name) == raw
    else:
        with pytest.raises(errors.InvalidArgument):
            check_producer_name(name)
