"""The Arrow batch building of the read path, without Spark: chunk payload decoding
(fixed-size fast path vs msgpack), the batch builder against a row-by-row reference, and the
embedded payload walk against the generic Backend walk (cancelled, open and expired
transactions, TTL)."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol.iteration import iter_transactions
from tstreams_embedded.engine.protocol.ops import pack_items
from tstreams_embedded.errors import DataCorrupted, InvalidArgument
from tstreams_embedded.ids import txn_time
from tstreams_embedded.spark import rows
from tstreams_embedded.spark.local_read import SegmentReader, local_batches
from tstreams_embedded.spark.payloads import MIN_FIXED_ITEMS, fixed_items
from tstreams_embedded.spark.rows import BatchBuilder, arrow_schema, record_batches
from tstreams_embedded.testing import FakeClock

#: lengths around msgpack's bin8 / bin16 boundaries, and empty items
LENGTHS = st.sampled_from([0, 1, 7, 100, 255, 256, 300, 65535, 65536])


@st.composite
def chunks(draw: st.DrawFn) -> list[bytes]:
    """Items of one chunk: fixed-size (often long enough for the fast path) or mixed sizes."""
    if draw(st.booleans()):
        n = draw(st.integers(0, 3 * MIN_FIXED_ITEMS))
        length = draw(LENGTHS) if n < 8 else draw(st.sampled_from([0, 1, 100, 255, 256, 300]))
        fill = draw(st.binary(min_size=1, max_size=1))
        return [fill * length if i % 2 else bytes([i % 256]) * length for i in range(n)]
    return draw(st.lists(st.binary(max_size=300), max_size=40))


@given(chunks())
@settings(max_examples=300, deadline=None)
def test_fixed_items_agrees_with_msgpack(items: list[bytes]) -> None:
    payload = pack_items(items)
    view = fixed_items(payload)
    same_length = len({len(i) for i in items}) == 1
    if len(items) >= MIN_FIXED_ITEMS and same_length:
        assert view is not None  # the fast path is taken for fixed-size records
    if view is not None:
        assert [bytes(row) for row in view] == items


@given(st.binary(max_size=200), st.integers(0, 40), st.integers(0, 10))
@settings(max_examples=500, deadline=None)
def test_fixed_items_never_accepts_what_msgpack_reads_differently(tail: bytes, n: int, length: int) -> None:
    """Arbitrary payloads (a plausible array header and item header, then anything): when the
    fast path accepts one, msgpack decodes it to exactly the same items."""
    for payload in (tail, pack_items([b"x" * length] * n)[: 3 + len(tail) // 2] + tail):
        view = fixed_items(payload)
        if view is None:
            continue
        assert msgpack.unpackb(payload) == [bytes(row) for row in view]


def _reference(txns: list[tuple[int, list[bytes]]], stream: str, partition: int, value_format: str) -> pa.Table:
    """The rows built one by one, the obvious way."""
    out = []
    for txn_id, items in txns:
        for seq, v in enumerate(items):
            out.append({"stream": stream, "partition": partition, "txn_id": txn_id,
                        "txn_time": txn_time(txn_id), "seq": seq,
                        "value": v if value_format == "binary" else v.decode("utf-8")})
    return pa.Table.from_pylist(out, schema=arrow_schema(value_format))


@given(st.lists(st.lists(chunks(), min_size=1, max_size=4), max_size=12), st.sampled_from(["binary", "string"]),
       st.integers(1, 300), st.integers(1, 5000))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_batches_from_payloads_equal_the_row_by_row_reference(
        txn_chunks: list[list[list[bytes]]], value_format: str, batch_rows: int, batch_bytes: int) -> None:
    if value_format == "string":
        txn_chunks = [[[i.hex().encode() for i in chunk] for chunk in txn] for txn in txn_chunks]
    base = 179_545_322_278_900_000
    txns = [(base + 100_000 * k, [i for chunk in txn for i in chunk]) for k, txn in enumerate(txn_chunks)]
    want = _reference(txns, "s", 3, value_format)

    with pytest.MonkeyPatch.context() as mp:  # small bounds, so batches are cut in many places
        mp.setattr(rows, "BATCH_ROWS", batch_rows)
        mp.setattr(rows, "BATCH_BYTES", batch_bytes)
        builder = BatchBuilder("s", 3, value_format)
        batches = []
        for k, txn in enumerate(txn_chunks):
            seq = 0
            for chunk in txn:
                seq += builder.add_payload(base + 100_000 * k, seq, pack_items(chunk))
                if builder.full():
                    batches.append(builder.flush())
        batches.append(builder.flush())
        from_payloads = [b for b in batches if b is not None]

        class Txn:
            def __init__(self, id: int, items: list[bytes]) -> None:
                self.id, self.items = id, items

        from_items = list(record_batches([Txn(i, v) for i, v in txns], "s", 3, value_format))

    for got in (from_payloads, from_items):
        assert all(b.schema.equals(want.schema) for b in got)
        assert all(b.num_rows <= batch_rows + max(len(v) for _, v in txns) for b in got)
        assert pa.Table.from_batches(got, schema=want.schema).equals(want)


def test_damaged_payload_names_the_transaction() -> None:
    builder = BatchBuilder("s", 1, "binary")
    with pytest.raises(DataCorrupted, match=r"transaction 42 in 's' partition 1 is damaged"):
        builder.add_payload(42, 0, b"\x92\xc4\x01a")  # an array of 2 with only 1 item
    with pytest.raises(DataCorrupted, match="not an array"):
        builder.add_payload(42, 0, msgpack.packb(b"abc"))


def test_string_format_names_the_first_invalid_item() -> None:
    builder = BatchBuilder("s", 0, "string")
    builder.add_payload(7, 0, pack_items([b"ok"] * 20))
    builder.add_payload(7, 20, pack_items([b"fine", b"\xff\xfe"]))
    with pytest.raises(InvalidArgument, match=r"transaction 7 item 21 is not valid UTF-8"):
        builder.flush()


def _generic(engine: ts.Engine, stream: str, partition: int, after: int, upto: int, fmt: str) -> pa.Table:
    got = record_batches(iter_transactions(engine.backend, stream, partition, after, upto), stream, partition, fmt)
    return pa.Table.from_batches(list(got), schema=arrow_schema(fmt))


def _local(engine: ts.Engine, stream: str, partition: int, after: int, upto: int, fmt: str) -> pa.Table:
    got = local_batches(engine.backend, stream, partition, after, upto, fmt)  # type: ignore[arg-type]
    return pa.Table.from_batches(list(got), schema=arrow_schema(fmt))


def test_local_walk_follows_the_read_rule(tmp_path: Path) -> None:
    """Cancelled transactions are passed, an open one stops the walk (and the generic
    continuation), an expired one is invalidated by the continuation and passed."""
    clock = FakeClock()
    with ts.open(str(tmp_path / "d"), clock=clock, txn_ttl=5, keepalive_interval=None,
                 compaction_interval=None) as engine:
        engine.create_stream("s", partitions=2)
        producer = engine.producer("s", partition=0)
        first = producer.instant([b"%04d" % i for i in range(40)])
        cancelled = producer.new_transaction(partition=0)
        cancelled.send(b"gone")
        cancelled.cancel()
        second = producer.instant([b"v%d" % i for i in range(3)])
        stuck = producer.new_transaction(partition=0)
        stuck.send(b"never")
        stuck.flush()
        last = producer.instant([b"after the open one"] * 17)
        end = 2**63 - 1

        walk = SegmentReader(engine.backend, "s", 0, 0, end, "binary")  # type: ignore[arg-type]
        assert [set(b.column("txn_id").to_pylist()) for b in walk] == [{first, second}]
        assert walk.blocked and walk.position == second
        for fmt in ("binary", "string"):
            local = _local(engine, "s", 0, 0, end, fmt)
            assert local.equals(_generic(engine, "s", 0, 0, end, fmt))
            assert local.column("txn_id").to_pylist() == [first] * 40 + [second] * 3
        # bounded above: the walk ends at ``upto`` without meeting the open transaction
        bounded = SegmentReader(engine.backend, "s", 0, first, second, "binary")  # type: ignore[arg-type]
        assert [b.num_rows for b in bounded] == [3] and not bounded.blocked and bounded.position == second

        clock.advance(6_000)  # the open transaction's deadline passes
        local = _local(engine, "s", 0, 0, end, "binary")
        assert local.column("txn_id").to_pylist() == [first] * 40 + [second] * 3 + [last] * 17
        assert local.equals(_generic(engine, "s", 0, 0, end, "binary"))
        # an empty partition, and a range past the end
        assert _local(engine, "s", 1, 0, end, "binary").num_rows == 0
        assert _local(engine, "s", 0, last, end, "binary").num_rows == 0


def test_local_batches_are_bounded_and_each_read_in_one_snapshot(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tstreams_embedded.spark import local_read

    monkeypatch.setattr(rows, "BATCH_BYTES", 1000)
    monkeypatch.setattr(rows, "BATCH_ROWS", 25)
    monkeypatch.setattr(local_read, "SCAN_TXNS", 3)
    with ts.open(str(tmp_path / "d"), compaction_interval=None) as engine:
        engine.create_stream("s")
        producer = engine.producer("s", partition=0)
        ids = [producer.instant([bytes([k]) * (50 * (k % 5))] * (k % 7 + 1)) for k in range(30)]
        snapshots = []
        store = engine.backend.store  # type: ignore[attr-defined]
        real_read = store.read

        def counting_read(buffers: bool = False):  # type: ignore[no-untyped-def]
            snapshots.append(buffers)
            return real_read(buffers)

        monkeypatch.setattr(store, "read", counting_read)
        reader = SegmentReader(engine.backend, "s", 0, 0, ids[-1], "binary")  # type: ignore[arg-type]
        batches = list(reader)
        monkeypatch.setattr(store, "read", real_read)
        assert reader.position == ids[-1] and not reader.blocked
        assert len(batches) > 3 and len(snapshots) == len(batches) and all(snapshots)
        # a batch ends after the transaction that reaches a bound (at most 7 items, 200 bytes each)
        assert all(b.num_rows <= 25 + 6 and b.column("value").buffers()[2].size <= 1000 + 7 * 200 for b in batches)
        got = pa.Table.from_batches(batches, schema=arrow_schema("binary"))
        assert got.equals(_generic(engine, "s", 0, 0, ids[-1], "binary"))


def test_local_walk_skips_transactions_past_the_stream_ttl(tmp_path: Path) -> None:
    clock = FakeClock()
    with ts.open(str(tmp_path / "d"), clock=clock, compaction_interval=None) as engine:
        engine.create_stream("s", ttl=60)
        producer = engine.producer("s", partition=0)
        old = producer.instant([b"old"] * 20)
        clock.advance(50_000)
        new = producer.instant([b"new"] * 20)
        clock.advance(20_000)  # ``old`` is now past the TTL, ``new`` is not
        local = _local(engine, "s", 0, 0, new, "binary")
        assert set(local.column("txn_id").to_pylist()) == {new} and old < new
        assert local.equals(_generic(engine, "s", 0, 0, new, "binary"))



@pytest.mark.parametrize("value_format, good, bad", [
    ("string", [b"ok", b"fine"], [b"\xff\xfe"]),
    ("json", [b'{"a": 1}', b"[2]"], [b"not json", b"\xff"]),
    ("msgpack", [msgpack.packb({"a": 1}), msgpack.packb([2])], [b"\xc1", msgpack.packb(1) + b"\x01"]),
])
@pytest.mark.parametrize("mode", ["permissive", "dropmalformed"])
def test_malformed_items_are_kept_aside_or_dropped_by_mode(value_format: str, good: list[bytes], bad: list[bytes],
                                                           mode: str) -> None:
    from tstreams_embedded.spark.decoding import Decoding

    items = [good[0], bad[0], good[1], *bad[1:]]
    decoding = Decoding(value_format, mode, "broken")
    builder = BatchBuilder("s", 0, decoding)
    builder.add_payload(7, 0, pack_items(items))
    batch = builder.flush()
    assert batch is not None and batch.schema.equals(arrow_schema(decoding))
    strict = BatchBuilder("s", 0, value_format)
    strict.add_payload(7, 0, pack_items(good))
    good_values = strict.flush().column("value").to_pylist()
    rows = batch.to_pylist()
    if mode == "permissive":
        assert batch.schema.names[-1] == "broken"
        assert [r["seq"] for r in rows] == list(range(len(items)))
        assert [r["value"] for r in rows] == [good_values[0], None, good_values[1]] + [None] * (len(bad) - 1)
        assert [r["broken"] for r in rows] == [None, bad[0], None, *bad[1:]]
    else:
        assert batch.schema.names == list(rows[0])  # no corrupt-record column
        assert [(r["seq"], r["value"]) for r in rows] == [(0, good_values[0]), (2, good_values[1])]


def test_a_batch_of_malformed_items_only_is_dropped_whole() -> None:
    from tstreams_embedded.spark.decoding import Decoding

    builder = BatchBuilder("s", 0, Decoding("json", "dropmalformed"))
    builder.add_payload(7, 0, pack_items([b"x", b"y"]))
    assert builder.flush() is None
