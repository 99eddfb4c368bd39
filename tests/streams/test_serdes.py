"""Serdes, the record envelope and the partitioner."""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass
from typing import Any, Optional, TypedDict

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstreams_embedded import errors
from tstreams_embedded.streams import StreamsBuilder, TestDriver, Windowed, partition_of, serde
from tstreams_embedded.streams.records import pack_envelope, unpack_envelope
from tstreams_embedded.streams.serdes import WindowedSerde


@dataclass
class View:
    page: str
    ts: int


class Click(TypedDict):
    page: str
    x: int


json_values = st.recursive(st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=8)


@given(json_values)
def test_json_and_msgpack_round_trip(value: Any) -> None:
    for name in ("json", "msgpack"):
        s = serde(name)
        assert s.deserialize(s.serialize(value)) == value


@given(st.text(), st.binary())
def test_str_and_bytes_round_trip(text: str, data: bytes) -> None:
    assert serde("str").deserialize(serde("str").serialize(text)) == text
    assert serde("bytes").deserialize(serde("bytes").serialize(data)) == data


def test_typed_serdes() -> None:
    s = serde(View)
    assert s.deserialize(s.serialize(View("/a", 5))) == View("/a", 5)
    with pytest.raises(errors.SerdeError):
        s.deserialize(b'{"page": "/a", "ts": 1, "extra": 2}')
    with pytest.raises(errors.SerdeError):
        s.serialize({"page": "/a"})
    c = serde(Click)
    assert c.deserialize(c.serialize({"page": "/a", "x": 1})) == {"page": "/a", "x": 1}
    with pytest.raises(errors.SerdeError):
        c.deserialize(b'{"page": "/a"}')
    w = WindowedSerde(serde("str"))
    assert w.deserialize(w.serialize(Windowed("k", 0, 10))) == Windowed("k", 0, 10)


@pytest.mark.parametrize("spec", ["yaml", 3, None, int, object()])
def test_bad_serde_specs(spec: Any) -> None:
    with pytest.raises(errors.SerdeError):
        serde(spec)


@pytest.mark.parametrize("name, data", [("json", b"{nope"), ("msgpack", b"\xc1"), ("str", b"\xff\xfe")])
def test_bad_data(name: str, data: bytes) -> None:
    with pytest.raises(errors.SerdeError):
        serde(name).deserialize(data)


@given(st.none() | st.binary(), st.none() | st.binary(), st.integers(-(2**63), 2**63 - 1),
       st.none() | st.dictionaries(st.text(max_size=5), st.binary(max_size=5), max_size=2))
def test_envelope_round_trip(key: bytes | None, value: bytes | None, ts: int, headers: dict[str, bytes] | None) -> None:
    assert unpack_envelope(pack_envelope(key, value, ts, headers)) == (key, value, ts, headers)


def test_plain_items_are_not_envelopes() -> None:
    assert unpack_envelope(b'{"json": 1}') is None
    assert unpack_envelope(b"") is None
    with pytest.raises(errors.SerdeError):
        unpack_envelope(b"\xc1garbage")


@given(st.binary(), st.integers(1, 1000))
def test_partitioner_is_crc32c(key: bytes, n: int) -> None:
    assert partition_of(key, n) == crc32c.crc32c(key) % n


def test_typed_values_through_a_topology() -> None:
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde=View).map_values(lambda v: View(v.page.upper(), v.ts + 1)) \
        .to("out", key_serde="str", value_serde=View)
    with TestDriver(b.build()) as d:
        d.pipe("in", "k", View("/a", 1), 1)
        assert [(r.key, r.value) for r in d.read_output("out")] == [("k", View("/A", 2))]


def test_send_records_partitions_by_key(tstreams_engine: Any) -> None:
    from tstreams_embedded.streams import Record, send_records

    engine = tstreams_engine
    engine.create_stream("in", partitions=3)
    recs = [(f"k{i}", {"i": i}, i) for i in range(20)] + [Record(None, {"i": 99}, 5, {"h": b"1"})]
    assert send_records(engine, "in", recs, key_serde="str", value_serde="json", records_per_transaction=7) == 21
    seen = []
    for p in range(3):
        for txn in engine.backend.transactions_range("in", p, 0, 2**63 - 1):
            for item in txn.items:
                kb, vb, ts, headers = unpack_envelope(item)  # type: ignore[misc]
                assert kb is None or partition_of(kb, 3) == p
                seen.append((None if kb is None else kb.decode(), serde("json").deserialize(vb), ts, headers))
    expected = [(k, v, t, None) for k, v, t in recs[:-1]] + [(None, {"i": 99}, 5, {"h": b"1"})]
    assert sorted(seen, key=repr) == sorted(expected, key=repr)
    with pytest.raises(errors.InvalidArgument):
        send_records(engine, "in", [("k", 1, "soon")])
    with pytest.raises(errors.InvalidArgument):
        send_records(engine, "in", ["not a record"])
    with pytest.raises(errors.StreamNotFound):
        send_records(engine, "missing", [])


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Inner:
    x: int
    tags: list[str]


@dataclass
class Outer:
    inner: Inner
    when: dt.datetime
    day: dt.date
    ratio: float
    color: Color
    children: list[Inner]
    by_name: dict[str, Inner]
    maybe: Inner | None = None
    note: Optional[str] = None  # noqa: UP045 - the typing spelling is checked too
    pair: tuple[int, str] = (0, "")


class Doc(TypedDict):
    title: str
    outer: Outer
    when: dt.datetime


def inner_strategy() -> st.SearchStrategy[Inner]:
    return st.builds(Inner, x=st.integers(-(2**63), 2**63 - 1), tags=st.lists(st.text(), max_size=3))


# an aware datetime comes back with its UTC offset, not its zone's name (ISO 8601 has none; and
# a zone's nonexistent local times compare unequal to anything)
fixed_offsets = st.integers(-1439, 1439).map(lambda m: dt.timezone(dt.timedelta(minutes=m)))
outers = st.builds(
    Outer, inner=inner_strategy(), when=st.datetimes() | st.datetimes(timezones=fixed_offsets), day=st.dates(),
    ratio=st.floats(allow_nan=False, allow_infinity=False), color=st.sampled_from(Color),
    children=st.lists(inner_strategy(), max_size=3), by_name=st.dictionaries(st.text(), inner_strategy(), max_size=3),
    maybe=st.none() | inner_strategy(), note=st.none() | st.text(), pair=st.tuples(st.integers(-5, 5), st.text()))


@given(outers, st.text())
def test_typed_serdes_round_trip_generated_instances(outer: Outer, title: str) -> None:
    s = serde(Outer)
    back = s.deserialize(s.serialize(outer))
    assert back == outer
    assert type(back.inner) is Inner and type(back.when) is dt.datetime and type(back.day) is dt.date
    assert back.when.utcoffset() == outer.when.utcoffset()
    doc = serde(Doc)
    value: Doc = {"title": title, "outer": outer, "when": outer.when}
    assert doc.deserialize(doc.serialize(value)) == value


def test_nested_dataclass_and_datetime_come_back_typed() -> None:
    s = serde(Outer)
    o = Outer(Inner(1, ["a"]), dt.datetime(2026, 1, 1, 12, 30), dt.date(2026, 3, 29), 0.5, Color.BLUE,
              [Inner(2, [])], {"k": Inner(3, ["b"])}, pair=(1, "one"))
    data = s.serialize(o)
    assert b'"when":"2026-01-01T12:30:00"' in data and b'"day":"2026-03-29"' in data and b'"color":"blue"' in data
    assert s.deserialize(data) == o


@pytest.mark.parametrize(("spec", "data", "words"), [
    (View, b'{"page": 5, "ts": 1}', r"View\.page: expected str, got int"),
    (View, b'{"page": "a", "ts": "soon"}', r"View\.ts: expected int, got str"),
    (View, b'{"page": "a", "ts": true}', r"View\.ts: expected int, got bool"),
    (View, b'{"page": "a"}', r"View\.ts: missing"),
    (View, b'{"page": "a", "ts": 1, "x": 2}', "unknown fields"),
    (Click, b'{"page": [1], "x": 1}', r"Click\.page: expected str"),
    (Click, b'{"page": "a", "x": "no"}', r"Click\.x: expected int"),
    (Outer, b'{"inner": {"x": 1, "tags": [1]}}', r"Outer\.inner\.tags\[0\]: expected str"),
    (Inner, b'{"x": 1, "tags": "abc"}', r"Inner\.tags: expected list"),
    (Doc, b'{"title": "t", "outer": {}, "when": "2026-01-01"}', r"Doc\.outer\.inner: missing"),
    (Doc, b'{"title": "t", "outer": 1, "when": "yesterday"}', r"Doc\.outer: expected a Outer object"),
])
def test_typed_serdes_reject_wrong_types(spec: Any, data: bytes, words: str) -> None:
    with pytest.raises(errors.SerdeError, match=words):
        serde(spec).deserialize(data)


@pytest.mark.parametrize(("spec", "value", "words"), [
    (View, View(page=5, ts="soon"), r"View\.page: expected str"),  # type: ignore[arg-type]
    (View, View(page="a", ts="soon"), r"View\.ts: expected int"),  # type: ignore[arg-type]
    (Outer, Outer(Inner(1, []), "2026-01-01", dt.date(2026, 1, 1), 1.0, Color.RED, [], {}),  # type: ignore[arg-type]
     r"Outer\.when: expected datetime"),
    (Outer, Outer(Inner(1, []), dt.datetime(2026, 1, 1), dt.date(2026, 1, 1), float("nan"), Color.RED, [], {}),
     r"Outer\.ratio: expected a finite float"),
    (Outer, Outer(Inner(1, []), dt.datetime(2026, 1, 1), dt.date(2026, 1, 1), 1.0, "red", [], {}),  # type: ignore[arg-type]
     r"Outer\.color: expected Color"),
    (Click, {"page": "a", "x": 1.5}, r"Click\.x: expected int"),
])
def test_typed_serdes_refuse_to_write_wrong_types(spec: Any, value: Any, words: str) -> None:
    with pytest.raises(errors.SerdeError, match=words):
        serde(spec).serialize(value)
