"""Reading an app's output from outside the streams library: ``decode`` gives back the
records the DSL wrote (envelopes, windowed keys in the documented msgpack format)."""

from __future__ import annotations

import uuid
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.streams import Record, StreamsBuilder, TestDriver, TimeWindows, Windowed, decode, send_records
from tstreams_embedded.streams.records import MAX_TIMESTAMP, MIN_TIMESTAMP


def raw_items(engine: ts.Engine, stream: str) -> list[bytes]:
    return [item for p in range(engine.get_stream(stream).partitions)
            for txn in engine.backend.transactions_range(stream, p, 0, 2**63 - 1) for item in txn.items]


def test_windowed_results_decode_and_their_keys_are_documented_msgpack() -> None:
    b = StreamsBuilder()
    (b.stream("clicks", key_serde="str", value_serde="json").group_by_key(key_serde="str")
        .windowed_by(TimeWindows(size_ms=10)).count(store="n").to_stream()
        .to("counts", key_serde="str", value_serde="json"))
    with TestDriver(b.build()) as driver:
        for t in (1, 3, 12):
            driver.pipe("clicks", "ann", {}, timestamp=t)
        expected = driver.read_output("counts")
        items = raw_items(driver.engine, "counts")
    assert [(r.key, r.value) for r in expected] == [(Windowed("ann", 0, 10), 1), (Windowed("ann", 0, 10), 2),
                                                    (Windowed("ann", 10, 20), 1)]
    assert [decode(i, key_serde="windowed(str)", value_serde="json") for i in items] == expected
    # the format STREAMS.md documents: 0xC1, msgpack [key, value, timestamp, headers]; a windowed
    # key is msgpack [inner key bytes, start, end]
    assert items[0][0] == 0xC1
    key, value, timestamp, headers = msgpack.unpackb(items[0][1:])
    assert (msgpack.unpackb(key), value, timestamp, headers) == ([b"ann", 0, 10], b"1", 1, None)


keys = st.one_of(st.none(), st.text(max_size=20))
values = st.one_of(st.none(), st.integers(-(2**63), 2**64 - 1), st.text(max_size=20),
                   st.lists(st.integers(0, 9), max_size=4))
records = st.builds(Record, keys, values, st.integers(MIN_TIMESTAMP, MAX_TIMESTAMP),
                    st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.binary(max_size=5), max_size=3)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(records, min_size=1, max_size=8))
def test_what_send_records_writes_decodes_to_the_same_records(tstreams_embedded_engine: ts.Engine,
                                                               batch: list[Record]) -> None:
    engine = tstreams_embedded_engine
    stream = f"s{uuid.uuid4().hex[:12]}"
    engine.create_stream(stream)
    send_records(engine, stream, batch, key_serde="str", value_serde="msgpack")
    assert [decode(i, key_serde="str", value_serde="msgpack") for i in raw_items(engine, stream)] == batch


def test_a_plain_item_is_a_value_with_the_given_timestamp() -> None:
    assert decode(b'{"a": 1}', value_serde="json", timestamp=7) == Record(None, {"a": 1}, 7)


@pytest.mark.parametrize(("item", "options", "error", "words"), [
    (b"\xc1\x93\x01\x02\x03", {}, errors.SerdeError, "damaged record envelope"),
    (b"\xc1" + msgpack.packb([5, None, 1, None]), {}, errors.SerdeError, "damaged record envelope"),
    (b"\xc1" + msgpack.packb([b"x", None, 1, None]), {"key_serde": "windowed(str)"}, errors.SerdeError,
     "not msgpack|not a windowed key"),
    (b"\xc1" + msgpack.packb([msgpack.packb([b"x", "0", 1]), None, 1, None]), {"key_serde": "windowed(str)"},
     errors.SerdeError, "not a windowed key"),
    (b"\xc1" + msgpack.packb([b"\xff", None, 1, None]), {"key_serde": "str"}, errors.SerdeError, "not UTF-8"),
    ("text", {}, errors.InvalidArgument, "bytes"),
    (b"x", {"key_serde": "windowed(yaml)"}, errors.SerdeError, "windowed"),
])
def test_bad_items_and_serdes(item: Any, options: dict[str, Any], error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        decode(item, **options)
