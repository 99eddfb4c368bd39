"""The console's pages in headless Chromium on a real server with traffic: the overview
shows the CLI's figures, the partition browser pages through what a consumer reads, and a
consumer held back by an open transaction shows it with its age, until it is checkpointed;
its lag chart draws the sampled lag."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tstreams_embedded.testing import eventually

from .conftest import Console
from .test_api import HOLDER, traffic

pytestmark = pytest.mark.timeout(180)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def shoot(driver: Any, name: str, tmp_path: Path) -> None:
    """A screenshot: into ``docs/`` when ``TSTREAMS_UPDATE_DOCS=1`` (docs/CONSOLE.md shows
    them), else a temporary file (a test run leaves the working tree clean)."""
    where = DOCS if os.environ.get("TSTREAMS_UPDATE_DOCS") == "1" else tmp_path
    assert driver.save_screenshot(str(where / name))


def cells(driver: Any, selector: str, cell: str) -> dict[str, str]:
    """``data-*`` value -> text of ``cell`` for the rows matching ``selector`` (one script:
    the page redraws every 2 s)."""
    got: dict[str, str] = driver.execute_script("""
        const out = {};
        for (const tr of document.querySelectorAll(arguments[0])) {
          const key = Object.values(tr.dataset)[0];
          const td = tr.querySelector(arguments[1]);
          out[key] = td ? td.textContent : null;
        }
        return out;""", selector, cell)
    return got


@pytest.mark.parametrize("console", ["served"], indirect=True)
def test_pages(console: Console, browser: Any, tmp_path: Path) -> None:
    holder, open_id = traffic(console.engine)
    base = f"{console.base}/console/"

    browser.get(base + "#/overview")
    assert eventually(lambda: cells(browser, "#node tbody tr", ".value").get("streams"), 20, 0.1) == "1"
    shoot(browser, "console-overview.png", tmp_path)

    browser.get(base + "#/streams")
    eventually(lambda: cells(browser, "#streams tbody tr", ".partitions") == {"s": "2"}, 20, 0.1)

    browser.get(base + "#/streams/s")
    cli = {str(r["partition"]): str(r["transactions"]) for r in console.cli_json("streams", "describe", "s")}
    eventually(lambda: cells(browser, "#partitions tbody tr", ".transactions") == cli, 20, 0.1)

    # the browser, three pages of two transactions of JSON items, against a consumer reading partition 0
    reader = console.engine.consumer("s", name="reader", partitions=[0])
    expected = {}
    while (t := reader.get_transaction(0)) is not None:
        expected[str(t.id)] = [json.loads(bytes(i)) for i in t.items]
    browser.get(base + "?format=json&limit=2#/streams/s/partitions/0")
    seen: dict[str, list[Any]] = {}
    pages = 0
    for n in range(5):
        pages += 1
        page = eventually(lambda: cells(browser, "#messages tbody tr", ".items") or None, 20, 0.1)
        if n == 0:
            shoot(browser, "console-browser.png", tmp_path)
        seen.update({k: [json.loads(line) for line in v.splitlines()] for k, v in page.items()})
        if browser.find_element("id", "next").get_attribute("disabled"):
            break
        browser.find_element("id", "next").click()
        eventually(lambda shown=set(page): set(cells(browser, "#messages tbody tr", ".items")) != shown, 20, 0.1)
    assert seen == expected and len(seen) == 5 and pages == 3

    # the consumer page: lag as the CLI says, the blocking open transaction with its age, a chart
    browser.get(base + "#/consumers/s/c")
    cli_lag = {str(r["partition"]): str(r["lag_transactions"])
               for r in console.cli_json("consumers", "describe", "s", "c")}
    eventually(lambda: cells(browser, "#consumer-rows tbody tr", ".lag_transactions") == cli_lag, 20, 0.1)
    blocker = eventually(lambda: browser.execute_script(
        "const e = document.querySelector('[data-partition=\"0\"] .waits'); return e && e.textContent;"), 20, 0.1)
    assert blocker.startswith(f"txn {open_id}, age ") and "expires in" in blocker
    assert blocker.endswith(f", producer {HOLDER}")  # as text: the name is not markup
    holder.checkpoint()
    eventually(lambda: browser.execute_script("return document.querySelector('.waits') === null;"), 20, 0.1)
    assert browser.find_element("id", "lag-chart").tag_name == "svg"
    holder.close()

    browser.get(base + "#/apps")
    assert "no application" in eventually(lambda: browser.execute_script(
        "const e = document.getElementById('no-apps'); return e && e.textContent;"), 20, 0.1)


def test_lag_chart_moves_when_a_consumer_falls_behind(console: Console, browser: Any, tmp_path: Path) -> None:
    holder, _ = traffic(console.engine)
    holder.close()  # cancels the open transaction
    browser.get(f"{console.base}/console/#/consumers/s/c")

    def chart_last() -> int | None:
        value = browser.execute_script(
            "const e = document.getElementById('lag-chart'); return e && e.getAttribute('data-last-max');")
        return int(value) if value is not None else None

    assert eventually(lambda: chart_last() == 3, 20, 0.1, message=lambda: f"chart: {chart_last()}")  # 3 unread
    producer = console.engine.producer("s", partition=0)
    for _ in range(7):
        producer.instant([b"{}"])
    assert eventually(lambda: chart_last() == 10, 20, 0.1, message=lambda: f"chart: {chart_last()}")  # 3 + 7
    shoot(browser, "console-lag.png", tmp_path)


@pytest.mark.parametrize("console", ["served"], indirect=True)
def test_work_queue_and_schedule_pages(console: Console, browser: Any) -> None:
    """The work queues page and a stream's page show each group's figures as ``tstreams
    queues describe --json``; the schedules page the pending schedules as ``tstreams
    schedules list --json`` (their due time and stream)."""
    e = console.engine
    e.create_stream("jobs", partitions=2)
    e.create_stream("dlq")
    e.producer("jobs", partition=0).instant([b"a", b"b", b"c"])
    q = e.work_queue("jobs", "w", dead_letter="dlq", max_deliveries=1)
    d1, _ = q.receive(2, timeout=0)
    d1.nak(0, "boom")  # dead-lettered
    ids = [e.schedule("jobs", [b"x"], delay=3600, partition=1), e.schedule("dlq", [b"y", b"z"], delay=600)]
    base = f"{console.base}/console/"

    (cli,) = console.cli_json("queues", "describe", "jobs", "w")
    want = {"jobs/w": {"pending": str(cli["pending"]), "in_flight": str(cli["in_flight"]),
                       "dead_lettered": str(cli["dead_lettered"]), "dead_letter": "dlq"}}

    def groups() -> dict[str, dict[str, str]]:
        return {k: {c: cells(browser, "#queues tbody tr", "." + c)[k] for c in want["jobs/w"]}
                for k in cells(browser, "#queues tbody tr", ".group")}

    for page in ("#/queues", "#/streams/jobs"):
        browser.get(base + page)
        assert eventually(lambda: groups() or None, 20, 0.1) == want
    browser.find_element("css selector", "#queues a").click()
    eventually(lambda: cells(browser, "#queue tbody tr", ".value").get("dead_lettered") == "1", 20, 0.1)

    listed = console.cli_json("schedules", "list")
    browser.get(base + "#/schedules")
    shown = eventually(lambda: cells(browser, "#schedules tbody tr", ".due") or None, 20, 0.1)
    assert shown == {str(r["id"]): r["due"] for r in listed} and [r["id"] for r in listed] == [ids[1], ids[0]]
    assert cells(browser, "#schedules tbody tr", ".stream") == {str(r["id"]): r["stream"] for r in listed}
    e.cancel_schedule(ids[1])
    eventually(lambda: list(cells(browser, "#schedules tbody tr", ".due")) == [str(ids[0])], 20, 0.1)


@pytest.mark.parametrize("console", ["served"], indirect=True)
def test_stream_apps_page(console: Console, browser: Any, tmp_path: Path) -> None:
    """A running app on the apps page: its member, tasks, interactive-query address, dropped
    records by reason, and its input lag as ``tstreams consumers describe --json`` counts it
    for the app's consumer."""
    from tstreams_embedded.streams import App, StreamsBuilder
    from tstreams_embedded.testing import free_port

    e = console.engine
    e.create_stream("clicks")  # one partition: records without a key reach one dedup task
    e.producer("clicks").instant([b"a", b"a", b"b", b"b"])  # two duplicates
    b = StreamsBuilder()
    b.stream("clicks", value_serde="bytes").dedup(key=lambda k, v: v, ttl_ms=3_600_000).to(
        "unique", value_serde="bytes")
    port = free_port()
    app = App(e, application_id="dedup", topology=b.build(), instance_name="d1", http_port=port)
    app.start()
    try:
        browser.get(f"{console.base}/console/#/apps")

        def member() -> dict[str, str] | None:
            got: dict[str, str] | None = browser.execute_script("""
                const tr = document.querySelector('[data-app="dedup"] tr[data-member]');
                if (!tr) return null;
                const t = c => tr.querySelector("." + c).textContent;
                return {state: t("live"), tasks: t("tasks"), queries: t("query_url"), dropped: t("dropped"),
                        href: tr.querySelector(".query_url a").href};""")
            return got

        want = {"state": "live", "tasks": "0", "queries": f"http://127.0.0.1:{port} metrics",
                "dropped": "dedup: 2", "href": f"http://127.0.0.1:{port}/v1/members"}
        eventually(lambda: member() == want, 30, 0.1, message=lambda: f"member: {member()}")

        def cli() -> dict[str, str]:
            return {f"clicks/{r['partition']}": str(r["lag_transactions"])
                    for r in console.cli_json("consumers", "describe", "clicks", "dedup")}

        eventually(lambda: cli() == {"clicks/0": "0"}, 30, 0.1)  # the app committed its input offset
        eventually(lambda: cells(browser, '[data-app="dedup"] tr[data-input]', ".lag_txns") == cli(), 20, 0.1)
        if os.environ.get("TSTREAMS_UPDATE_DOCS") == "1":
            shoot(browser, "console-apps.png", tmp_path)
    finally:
        app.close()
