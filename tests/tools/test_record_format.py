"""``tstreams consume --format record``: a streams app's output read from the command line
(envelopes and windowed keys decoded by ``--key-serde`` / ``--value-serde``), and the other
formats naming an envelope when they meet one. Embedded and served."""

from __future__ import annotations

import datetime as dt
import json

import msgpack
import pytest

from tstreams_embedded.streams import App, Record, StreamsBuilder, TimeWindows, send_records

from .conftest import Site


@pytest.fixture
def counted(site: Site) -> Site:
    """``clicks`` (two records and a plain item) counted into ``counts`` by 10 ms windows."""
    b = StreamsBuilder()
    (b.stream("clicks", key_serde="str", value_serde="json").group_by_key(key_serde="str")
        .windowed_by(TimeWindows(size_ms=10)).count(store="n").to_stream()
        .to("counts", key_serde="str", value_serde="json"))
    site.engine.create_stream("clicks")
    send_records(site.engine, "clicks", [Record("ann", {"page": "/"}, 5, {"trace": b"\x01\xff"}), ("bob", {}, 12)],
                 key_serde="str", value_serde="json")
    site.engine.producer("clicks").instant([b'{"plain": true}'])
    app = App(site.engine, application_id="clicks", topology=b.build())
    app.run()
    app.close()
    return site


def test_record_format_decodes_envelopes_and_windowed_keys(counted: Site) -> None:
    out = counted.ok("consume", "counts", "--format", "record", "--key-serde", "windowed(str)",
                     "--value-serde", "json").stdout
    assert [json.loads(line) for line in out.splitlines()] == [
        {"key": {"key": "ann", "start": 0, "end": 10}, "value": 1, "timestamp": 5, "headers": {"trace": "01ff"}},
        {"key": {"key": "bob", "start": 10, "end": 20}, "value": 1, "timestamp": 12, "headers": None}]
    (first, plain) = counted.json("consume", "clicks", "--format", "record", "--key-serde", "str",
                                  "--value-serde", "json")
    assert [r["key"] for r in first["items"]] == ["ann", "bob"]
    assert first["items"][0]["value"] == {"page": "/"}
    assert plain["items"] == [{"key": None, "value": {"plain": True}, "timestamp": plain["id"] // 100_000,
                               "headers": None}]  # a plain item: its transaction's time


@pytest.mark.parametrize(("fmt", "what"), [("json", "JSON"), ("msgpack", "msgpack")])
def test_other_formats_say_an_item_is_a_record_envelope(counted: Site, fmt: str, what: str) -> None:
    """Were: "an item is not JSON ('utf-8' codec can't decode byte 0xc1…)" and "an item is
    not msgpack ()"."""
    bad = counted.run("consume", "counts", "--format", fmt)
    assert bad.exit_code == 1 and bad.stderr.count("\n") == 1, bad.stderr
    assert bad.stderr.startswith(f"Error: InvalidArgument: an item is not {what}: this is a streams record envelope")
    assert "--format record --key-serde" in bad.stderr and "()" not in bad.stderr


@pytest.mark.parametrize(("args", "status", "message"), [
    (["--format", "hex", "--key-serde", "str"], 2, "Error: --key-serde and --value-serde go with --format record"),
    (["--format", "record", "--key-serde", "yaml"], 2, "Error: Invalid value for '--key-serde'"),
    (["--format", "record", "--key-serde", "json", "--value-serde", "json"], 1,
     "Error: InvalidArgument: an item is not a record of these serdes: not JSON"),
])
def test_bad_record_options_exit_non_zero_with_one_line(counted: Site, args: list[str], status: int,
                                                        message: str) -> None:
    result = counted.run("consume", "counts", *args)
    assert result.exit_code == status, (result.stdout, result.stderr)
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr


def test_msgpack_documents_json_has_no_form_for_are_shown(site: Site) -> None:
    """Bytes map keys, extension types and timestamps ended in a raw TypeError traceback."""
    site.engine.create_stream("m")
    when = msgpack.Timestamp.from_datetime(dt.datetime(2026, 3, 29, tzinfo=dt.timezone.utc))
    site.engine.producer("m").instant([msgpack.packb({b"\x00k": 1, 2: [b"\xff"]}),
                                       msgpack.packb(msgpack.ExtType(5, b"x")), msgpack.packb({"at": when})])
    assert site.ok("consume", "m", "--format", "msgpack").stdout.splitlines() == [
        '{"006b":1,"2":["ff"]}', '{"ext":5,"data":"78"}', f'{{"at":{{"timestamp_ns":{when.to_unix_nano()}}}}}']
