"""Records no app can read: ``send_records`` refuses them, and an app that meets one in its
input (written by another writer) treats it as bad data under ``on_record_error``: a
``SerdeError`` with ``"fail"`` (nothing committed, at every restart), skipped and counted with
``"skip"``. Embedded and served alike."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.streams import App, Record, StreamsBuilder, send_records
from tstreams_embedded.streams.records import MAX_TIMESTAMP, MIN_TIMESTAMP

from .harness import read_envelopes


def envelope(key: Any, value: Any, timestamp: Any, headers: Any = None) -> bytes:
    return b"\xc1" + msgpack.packb([key, value, timestamp, headers], use_bin_type=True)


@pytest.mark.parametrize("timestamp", [2**62, MAX_TIMESTAMP + 1, MIN_TIMESTAMP - 1, 2**64, -(2**64), 1.5, "1", True,
                                       None])
def test_send_records_refuses_timestamps_no_app_can_read(shared_engine: ts.Engine, timestamp: Any) -> None:
    engine = shared_engine
    engine.create_stream("in", partitions=2)
    try:
        with pytest.raises(errors.InvalidArgument, match="timestamp"):
            send_records(engine, "in", [("a", 1, 5), ("b", 2, timestamp)])
        assert read_envelopes(engine, "in") == []  # nothing of the batch was written
    finally:
        engine.delete_stream("in")  # (the next case creates it again)


@pytest.mark.parametrize("headers", [{"h": "text"}, {1: b"x"}, [("h", b"x")]])
def test_send_records_refuses_headers_no_app_can_read(tstreams_embedded_engine: ts.Engine, headers: Any) -> None:
    engine = tstreams_embedded_engine
    engine.create_stream("in")
    with pytest.raises(errors.InvalidArgument, match="headers"):
        send_records(engine, "in", [Record("a", 1, 5, headers)])
    assert read_envelopes(engine, "in") == []


def test_send_records_takes_the_whole_valid_range(tstreams_embedded_engine: ts.Engine) -> None:
    engine = tstreams_embedded_engine
    engine.create_stream("in")
    send_records(engine, "in", [("a", 1, MIN_TIMESTAMP), ("a", 2, MAX_TIMESTAMP)])
    assert [ts_ for _, _, ts_, _ in read_envelopes(engine, "in")] == [MIN_TIMESTAMP, MAX_TIMESTAMP]


def counts() -> Any:
    b = StreamsBuilder()
    b.stream("in", key_serde="bytes", value_serde="bytes").group_by_key(key_serde="bytes").count(store="n")
    return b.build()


#: envelopes whose fields have the wrong msgpack type (an int key was read as that many zero bytes)
BAD_ENVELOPES = {
    "int key": envelope(1_000, b"v", 2),
    "str key": envelope("k", b"v", 2),
    "str value": envelope(b"k", "v", 2),
    "int value": envelope(b"k", 7, 2),
    "float timestamp": envelope(b"k", b"v", 2.0),
    "bool timestamp": envelope(b"k", b"v", True),
    "nil timestamp": envelope(b"k", b"v", None),
    "headers list": envelope(b"k", b"v", 2, [b"x"]),
    "header value str": envelope(b"k", b"v", 2, {"h": "x"}),
    "three fields": b"\xc1" + msgpack.packb([b"k", b"v", 2]),
    "not an array": b"\xc1" + msgpack.packb({"k": 1}),
    "timestamp out of range": envelope(b"k", b"v", MAX_TIMESTAMP + 1),
}


@pytest.mark.parametrize("bad", list(BAD_ENVELOPES))
def test_an_envelope_with_fields_of_the_wrong_type_is_bad_data(tstreams_engine: ts.Engine, bad: str) -> None:
    engine = tstreams_engine
    engine.create_stream("in")
    send_records(engine, "in", [(b"k", b"1", 1)], key_serde="bytes", value_serde="bytes")
    engine.producer("in").instant([BAD_ENVELOPES[bad]])
    send_records(engine, "in", [(b"k", b"3", 3)], key_serde="bytes", value_serde="bytes")
    for _ in range(2):  # the same at every restart, and nothing of the bad transaction is committed
        app = App(engine, application_id="a", topology=counts(), commit_records=1)
        with pytest.raises((errors.SerdeError, errors.InvalidArgument)) as failure:
            app.run()
        assert type(failure.value) in (errors.SerdeError, errors.InvalidArgument)  # not a raw TypeError
        assert app.store("n").all() == {b"k": 1}
        app.close()
    app = App(engine, application_id="a", topology=counts(), on_record_error="skip")
    metrics = app.run()
    assert metrics["records_skipped_on_error"] == 1
    assert app.store("n").all() == {b"k": 2}
    app.close()


def test_a_damaged_envelope_in_a_global_table_is_bad_data(tstreams_embedded_engine: ts.Engine) -> None:
    engine = tstreams_embedded_engine
    b = StreamsBuilder()
    rates = b.global_table("rates", key_serde="str", value_serde="str")
    (b.stream("orders", key_serde="str", value_serde="str")
        .left_join(rates, lambda order, rate: rate, key_selector=lambda k, order: order)
        .to("enriched", key_serde="str", value_serde="str"))
    engine.create_stream("rates")
    engine.create_stream("orders")
    engine.producer("rates").instant([envelope(1_000, b"x", 0)])
    send_records(engine, "rates", [("de", "Germany", 0)], key_serde="str", value_serde="str")
    with pytest.raises(errors.SerdeError, match="damaged record envelope"):
        App(engine, application_id="g", topology=b.build()).run()
    app = App(engine, application_id="g", topology=b.build(), on_record_error="skip")
    send_records(engine, "orders", [("o1", "de", 1)], key_serde="str", value_serde="str")
    assert app.run()["records_skipped_on_error"] == 1
    app.close()
    assert [vb for _, vb, _, _ in read_envelopes(engine, "enriched")] == [b"Germany"]
