"""The operator commands, each on a data directory and through a real ``tstreams serve``."""

from __future__ import annotations

import datetime as dt
import json

import msgpack
import pytest

import tstreams_embedded as ts
from tstreams_embedded.ids import txn_millis
from tstreams_embedded.testing import eventually

from .conftest import Site


def _ids(site: Site, stream: str, partition: int) -> list[int]:
    c = site.engine.consumer(stream, "checker", partitions=[partition], use_last_offset=False)
    return [t.id for t in iter(lambda: c.get_transaction(partition), None)]


def _items(site: Site, stream: str) -> list[bytes]:
    c = site.engine.consumer(stream, "checker", use_last_offset=False)
    by_txn = sorted((t.id, t.items) for t in iter(c.get_transaction, None))
    return [i for _, items in by_txn for i in items]


def _next_millisecond(site: Site) -> None:
    """Wait until the engine's clock has passed the millisecond it reads now."""
    now = site.engine.backend.now_ms()
    eventually(lambda: site.engine.backend.now_ms() > now, timeout=5)


# --------------------------------------------------------------------------- streams
def test_streams_create_list_describe_delete(site: Site) -> None:
    created = site.json("streams", "create", "orders", "--partitions", "3", "--ttl", "3600", "--description", "shop")
    assert [(c["name"], c["partitions"], c["ttl"]) for c in created] == [("orders", 3, 3600)]
    site.engine.create_stream("other")
    producer = site.engine.producer("orders")
    ids = [producer.instant([b"x" * 100, b"y"], partition=0) for _ in range(2)]
    p1 = producer.instant([b"z"], partition=1)
    pending = producer.new_transaction(partition=2)
    pending.send(b"not yet")
    pending.flush()

    listed = site.json("streams", "list")
    assert [(s["name"], s["partitions"], s["ttl"], s["description"]) for s in listed] == [
        ("orders", 3, 3600, "shop"), ("other", 1, 86400, "")]
    assert "orders" in site.ok("streams", "list").stdout

    rows = site.json("streams", "describe", "orders")
    assert [(r["partition"], r["head"], r["first"], r["transactions"], r["items"], r["open_count"]) for r in rows] == [
        (0, ids[-1], ids[0], 2, 4, 0), (1, p1, p1, 1, 1, 0), (2, None, None, 0, 0, 1)]
    assert rows[0]["head_time"] == ts.txn_time(ids[-1]).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert rows[0]["bytes"] > 200 and rows[2]["bytes"] > 0 and all(r["ttl"] == 3600 for r in rows)
    (opened,) = rows[2]["open"]
    assert opened["id"] == pending.id and opened["items"] == 1 and 0 < opened["deadline_ms"] <= 60_000
    text = site.ok("streams", "describe", "orders").stdout
    assert "3 partition(s), TTL 1h00m" in text and "description: shop" in text
    assert str(pending.id) in text and "total: 3 transactions, 5 items, 1 open" in text
    pending.cancel()

    assert site.ok("streams", "delete", "other").stdout == "deleted stream other\n"
    site.engine.create_stream("third", partitions=2)
    assert site.json("streams", "delete", "third") == [{"deleted": "third", "id": listed[-1]["id"] + 1,
                                                        "partitions": 2}]
    assert [s["name"] for s in site.json("streams", "list")] == ["orders"]
    assert "created stream again (id " in site.ok("streams", "create", "again").stdout


def test_stats(site: Site) -> None:
    site.engine.create_stream("s")
    site.engine.producer("s").instant([b"x"])
    (counters,) = site.json("stats")
    assert counters["streams"] == 1 and counters["transactions"] == 1
    assert "transactions" in site.ok("stats").stdout


# --------------------------------------------------------------------------- consume
def test_consume_prints_items_in_every_format(site: Site) -> None:
    site.engine.create_stream("s")
    docs = [{"n": 1, "tags": ["a"]}, {"n": 2, "blob": None}]
    site.engine.producer("s", serializer="json").instant(docs)
    site.engine.producer("s", serializer="msgpack").instant([{"k": b"\x00\xff"}])
    first, second = _ids(site, "s", 0)

    assert site.ok("consume", "s", "--max", "1").stdout_bytes == b'{"n":1,"tags":["a"]}\n{"n":2,"blob":null}\n'
    assert site.ok("consume", "s", "--max", "1", "--format", "json").stdout.splitlines() == [
        json.dumps(d, separators=(",", ":")) for d in docs]
    assert site.ok("consume", "s", "--from", str(second), "--format", "msgpack").stdout == '{"k":"00ff"}\n'
    packed = msgpack.packb({"k": b"\x00\xff"}, use_bin_type=True)
    assert site.ok("consume", "s", "--from", str(second), "--format", "hex").stdout == packed.hex() + "\n"
    lines = site.json("consume", "s", "--format", "json", "--max", "1")
    assert lines == [{"stream": "s", "partition": 0, "id": first,
                      "time": ts.txn_time(first).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                      "items": docs}]
    bad = site.run("consume", "s", "--format", "json")  # the msgpack item is not JSON
    assert bad.exit_code == 1 and bad.stderr.startswith("Error: InvalidArgument: an item is not JSON")


def test_consume_from_newest_time_and_id_and_by_partition(site: Site) -> None:
    site.engine.create_stream("s", partitions=2)
    producer = site.engine.producer("s")
    early = [producer.instant([b"early-%d" % p], partition=p) for p in (0, 1)]
    _next_millisecond(site)
    cut = ts.txn_time(site.engine.backend.now_ms() * 100_000)
    _next_millisecond(site)
    late = [producer.instant([b"late-0"], partition=0)]
    _next_millisecond(site)  # IDs are per partition: in one millisecond both partitions could get the same ID
    late.append(producer.instant([b"late-1"], partition=1))

    def read(*args: str) -> list[int]:
        return sorted(line["id"] for line in site.json("consume", "s", *args))

    assert read() == sorted(early + late)
    assert read("--from", cut.isoformat()) == sorted(late)
    assert read("--from", cut.isoformat().replace("+00:00", "Z")) == sorted(late)
    assert read("--from", str(late[0])) == sorted(late)  # an ID: from that ID on, on every partition
    assert read("--from", str(late[1])) == [late[1]]
    assert read("--from", "newest") == []
    assert read("--from", "-1d") == sorted(early + late)
    assert read("--partition", "1") == [early[1], late[1]]
    assert read("--partition", "1", "--from", cut.isoformat()) == [late[1]]
    assert read("--max", "3") == sorted([early[0], early[1], late[0]])  # fairly, across partitions


def test_consume_with_a_group_commits_only_when_asked(site: Site) -> None:
    site.engine.create_stream("s")
    ids = [site.engine.producer("s").instant([b"%d" % i]) for i in range(4)]

    assert [x["id"] for x in site.json("consume", "s", "--group", "g", "--max", "2")] == ids[:2]
    assert site.engine.backend.get_offsets("s", "g") == {}  # read without storing
    assert [x["id"] for x in site.json("consume", "s", "--group", "g", "--commit", "--max", "3")] == ids[:3]
    assert site.engine.backend.get_offsets("s", "g") == {0: ids[2]}
    assert [x["id"] for x in site.json("consume", "s", "--group", "g")] == ids[3:]  # resumes from the group
    assert [x["id"] for x in site.json("consume", "s", "--group", "g", "--from", "oldest")] == ids  # --from wins
    consumer = site.engine.consumer("s", "g")
    assert [t.id for t in iter(consumer.get_transaction, None)] == ids[3:]


# --------------------------------------------------------------------------- produce
def test_produce_lines_json_and_msgpack_in_transactions(site: Site) -> None:
    site.engine.create_stream("s", partitions=3)
    written = site.json("produce", "s", "--txn-size", "2", "--partition", "1", input=b"a\nb\r\n\nd\ne")
    assert [(w["partition"], w["items"]) for w in written] == [(1, 2), (1, 2), (1, 1)]
    assert [w["id"] for w in written] == _ids(site, "s", 1)
    assert _items(site, "s") == [b"a", b"b", b"", b"d", b"e"]

    site.engine.create_stream("j")
    out = site.ok("produce", "j", "--format", "json", "--txn-size", "10", input='{"a": 1}\n\n[1, 2]\n"x"\n')
    assert out.stdout.strip() == "wrote 3 item(s) in 1 transaction(s) to j"
    assert _items(site, "j") == [b'{"a":1}', b"[1,2]", b'"x"']

    site.engine.create_stream("m", partitions=2)
    values = [{"k": b"\x01"}, [1, "two"], None]
    packed = b"".join(msgpack.packb(v, use_bin_type=True) for v in values)
    written = site.json("produce", "m", "--format", "msgpack", input=packed)
    assert sorted(w["partition"] for w in written) == [0, 0, 1]  # one transaction each, round-robin
    got = [msgpack.unpackb(i, raw=False) for i in _items(site, "m")]
    assert sorted(map(repr, got)) == sorted(map(repr, values))


def test_produce_stops_at_a_bad_item_and_keeps_what_was_checkpointed(site: Site) -> None:
    site.engine.create_stream("j")
    bad = site.run("produce", "j", "--format", "json", "--txn-size", "2", input='1\n2\n3\n{oops\n5\n')
    assert bad.exit_code == 1
    assert bad.stderr.startswith("Error: InvalidArgument: line 4 is not JSON") and bad.stderr.count("\n") == 1
    assert "1 transactions, 2 items were written before it" in bad.stderr
    assert _items(site, "j") == [b"1", b"2"]  # the transaction holding 3 was cancelled: nothing partial
    assert [d["open_count"] for d in site.json("streams", "describe", "j")] == [0]

    broken = site.run("produce", "j", "--format", "msgpack", "--txn-size", "5", input=msgpack.packb(7) + b"\xc1")
    assert broken.exit_code == 1 and broken.stderr.startswith("Error: InvalidArgument: msgpack document 2 is malformed")
    assert _items(site, "j") == [b"1", b"2"]  # 7 went with its cancelled transaction
    nan = site.run("produce", "j", "--format", "json", "--txn-size", "5", input='[1.5]\n{"x": NaN}\n')
    assert nan.exit_code == 1 and nan.stderr.count("\n") == 1
    assert nan.stderr.startswith("Error: InvalidArgument: line 2 is not JSON: NaN is not a JSON value"), nan.stderr
    for constant in ("Infinity", "-Infinity"):
        assert site.run("produce", "j", "--format", "json", input=f"{constant}\n").exit_code == 1
    truncated = site.run("produce", "j", "--format", "msgpack", "--txn-size", "5",
                         input=msgpack.packb(7) + msgpack.packb("cut short")[:-2])
    assert truncated.exit_code == 1 and truncated.stderr.count("\n") == 1
    assert truncated.stderr.startswith("Error: InvalidArgument: msgpack document 2 at byte offset 1 is truncated: "
                                       "the input ends after 8 of its bytes"), truncated.stderr
    big = site.run("produce", "j", input=b"x" * (site.engine.backend.max_item_size + 10) + b"\n")
    assert big.exit_code == 1 and big.stderr.startswith("Error: ItemTooLarge: line 1 is longer than max_item_size")
    assert _items(site, "j") == [b"1", b"2"]


# --------------------------------------------------------------------------- consumers
def _consumer_at(site: Site, stream: str, name: str, txns: int) -> None:
    c = site.engine.consumer(stream, name)
    for _ in range(txns):
        assert c.get_transaction() is not None
    c.checkpoint()


def test_consumers_list_and_describe_show_offsets_heads_and_lag(site: Site) -> None:
    site.engine.create_stream("s", partitions=2)
    site.engine.create_stream("t")
    producer = site.engine.producer("s")
    p0 = [producer.instant([b"a", b"b", b"c"], partition=0) for _ in range(3)]
    p1 = [producer.instant([b"a"], partition=1) for _ in range(2)]
    site.engine.producer("t").instant([b"x"])
    c = site.engine.consumer("s", "billing", partitions=[0])
    assert c.get_transaction(0) is not None
    c.checkpoint()
    _consumer_at(site, "t", "audit", 1)

    listed = site.json("consumers", "list")
    assert [(x["stream"], x["consumer"], x["offsets"]) for x in listed] == [
        ("s", "billing", {"0": p0[0]}), ("t", "audit", {"0": listed[1]["offsets"]["0"]})]
    assert [x["consumer"] for x in site.json("consumers", "list", "t")] == ["audit"]
    assert "billing" in site.ok("consumers", "list").stdout

    before = site.engine.backend.now_ms()
    rows = site.json("consumers", "describe", "s", "billing")
    assert [(r["partition"], r["offset"], r["head"], r["lag_transactions"], r["lag_items"]) for r in rows] == [
        (0, p0[0], p0[-1], 2, 6), (1, None, p1[-1], 2, 2)]
    assert rows[0]["lag_ms"] >= before - txn_millis(p0[1]) >= 0
    text = site.ok("consumers", "describe", "s", "billing").stdout
    assert "consumer billing on stream s" in text and "total lag: 4 transactions, 8 items" in text


def test_consumers_reset_to_a_datetime_matches_txn_id_at(site: Site) -> None:
    site.engine.create_stream("s", partitions=3)
    producer = site.engine.producer("s")
    early = {p: producer.instant([b"early"], partition=p) for p in range(3)}
    _next_millisecond(site)
    cut = dt.datetime.fromtimestamp(site.engine.backend.now_ms() / 1000, tz=dt.timezone.utc)
    _next_millisecond(site)
    late = {p: producer.instant([b"late"], partition=p) for p in range(3)}
    _consumer_at(site, "s", "g", 6)  # read everything
    stored = site.engine.backend.get_offsets("s", "g")
    assert stored == late

    planned = site.json("consumers", "reset", "s", "g", "--to", cut.isoformat(), "--dry-run")
    assert [(r["partition"], r["offset"], r["new_offset"], r["applied"]) for r in planned] == [
        (p, late[p], ts.txn_id_at(cut) - 1, False) for p in range(3)]
    assert site.engine.backend.get_offsets("s", "g") == stored  # a dry run writes nothing

    text = site.ok("consumers", "reset", "s", "g", "--to", cut.isoformat(), "--partition", "0", "--partition", "2")
    assert "reset 2 partition(s) of consumer g on s" in text.stdout
    at = ts.txn_id_at(cut)
    assert site.engine.backend.get_offsets("s", "g") == {0: at - 1, 1: late[1], 2: at - 1}
    consumer = site.engine.consumer("s", "g")
    again = sorted(t.id for t in iter(consumer.get_transaction, None))
    assert again == sorted([late[0], late[2]]) and all(i >= at > early[p] for p, i in ((0, late[0]), (2, late[2])))

    site.ok("consumers", "reset", "s", "g", "--to", "oldest")
    assert site.engine.backend.get_offsets("s", "g") == {0: 0, 1: 0, 2: 0}
    site.ok("consumers", "reset", "s", "g", "--to", str(late[1]), "--partition", "1")
    assert site.engine.backend.get_offsets("s", "g")[1] == late[1] - 1
    site.ok("consumers", "reset", "s", "g", "--to", "newest")
    assert site.engine.backend.get_offsets("s", "g") == {p: site.engine.backend.last_txn_id("s", p) for p in range(3)}


def test_consumers_reset_past_the_head_is_clamped_to_it(site: Site) -> None:
    """Kafka's kafka-consumer-groups clamps a reset past the log end; so does this: a
    consumer reset to a future time or ID reads what is written next."""
    site.engine.create_stream("s", partitions=2)
    producer = site.engine.producer("s")
    head = producer.instant([b"old"], partition=0)
    _consumer_at(site, "s", "g", 1)
    for to in ("2100-01-01", "9223372036854775807", str(head + 10**9)):
        rows = site.json("consumers", "reset", "s", "g", "--to", to)
        assert [(r["partition"], r["new_offset"], r["clamped"]) for r in rows] == [(0, head, True), (1, 0, True)]
        assert site.engine.backend.get_offsets("s", "g") == {0: head, 1: 0}
        assert "clamped to the head" in site.ok("consumers", "reset", "s", "g", "--to", to, "--dry-run").stdout
    _next_millisecond(site)
    past = ts.txn_time(site.engine.backend.now_ms() * 100_000).isoformat()
    _next_millisecond(site)
    rows = site.json("consumers", "reset", "s", "g", "--to", past)  # after the head, but not in the future
    assert [(r["new_offset"], r["clamped"]) for r in rows] == [(head, False), (0, False)]
    new = producer.instant([b"new"], partition=0)
    consumer = site.engine.consumer("s", "g")
    assert [t.id for t in iter(consumer.get_transaction, None)] == [new]  # not skipped


def test_consumers_describe_flags_an_offset_ahead_of_head(site: Site) -> None:
    from tstreams_embedded.engine.protocol import ops as O

    site.engine.create_stream("s", partitions=2)
    head = site.engine.producer("s").instant([b"x"], partition=0)
    _consumer_at(site, "s", "g", 1)
    rows = site.json("consumers", "describe", "s", "g")
    assert [r["ahead_of_head"] for r in rows] == [False, False]
    info = site.engine.get_stream("s")
    stored = site.engine.backend.get_offsets("s", "g")
    site.engine.backend.submit([O.ResetOffsets("s", "g", stored, {0: head + 10**12}, info.id)])  # as before the fix
    rows = site.json("consumers", "describe", "s", "g")
    assert [r["ahead_of_head"] for r in rows] == [True, False]
    assert "offset ahead of head on partition(s) 0" in site.ok("consumers", "describe", "s", "g").stdout


def test_consumers_reset_newest_stops_before_a_transaction_still_open(site: Site) -> None:
    site.engine.create_stream("s")
    producer = site.engine.producer("s", partition=0)
    before = producer.instant([b"before"])
    pending = producer.new_transaction(0)
    pending.send(b"pending")
    pending.flush()
    after = producer.instant([b"after"])
    _consumer_at(site, "s", "g", 1)
    (row,) = site.json("consumers", "reset", "s", "g", "--to", "newest")
    assert row["new_offset"] == pending.id - 1 and not row["clamped"]
    assert (row["next_read_id"], row["next_read_from"]) == (None, None)  # the open one comes first
    assert site.engine.backend.get_offsets("s", "g") == {0: pending.id - 1}
    assert before < pending.id < after
    pending.checkpoint()
    consumer = site.engine.consumer("s", "g")
    assert [t.id for t in iter(consumer.get_transaction, None)] == [pending.id, after]  # nothing skipped
    (row,) = site.json("consumers", "reset", "s", "g", "--to", str(pending.id), "--dry-run")
    assert row["next_read_id"] == pending.id
    assert row["next_read_from"] == ts.txn_time(pending.id).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_consumers_reset_to_a_time_rereads_what_was_checkpointed_since(site: Site) -> None:
    """A transaction opened before the time and checkpointed after it is read again (its ID
    records when it was opened), as are those opened after it; one checkpointed before the
    time and opened before the late one is read again too (the offset is one per partition)."""
    site.engine.create_stream("s", partitions=2)
    producer = site.engine.producer("s")
    old = producer.instant([b"old"], partition=0)
    late = producer.new_transaction(0)
    late.send(b"opened before, checkpointed after")
    late.flush()
    between = producer.instant([b"between"], partition=0)
    other = producer.instant([b"other"], partition=1)
    still_open = producer.new_transaction(1)
    still_open.send(b"opened before, still open")
    still_open.flush()
    _next_millisecond(site)
    deploy = dt.datetime.fromtimestamp(site.engine.backend.now_ms() / 1000, tz=dt.timezone.utc)
    _next_millisecond(site)
    late.checkpoint()
    new = producer.instant([b"new"], partition=0)
    _consumer_at(site, "s", "g", 5)
    assert site.engine.backend.get_offsets("s", "g") == {0: new, 1: other}

    ms = site.engine.backend.now_ms()
    assert site.engine.backend.first_open_at("s", 0, ms) == 0 and site.engine.backend.first_open_at("s", 1, ms) == \
        still_open.id
    at_ms = ts.txn_id_at(deploy) // 100_000
    assert site.engine.backend.first_open_at("s", 0, at_ms) == late.id
    assert site.engine.backend.first_open_at("s", 1, at_ms) == still_open.id
    rows = site.json("consumers", "reset", "s", "g", "--to", deploy.isoformat())
    assert [r["new_offset"] for r in rows] == [late.id - 1, still_open.id - 1]
    consumer = site.engine.consumer("s", "g")
    assert sorted(t.id for t in iter(consumer.get_transaction, None)) == [late.id, between, new]
    still_open.checkpoint()
    assert [t.id for t in iter(consumer.get_transaction, None)] == [still_open.id]
    assert old < late.id


def test_consumers_delete(site: Site) -> None:
    site.engine.create_stream("s")
    site.engine.producer("s").instant([b"x"])
    _consumer_at(site, "s", "g", 1)
    _consumer_at(site, "s", "keep", 1)
    assert site.json("consumers", "delete", "s", "g") == [{"stream": "s", "consumer": "g", "partitions_deleted": 1}]
    assert site.engine.backend.get_offsets("s", "g") == {}
    assert [x["consumer"] for x in site.json("consumers", "list", "s")] == ["keep"]


# --------------------------------------------------------------------------- bad input
BAD_INPUT = [
    (["streams", "describe", "nope"], 1, "Error: StreamNotFound: stream 'nope' does not exist"),
    (["consume", "nope"], 1, "Error: StreamNotFound"),
    (["produce", "nope"], 1, "Error: StreamNotFound"),
    (["consumers", "list", "nope"], 1, "Error: StreamNotFound"),
    (["consumers", "describe", "s", "ghost"], 1, "Error: ConsumerNotFound: consumer 'ghost' has no stored offsets"),
    (["consumers", "reset", "s", "ghost", "--to", "oldest"], 1, "Error: ConsumerNotFound"),
    (["consumers", "delete", "s", "ghost"], 1, "Error: ConsumerNotFound"),
    (["consumers", "reset", "s", "g", "--to", "2026-13-45T25:00"], 2, "Error: Invalid value for '--to': "
                                                                       "'2026-13-45T25:00' is not a position"),
    (["consumers", "reset", "s", "g", "--to", "yesterday"], 2, "Error: Invalid value for '--to'"),
    (["consume", "s", "--from", "3000-01-01Tnoon"], 2, "Error: Invalid value for '--from'"),
    (["consume", "s", "--from", "99999-01-01"], 2, "Error: Invalid value for '--from'"),
    (["consume", "s", "--partition", "2"], 1,
     "Error: PartitionOutOfRange: partition 2 is out of range for stream 's' with 2 partitions"),
    (["produce", "s", "--partition", "7"], 1, "Error: PartitionOutOfRange"),
    (["consumers", "reset", "s", "g", "--to", "oldest", "--partition", "2"], 1, "Error: PartitionOutOfRange"),
    (["consume", "s", "--commit"], 2, "Error: --commit needs --group NAME"),
    (["consume", "s", "--group", ""], 1, "Error: InvalidArgument: consumer name must be a non-empty string"),
    (["consumers", "describe", "s", ""], 1, "Error: InvalidArgument: consumer name must be a non-empty string"),
    (["consume", "s", "--format", "yaml"], 2, "Error: Invalid value for '--format'"),
    (["consume", "s", "--from", "\u00b2"], 2, "Error: Invalid value for '--from': '\u00b2' is not a position"),
    (["consumers", "reset", "s", "g", "--to", "\u00b2"], 2, "Error: Invalid value for '--to': '\u00b2' is not"),
    (["consume", "s", "--from", "-1000000d"], 2, "Error: Invalid value for '--from': '-1000000d' is too far"),
    (["consume", "s", "--from", "-99999999999999999999d"], 2, "Error: Invalid value for '--from'"),
    (["consumers", "reset", "s", "g", "--to", "-1000000d"], 2, "Error: Invalid value for '--to'"),
]


@pytest.fixture(scope="module")
def bad_input_site(shared_site: Site) -> Site:
    """Stream ``s`` (2 partitions, one transaction) and group ``g`` past it, shared by every case
    of :data:`BAD_INPUT` (each checks that nothing moved)."""
    shared_site.engine.create_stream("s", partitions=2)
    shared_site.engine.producer("s").instant([b"x"], partition=0)
    _consumer_at(shared_site, "s", "g", 1)
    return shared_site


@pytest.mark.parametrize("args, status, message", BAD_INPUT, ids=[" ".join(a) for a, _, _ in BAD_INPUT])
def test_bad_input_exits_non_zero_with_one_line(bad_input_site: Site, args: list[str], status: int,
                                                message: str) -> None:
    site = bad_input_site
    offsets = site.engine.backend.get_offsets("s", "g")
    assert offsets == {0: site.engine.backend.last_txn_id("s", 0), 1: 0}  # (no earlier case moved them)
    last = [site.engine.backend.last_txn_id("s", p) for p in (0, 1)]
    result = site.run(*args)
    assert result.exit_code == status, (result.stdout, result.stderr)
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert site.engine.backend.get_offsets("s", "g") == offsets  # nothing moved
    assert [site.engine.backend.last_txn_id("s", p) for p in (0, 1)] == last  # nothing written


def test_deleting_an_unknown_consumer_writes_nothing(site: Site) -> None:
    site.engine.create_stream("s")
    site.engine.producer("s").instant([b"x"])
    sequence = site.engine.backend.wait_for_commit(-1, 0)  # the newest commit-log sequence
    result = site.run("consumers", "delete", "s", "ghost")
    assert result.exit_code == 1 and result.stderr.startswith("Error: ConsumerNotFound"), result.stderr
    assert site.engine.backend.wait_for_commit(-1, 0) == sequence  # not even a commit-log entry


def test_a_command_needs_exactly_one_target(tmp_path) -> None:
    from click.testing import CliRunner

    from tstreams_embedded.cli import main

    for args in (["consume", "s"], ["consume", "s", "--data", str(tmp_path), "--connect", "tcp://127.0.0.1:1"],
                 ["consume", "s", "--connect", "http://x"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
