"""Interactive queries of running apps, in process: global stores over HTTP, prefixes and key
serdes, the advertised address, and bad input at every query entry point."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.streams import App, StreamsBuilder, TimeWindows, send_records
from tstreams_embedded.streams.queries import QueryClient
from tstreams_embedded.streams.records import partition_of
from tstreams_embedded.streams.serdes import serde
from tstreams_embedded.testing import eventually

NAMES = ["ann", "bob", "bill", "cyd"]


def topology() -> Any:
    b = StreamsBuilder()
    s = b.stream("orders", key_serde="msgpack", value_serde="json")
    s.group_by_key(key_serde="msgpack").count(store="cnt")
    s.group_by_key(key_serde="msgpack").windowed_by(TimeWindows(size_ms=10)).count(store="wcnt")
    b.stream("names", key_serde="str", value_serde="json").group_by_key(key_serde="str").count(store="by_name")
    b.global_table("countries", key_serde="str", value_serde="str")
    return b.build()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[ts.Engine]:
    with ts.open(tmp_path / "data", compaction_interval=None) as e:
        e.create_stream("orders", partitions=2)
        e.create_stream("names", partitions=2)
        e.create_stream("countries", partitions=1)
        send_records(e, "countries", [("de", "Germany", 0), ("fr", "France", 0)], key_serde="str", value_serde="str")
        send_records(e, "orders", [(n, {}, i) for i, n in enumerate(NAMES)], key_serde="msgpack", value_serde="json")
        send_records(e, "names", [(n, {}, i) for i, n in enumerate(NAMES)], key_serde="str", value_serde="json")
        yield e


@pytest.fixture
def two_apps(engine: ts.Engine) -> Iterator[list[App]]:
    """Two instances of one application in this process, one task each."""
    apps = [App(engine, application_id="q", topology=topology(), http_port=0, lease_ms=2000,
                instance_name=f"i{n}") for n in range(2)]
    try:
        for app in apps:
            app.start()
        eventually(lambda: all(len(a.membership.held()) == 1 for a in apps), timeout=60,
                   message="the two instances did not split the two tasks")
        eventually(lambda: apps[0].store("cnt").get("cyd") == 1 and apps[0].store("by_name").get("cyd") == 1,
                   timeout=60)
        yield apps
    finally:
        for app in apps:
            app.close()


def client(app: App) -> QueryClient:
    assert app.http_address is not None
    return QueryClient(*app.http_address)


def test_global_store_queries_answer_on_every_instance(two_apps: list[App]) -> None:
    countries = [["de", "Germany"], ["fr", "France"]]
    not_owner = {partition_of(serde("str").serialize("de"), 2)} ^ {0, 1}
    for app in two_apps:
        assert app.store("countries-global").all() == {"de": "Germany", "fr": "France"}
        status, body = client(app).request("/v1/stores/countries-global/range")
        assert status == 200 and body["entries"] == countries
        status, body = client(app).request("/v1/stores/countries-global/prefix", prefix="f")
        assert status == 200 and body["entries"] == [["fr", "France"]]
        # every instance holds the whole global store: no 421 to the key's task owner
        status, body = client(app).request("/v1/stores/countries-global/get", key="de")
        assert status == 200 and body["value"] == "Germany", (app.membership.held(), not_owner)
        assert client(app).get("countries-global", "fr") == "France"


def test_prefix_needs_a_key_serde_that_keeps_prefixes(two_apps: list[App]) -> None:
    app = two_apps[0]
    assert app.store("by_name").prefix("b") == [("bill", 1), ("bob", 1)]
    assert app.store("by_name").prefix("bo") == [("bob", 1)]
    assert app.store("by_name").range("b", "c") == [("bill", 1), ("bob", 1)]
    # msgpack puts a string's length first: a prefix query would silently miss keys
    with pytest.raises(errors.InvalidArgument, match="key serde keeps prefixes"):
        app.store("cnt").prefix("b")
    for a in two_apps:
        status, body = client(a).request("/v1/stores/cnt/prefix", prefix="b")
        assert status == 400 and body["error"] == "InvalidArgument" and "str or bytes" in body["message"]
    answers = [client(a).request("/v1/stores/by_name/prefix", prefix="b")[1] for a in two_apps]
    merged = {k: v for answer in answers for k, v in answer["entries"]}
    assert merged == {"bill": 1, "bob": 1}
    # range orders by the serialized key: msgpack's length byte first, then the bytes
    assert [k for k, _ in app.store("cnt").range()] == ["ann", "bob", "cyd", "bill"]


def test_advertised_host(engine: ts.Engine) -> None:
    with App(engine, application_id="a", topology=topology(), http_host="0.0.0.0", http_port=0).start() as app:
        meta = app.query_metadata_for_key("cnt", "ann")
        assert meta.host == socket.getfqdn() and meta.host not in ("0.0.0.0", "")
        assert app.http_address is not None and meta.port == app.http_address[1]
    with App(engine, application_id="b", topology=topology(), http_port=0,
             advertised_host="queries.example.com").start() as app:
        assert app.query_metadata_for_key("cnt", "ann").host == "queries.example.com"
        members = client(app).request("/v1/members")[1]["members"]
        assert [m["host"] for m in members] == ["queries.example.com"]
    for bad in ("0.0.0.0", "", 5, "::"):
        with pytest.raises(errors.InvalidArgument, match="advertised_host"):
            App(engine, application_id="c", topology=topology(), http_port=0, advertised_host=bad)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_bad_query_input(two_apps: list[App]) -> None:
    app = two_apps[0]
    windows = app.store("wcnt")
    for call in (lambda: windows.fetch("ann", "x"), lambda: windows.fetch("ann", 0, 2**70),  # type: ignore[union-attr]
                 lambda: windows.fetch_all(None), lambda: windows.get("ann", None, 10)):  # type: ignore[union-attr]
        with pytest.raises(errors.InvalidArgument):
            call()
    with pytest.raises(errors.RemoteError, match="cannot query"):
        QueryClient("127.0.0.1", free_port(), timeout=5).get("cnt", "ann")
    b = StreamsBuilder()
    stream, table = b.stream("s"), b.table("t")
    with pytest.raises(errors.TopologyError):
        stream.outer_join(table, lambda a, b: a)
    with pytest.raises(errors.TopologyError, match="JoinWindows"):
        stream.outer_join(b.stream("s2"), lambda a, b: a)
    assert app.http_address is not None
    host, port = app.http_address
    for raw in ("1e999", "-1e999", "NaN", "Infinity", "[1, -Infinity]"):
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(f"http://{host}:{port}/v1/stores/cnt/get?key={urllib.parse.quote(raw)}",
                                   timeout=10)
        body = json.loads(answer.value.read(), parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
        assert answer.value.code == 400 and body["error"] == "InvalidArgument" and "finite" in body["message"]
    assert client(app).request("/v1/stores/cnt/get", key=1e300)[0] in (200, 421)  # finite numbers are keys


def test_answers_are_strict_json(two_apps: list[App], engine: ts.Engine) -> None:
    owner = two_apps[0]
    p = next(iter(owner.membership.held()))
    key = next(k for k in (f"n{i}" for i in range(100)) if partition_of(serde("str").serialize(k), 2) == p)
    values = serde("msgpack")
    engine.backend.submit([O.StoreWrite(f"q/{p}/by_name", [[serde("str").serialize(key),
                                                            values.serialize([float("inf"), float("nan"), 1.5])]])])
    assert owner.http_address is not None
    host, port = owner.http_address
    with urllib.request.urlopen(f"http://{host}:{port}/v1/stores/by_name/get?key=%22{key}%22", timeout=10) as r:
        body = json.loads(r.read(), parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert body["value"] == ["inf", "nan", 1.5]


def nested(depth: int, *, kind: str = "list") -> str:
    return ("[" * depth + "1" + "]" * depth) if kind == "list" else ('{"a":' * depth + "1" + "}" * depth)


@pytest.mark.parametrize(("method", "path", "status", "error", "words"), [
    ("GET", "/v1/stores/cnt/get?key=" + urllib.parse.quote(nested(1_000)), 400, "InvalidArgument", "nests deeper"),
    ("GET", "/v1/stores/cnt/get?key=" + urllib.parse.quote(nested(33)), 400, "InvalidArgument", "nests deeper than 32"),
    ("GET", "/v1/metadata/cnt?key=" + urllib.parse.quote(nested(900, kind="dict")), 400, "InvalidArgument",
     "nests deeper"),
    ("GET", "/v1/stores/cnt/get?key=%C1", 400, "InvalidArgument", "not UTF-8"),
    ("GET", "/v1/metadata/cnt?key=%22%FF%22", 400, "InvalidArgument", "not UTF-8"),
    ("GET", "/v1/stores/%C1/get?key=1", 400, "InvalidArgument", "unicode"),
    ("GET", "/nope", 404, "NotFound", "/v1/stores/<store>/<query>"),
    ("GET", "/v1/stores/cnt", 404, "NotFound", "no such path"),
    ("POST", "/v1/members", 405, "MethodNotAllowed", "Method Not Allowed"),
])
def test_every_error_is_answered_with_the_json_error_body(two_apps: list[App], method: str, path: str, status: int,
                                                          error: str, words: str) -> None:
    """A key nested 1,000 deep was a 500 (RecursionError in the log); a query or path that is
    not UTF-8 and an unknown path got Tornado's HTML pages."""
    assert two_apps[0].http_address is not None
    host, port = two_apps[0].http_address
    request = urllib.request.Request(f"http://{host}:{port}{path}", method=method,
                                     data=b"{}" if method == "POST" else None)
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=10)
    assert answer.value.code == status
    assert answer.value.headers["Content-Type"] == "application/json"
    body = json.loads(answer.value.read())
    assert body["error"] == error and words in body["message"]


def test_keys_nested_up_to_the_limit_are_answered(two_apps: list[App]) -> None:
    deep: Any = "ann"
    for _ in range(32):
        deep = [deep]
    status, body = client(two_apps[0]).request("/v1/stores/cnt/get", key=deep)
    assert status in (200, 421), body


def test_an_app_that_serves_no_queries_does_not_import_tornado(tmp_path: Path) -> None:
    """Tornado (the query endpoint's server) costs a tenth of a second of start-up: an app
    without ``http_port`` runs, and answers key discovery, without importing it."""
    import subprocess
    import sys

    program = (
        "import sys, tstreams_embedded as ts\n"
        "from tstreams_embedded.streams import App, StreamsBuilder\n"
        "b = StreamsBuilder()\n"
        "b.stream('in', key_serde='str', value_serde='json').group_by_key(key_serde='str').count(store='n')\n"
        f"with ts.open({str(tmp_path / 'db')!r}) as engine:\n"
        "    engine.create_stream('in')\n"
        "    app = App(engine, application_id='a', topology=b.build())\n"
        "    app.run(until_idle=True)\n"
        "    assert app.query_metadata_for_key('n', 'k').partition == 0\n"
        "    app.close()\n"
        "assert 'tornado' not in sys.modules, 'tornado imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
