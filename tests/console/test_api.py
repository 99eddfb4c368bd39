"""The console's JSON API on a real process (``tstreams serve --http`` and ``tstreams console
--data``): its figures equal the CLI's ``--json`` output for the same moment, the message
browser pages through what a consumer reads, a consumer held back by an open transaction
names it, and bad input to every parameter is a JSON 400 (unknown names 404), never a 500."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded.console.sampler import LagSampler
from tstreams_embedded.engine.protocol.validate import MAX_NAME_BYTES
from tstreams_embedded.ids import txn_millis
from tstreams_embedded.testing import ServeProcess, eventually, free_port

from .conftest import Console, console_process, stop, wait_http

pytestmark = pytest.mark.timeout(120)

#: timings that move between two reads (the rest must be equal)
MOVING = {"lag_ms", "age_ms", "deadline_ms", "open"}
#: the name of the producer holding the open transaction (:func:`traffic`)
HOLDER = "holder <b>&amp;</b>"
#: what a console's consumer row adds to the CLI's
CONSOLE_ONLY = {"waits_on", "lag_capped", "counts_capped", "bytes_capped"}


def traffic(engine: ts.Engine) -> tuple[Any, int]:
    """Stream ``s``: 5 transactions on partition 0, 3 on 1 (JSON items); consumer ``c`` read
    2 of partition 0 and checkpointed; then an open transaction on partition 0. Returns the
    producer holding it open and its ID."""
    engine.create_stream("s", partitions=2, ttl=3600, description="console test")
    for p, n in ((0, 5), (1, 3)):
        producer = engine.producer("s", partition=p)
        for i in range(n):
            producer.instant([json.dumps({"p": p, "n": i, "k": k}).encode() for k in range(i + 1)])
    consumer = engine.consumer("s", name="c", partitions=[0])
    assert consumer.get_transaction(0) is not None and consumer.get_transaction(0) is not None
    consumer.checkpoint()
    holder = engine.producer("s", partition=0, name=HOLDER)
    txn = holder.new_transaction(0)
    txn.send(b'{"open": true}')
    txn.flush()
    return holder, txn.id


def steady(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in MOVING}


def test_figures_equal_the_cli(console: Console) -> None:
    holder, open_id = traffic(console.engine)
    overview = console.api("overview")["node"]
    assert overview["streams"] == 1 and overview["transactions"] == 9
    # commit counters are the serving process's own: a console beside an application counts none
    assert overview["commits"] > 0 if console.kind == "served" else overview["commits"] == 0
    assert 0 < overview["map_used_bytes"] <= overview["map_size_bytes"] <= overview["map_limit_bytes"]
    listed = console.api("streams")
    assert [(s["name"], s["partitions"], s["ttl"], s["consumers"]) for s in listed["streams"]] == [("s", 2, 3600, 1)]

    stream = console.api("streams/s")
    cli_parts = console.cli_json("streams", "describe", "s")
    assert [steady({k: v for k, v in r.items() if k not in CONSOLE_ONLY}) for r in stream["rows"]] == \
        [steady(r) for r in cli_parts]
    assert not any(r["counts_capped"] or r["bytes_capped"] for r in stream["rows"])
    assert [(t["id"], t["producer"]) for t in stream["rows"][0]["open"]] == [(open_id, HOLDER)]
    assert [t["producer"] for t in cli_parts[0]["open"]] == [HOLDER]

    mine = console.api("streams/s/consumers/c")
    cli_rows = console.cli_json("consumers", "describe", "s", "c")
    assert [steady({k: v for k, v in r.items() if k not in CONSOLE_ONLY}) for r in mine["rows"]] == \
        [steady(r) for r in cli_rows]
    assert not mine["lag_capped"] and not any(r["lag_capped"] for r in mine["rows"])
    p0, p1 = mine["rows"]
    assert (p0["lag_transactions"], p0["lag_items"], p0["blocked_by_open"]) == (3, 3 + 4 + 5, True)
    waits = p0["waits_on"]
    assert (waits["id"], waits["producer"]) == (open_id, HOLDER) and waits["items"] in (0, 1)
    assert waits["age_ms"] >= 0 and 0 < waits["expires_in_ms"] <= 60_000
    assert p1["waits_on"] is None and p1["lag_transactions"] == 3
    assert console.api("consumers")["consumers"] == console.api("consumers?stream=s")["consumers"]
    assert [c["consumer"] for c in console.api("consumers")["consumers"]] == ["c"]

    holder.checkpoint()  # the blocker is gone once checkpointed
    eventually(lambda: console.api("streams/s/consumers/c")["rows"][0]["waits_on"] is None)
    eventually(lambda: console.api("streams/s")["rows"][0]["open"] == [])  # and so is its producer (a kept read)
    holder.close()


@pytest.mark.parametrize("fmt", ["json", "raw", "hex"])
def test_browser_pages_through_what_a_consumer_reads(console: Console, fmt: str) -> None:
    holder, _ = traffic(console.engine)
    reader = console.engine.consumer("s", name="reader", partitions=[0])
    expected = []
    while (t := reader.get_transaction(0)) is not None:
        expected.append((t.id, [bytes(i) for i in t.items]))
    seen: list[tuple[int, list[Any]]] = []
    after = 0
    pages = 0
    while True:
        page = console.api(f"streams/s/partitions/0/messages?after={after}&limit=2&format={fmt}")
        seen.extend((t["id"], [i["value"] for i in t["items"]]) for t in page["transactions"])
        pages += 1
        if not page["more"]:
            break
        after = page["next_after"]
    decode = {"json": json.loads, "raw": lambda b: b.decode(), "hex": bytes.hex}[fmt]
    assert seen == [(i, [decode(b) for b in items]) for i, items in expected]
    assert len(seen) == 5 and pages == 3 and page["blocked_by_open"]
    holder.close()


def test_browser_starts_at_a_time(console: Console) -> None:
    holder, _ = traffic(console.engine)
    holder.close()
    everything = console.api("streams/s/partitions/0/messages")["transactions"]
    third = everything[2]["id"]
    page = console.api(f"streams/s/partitions/0/messages?since_ms={txn_millis(third)}")["transactions"]
    assert [t["id"] for t in page] == [t["id"] for t in everything if txn_millis(t["id"]) >= txn_millis(third)]
    ids = [t["id"] for t in page]  # (several transactions may share a millisecond)
    assert third in ids and (everything[0]["id"] not in ids or txn_millis(everything[0]["id"]) == txn_millis(third))
    assert console.api("streams/s/partitions/0/messages?since_ms=0")["transactions"] == everything


def test_undecodable_items_are_shown_as_errors(console: Console) -> None:
    console.engine.create_stream("b", partitions=1)
    console.engine.producer("b", partition=0).instant([b"\xff not json", b"[1]"])
    (txn,) = console.api("streams/b/partitions/0/messages?format=json")["transactions"]
    assert "not JSON" in txn["items"][0]["error"] and txn["items"][1] == {"value": [1], "bytes": 3}


LONG = "x" * (MAX_NAME_BYTES + 1)
BAD = [
    ("overview?x=1", 400, "InvalidArgument", "unknown query parameter"),
    ("streams?limit=1", 400, "InvalidArgument", "unknown query parameter"),
    (f"streams/{LONG}", 400, "InvalidArgument", "stream name"),
    ("streams/a%00b", 400, "InvalidArgument", "stream name"),
    ("streams/nope", 404, "StreamNotFound", "nope"),
    ("streams/s/partitions/x/messages", 400, "InvalidArgument", "partition"),
    ("streams/s/partitions/-1/messages", 400, "InvalidArgument", "partition"),
    ("streams/s/partitions/2/messages", 400, "PartitionOutOfRange", "out of range"),
    ("streams/s/partitions/99999999999/messages", 400, "InvalidArgument", "partition"),
    ("streams/nope/partitions/0/messages", 404, "StreamNotFound", "nope"),
    ("streams/s/partitions/0/messages?after=-1", 400, "InvalidArgument", "'after'"),
    ("streams/s/partitions/0/messages?after=abc", 400, "InvalidArgument", "'after'"),
    (f"streams/s/partitions/0/messages?after={2**63}", 400, "InvalidArgument", "'after'"),
    ("streams/s/partitions/0/messages?after=1&after=2", 400, "InvalidArgument", "given 2 times"),
    ("streams/s/partitions/0/messages?limit=0", 400, "InvalidArgument", "'limit'"),
    ("streams/s/partitions/0/messages?limit=101", 400, "InvalidArgument", "'limit'"),
    ("streams/s/partitions/0/messages?limit=", 400, "InvalidArgument", "'limit'"),
    ("streams/s/partitions/0/messages?format=xml", 400, "InvalidArgument", "'format'"),
    ("streams/s/partitions/0/messages?format=record&key_serde=nope", 400, "InvalidArgument", "'key_serde'"),
    ("streams/s/partitions/0/messages?format=record&value_serde=nope", 400, "InvalidArgument", "'value_serde'"),
    ("streams/s/partitions/0/messages?page=2", 400, "InvalidArgument", "unknown query parameter"),
    ("streams/s/partitions/0/messages?after=%FF", 400, "InvalidArgument", "'after'"),
    ("streams/s/partitions/0/messages?since_ms=x", 400, "InvalidArgument", "'since_ms'"),
    (f"streams/s/partitions/0/messages?since_ms={10**17}", 400, "InvalidArgument", "'since_ms'"),
    ("streams/s/partitions/0/messages?since_ms=1&after=1", 400, "InvalidArgument", "not both"),
    ("consumers?stream=", 400, "InvalidArgument", "stream name"),
    ("consumers?stream=nope", 404, "StreamNotFound", "nope"),
    ("consumers?stream=a&stream=b", 400, "InvalidArgument", "given 2 times"),
    ("streams/s/consumers/nope", 404, "ConsumerNotFound", "nope"),
    ("streams/nope/consumers/c", 404, "StreamNotFound", "nope"),
    (f"streams/s/consumers/{LONG}", 400, "InvalidArgument", "consumer name"),
    ("streams/s/consumers/c?x=1", 400, "InvalidArgument", "unknown query parameter"),
    (f"streams/s/consumers/{LONG}/lag", 400, "InvalidArgument", "consumer name"),
    ("streams/s/consumers/c/lag?since=1", 400, "InvalidArgument", "unknown query parameter"),
    ("apps?x=1", 400, "InvalidArgument", "unknown query parameter"),
    ("nope", 404, "NotFound", "no such API endpoint"),
]


def test_bad_input_is_a_json_400(console: Console) -> None:
    traffic(console.engine)[0].close()
    for path, status, error, words in BAD:
        got, content_type, body = console.get("/api/" + path)
        assert (got, body["error"]) == (status, error), (path, body)
        assert content_type.startswith("application/json") and words in body["message"], (path, body)


def test_token_is_checked_on_every_request(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with ts.open(data, compaction_interval=None) as engine:
        engine.create_stream("s")
        port = free_port()
        proc = console_process(data, port, tmp_path / "console.log", "--http-token", "sesame")
        try:
            wait_http(port)
            c = Console("embedded", data, engine, port, ["--data", str(data)])
            for path in ("/api/overview", "/api/streams/s", "/api/nope", "/console/", "/console/app.js"):
                assert c.get(path)[0] == 401, path
                assert c.get(path, {"Authorization": "Bearer sesam"})[0] == 401, path
            c.token = "sesame"
            assert c.api("streams/s")["name"] == "s"
            assert c.get("/api/streams/s?token=sesame", {"Authorization": ""})[0] == 200
        finally:
            stop(proc)


def test_serve_checks_the_http_token(tmp_path: Path) -> None:
    port = free_port()
    with ServeProcess(tmp_path / "data", tmp_path, extra_args=["--http", f"127.0.0.1:{port}", "--http-token", "k"]
                      ) as server:
        engine = server.connect(timeout=10)
        wait_http(port)
        c = Console("served", tmp_path / "data", engine, port, ["--connect", server.endpoint])
        assert c.get("/api/overview")[0] == 401 and c.get("/console/index.html")[0] == 401
        c.token = "k"
        assert c.api("overview")["node"]["streams"] == 0
        engine.close()


def test_console_refuses_an_exposed_bind_without_token(tmp_path: Path) -> None:
    ts.open(tmp_path, compaction_interval=None).close()
    done = subprocess.run([sys.executable, "-m", "tstreams_embedded.cli", "console", "--data", str(tmp_path),
                           "--http", f"0.0.0.0:{free_port()}"], capture_output=True, timeout=60)
    assert done.returncode == 2 and b"--http-token" in done.stderr


def test_lag_history_is_a_bounded_ring(tmp_path: Path) -> None:
    with ts.open(tmp_path, compaction_interval=None) as engine:
        engine.create_stream("s", partitions=1)
        producer = engine.producer("s", partition=0)
        consumer = engine.consumer("s", name="c")
        producer.instant([b"a"])
        consumer.get_transaction(0)
        consumer.checkpoint()
        sampler = LagSampler(engine.backend, interval=60, keep=3)  # type: ignore[arg-type]
        for _ in range(5):
            producer.instant([b"b"])
            sampler.sample()
        assert len(sampler.ring) == 3
        series = sampler.history("s", "c")["partitions"]["0"]
        assert [txns for _, txns, _ in series] == [3, 4, 5]
        assert sampler.history("s", "other")["partitions"] == {}


def test_stream_apps_show_members_tasks_and_input_lag(console: Console) -> None:
    from tstreams_embedded.streams import App, StreamsBuilder

    engine = console.engine
    engine.create_stream("orders", partitions=2)
    for p in (0, 1):
        engine.producer("orders", partition=p).instant([b"order"])
    b = StreamsBuilder()
    b.stream("orders", value_serde="bytes").map_values(len).to("order-sizes", value_serde="json")
    assert {k: v for k, v in console.api("apps").items() if k != "as_of_ms"} == {"applications": [], "truncated": False}
    app = App(engine, application_id="order-sizes", topology=b.build(), instance_name="sizer")
    app.start()

    def shown() -> Any:
        (a,) = console.api("apps")["applications"] or [None]
        if a is None:
            return None
        return ([(m["live"], m["tasks"]) for m in a["members"]],
                sorted((r["stream"], r["partition"], r["lag_txns"]) for r in a["lag"]), a["unassigned"])

    try:
        eventually(lambda: shown() == ([(True, [0, 1])], [("orders", 0, 0), ("orders", 1, 0)], []), 30, 0.05,
                   message=lambda: f"apps: {shown()}")
    finally:
        app.close()
    # it left its group: its member is gone and its tasks unassigned
    eventually(lambda: shown() == ([(False, [])], [("orders", 0, 0), ("orders", 1, 0)], [0, 1]), 30, 0.05,
               message=lambda: f"apps: {shown()}")


def test_stream_apps_show_dropped_records_and_query_endpoints(console: Console) -> None:
    """A live member's dropped records by reason, asked from its interactive-query server
    (they live in its process), and that server's address; without one, or once expired,
    the member has no figures and the page says why."""
    from tstreams_embedded.streams import App, StreamsBuilder

    engine = console.engine
    engine.create_stream("clicks")
    engine.producer("clicks").instant([b"a", b"b", b"a", b"a", b"c", b"b"])  # 3 duplicates
    b = StreamsBuilder()
    b.stream("clicks", value_serde="bytes").dedup(key=lambda k, v: v, ttl_ms=3_600_000).to(
        "unique", value_serde="bytes")
    port = free_port()
    app = App(engine, application_id="dedup", topology=b.build(), instance_name="d1", http_port=port)
    app.start()

    def shown() -> Any:
        (a,) = console.api("apps")["applications"] or [None]
        if a is None or not a["members"]:
            return None
        (m,) = a["members"]
        return m["live"], m["query_url"], m["dropped"], m["metrics_error"], a["dropped"]

    try:
        want = (True, f"http://127.0.0.1:{port}", {"dedup": 3}, None, {"dedup": 3})
        eventually(lambda: shown() == want, 30, 0.05, message=lambda: f"apps: {shown()}")
    finally:
        app.close()
    eventually(lambda: (shown() or [None])[0] is False, 30, 0.05, message=lambda: f"apps: {shown()}")
    live, _, dropped, error, total = shown()
    assert (dropped, total) == (None, {}) and "expired" in error


def test_member_metrics_are_parsed_and_bounded() -> None:
    from tstreams_embedded.console.appmetrics import dropped_records, parse_dropped, query_url

    text = ('# HELP x\ntstreams_streams_dropped_records_total{app="a",partition="0",reason="late"} 2.0\n'
            'tstreams_streams_dropped_records_total{app="a",partition="1",reason="late"} 3.0\n'
            'tstreams_streams_dropped_records_total{app="a",partition="1",reason="dedup"} 1.0\n'
            'tstreams_streams_dropped_records_created{app="a",partition="1",reason="dedup"} 1.7e9\n'
            'tstreams_streams_records_processed_total{app="a",partition="1"} 9.0\n')
    assert parse_dropped(text) == {"dedup": 1, "late": 5}
    assert query_url("::1", 80) == "http://[::1]:80" and query_url(None, None) is None
    assert "error" in dropped_records(f"http://127.0.0.1:{free_port()}", 1.0)  # nothing listens


def test_work_queue_equals_the_cli(console: Console) -> None:
    e = console.engine
    e.create_stream("jobs", partitions=2)
    e.create_stream("dlq")
    e.producer("jobs", partition=0).instant([b"a", b"b", b"c"])
    e.producer("jobs", partition=1).instant([b"d"])
    q = e.work_queue("jobs", "w", dead_letter="dlq", max_deliveries=1)
    d1, _ = q.receive(2, timeout=0)
    d1.nak(0, "boom")  # its only delivery failed: dead-lettered
    mine = console.api("streams/jobs/queues/w")
    (cli,) = console.cli_json("queues", "describe", "jobs", "w")
    moving = {"oldest_unsettled_age_ms", "pending_by_partition", "as_of_ms"}
    assert {k: v for k, v in mine.items() if k not in moving} == {k: v for k, v in cli.items() if k not in moving}
    assert (mine["in_flight"], mine["dead_lettered"]) == (1, 1)
    assert sum(mine["pending_by_partition"].values()) == mine["pending"]
    listed = console.api("queues")
    assert listed["groups"] == [{**cli, "oldest_unsettled_age_ms": listed["groups"][0]["oldest_unsettled_age_ms"]}]
    assert not listed["truncated"] and console.api("queues?stream=dlq")["groups"] == []
    for path, status, error in (("streams/jobs/queues/nope", 404, "WorkQueueNotFound"),
                                ("queues?stream=nope", 404, "StreamNotFound"),
                                ("streams/jobs/queues/%00", 400, "InvalidArgument"),
                                ("streams/jobs/queues/w?full=1", 400, "InvalidArgument")):
        got, _, body = console.get("/api/" + path)
        assert (got, body["error"]) == (status, error), (path, body)


def test_schedules_equal_the_cli(console: Console) -> None:
    e = console.engine
    e.create_stream("later", partitions=2)
    e.create_stream("other")
    ids = [e.schedule("later", [b"a"], delay=3600, partition=1), e.schedule("other", [b"b", b"c"], delay=1800),
           e.schedule("later", [b"d"], delay=7200)]
    moving = {"in"}  # how long until due: the two reads are not at the same moment

    def steady_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k not in moving} for r in rows]

    mine = console.api("schedules")
    assert [r["id"] for r in mine["schedules"]] == [ids[1], ids[0], ids[2]]  # earliest due first
    assert steady_rows(mine["schedules"]) == steady_rows(console.cli_json("schedules", "list"))
    assert steady_rows(console.api("schedules?stream=later")["schedules"]) == steady_rows(
        console.cli_json("schedules", "list", "later"))
    assert mine["schedules"][0]["items"] == 2 and not mine["truncated"]
    e.cancel_schedule(ids[1])
    assert [r["id"] for r in console.api("schedules?stream=other")["schedules"]] == []
    for path, status, error in (("schedules?stream=nope", 404, "StreamNotFound"),
                                ("schedules?stream=%00", 400, "InvalidArgument"),
                                ("schedules?limit=1", 400, "InvalidArgument")):
        got, _, body = console.get("/api/" + path)
        assert (got, body["error"]) == (status, error), (path, body)


def test_console_fires_no_schedule(tmp_path: Path) -> None:
    """``tstreams console`` only reads: a due schedule stays pending while only the
    console has the directory open (the application fires it)."""
    data = tmp_path / "data"
    with ts.open(data, compaction_interval=None, fire_schedules=False) as engine:
        engine.create_stream("s")
        sid = engine.schedule("s", [b"x"], delay=0)
        port = free_port()
        proc = console_process(data, port, tmp_path / "console.log")
        try:
            wait_http(port)
            console = Console("embedded", data, engine, port, ["--data", str(data)])
            assert [r["id"] for r in console.api("schedules")["schedules"]] == [sid]
            console.api("overview")  # the sampler has run at least once (0.2 s interval) by now
            eventually(lambda: console.api("overview")["commits_per_s"] is not None, 10, 0.05)
            assert [s.id for s in engine.schedules()] == [sid]
        finally:
            stop(proc)


#: every endpoint, its path segments to vary and its query parameters
ENDPOINTS = [
    ("overview", [], []),
    ("streams", [], []),
    ("streams/{0}", ["s"], []),
    ("streams/{0}/partitions/{1}/messages", ["s", "0"],
     ["after", "since_ms", "limit", "format", "key_serde", "value_serde"]),
    ("consumers", [], ["stream"]),
    ("streams/{0}/consumers/{1}", ["s", "c"], []),
    ("streams/{0}/consumers/{1}/lag", ["s", "c"], []),
    ("streams/{0}/queues/{1}", ["s", "w"], []),
    ("queues", [], ["stream"]),
    ("schedules", [], ["stream"]),
    ("apps", [], []),
]


@pytest.mark.parametrize("console", ["served"], indirect=True)
def test_no_input_gets_a_500(console: Console) -> None:
    """Any text in any path segment or query parameter of any endpoint gets JSON: 200, 400 or
    404, never a 500 (hypothesis picks the text, the endpoint and where it goes)."""
    from urllib.parse import quote

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    traffic(console.engine)[0].close()
    console.engine.work_queue("s", "w")
    console.engine.schedule("s", [b"later"], delay=3600)
    text = st.one_of(st.text(max_size=30), st.binary(max_size=12).map(lambda b: b.decode("latin-1")),
                     st.integers(-2**70, 2**70).map(str), st.sampled_from(["", "0", "-1", "1e3", "%", "..", "raw"]))

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(ENDPOINTS), st.data())
    def check(endpoint: tuple[str, list[str], list[str]], data: st.DataObject) -> None:
        path, segments, params = endpoint
        given_segments = [data.draw(st.one_of(st.just(s), text)) for s in segments]
        names = data.draw(st.lists(st.sampled_from([*params, "x"]), max_size=3)) if params or data.draw(
            st.booleans()) else []
        query = "&".join(f"{quote(n)}={quote(data.draw(text), safe='')}" for n in names)
        url = "/api/" + path.format(*(quote(s, safe="") or "%20" for s in given_segments)) + ("?" + query if query
                                                                                             else "")
        status, content_type, body = console.get(url)
        assert status in (200, 400, 404), (url, status, body)
        assert content_type.startswith("application/json") and isinstance(body, dict), (url, body)
        assert status == 200 or set(body) == {"error", "message"}, (url, body)

    check()
