"""The web console on the nodes of a real 3-node cluster (``tstreams serve --cluster --http``):
every node serves ``/console/`` and ``/api/`` next to its status page, each with its own
replicated view, which converges to the same figures on all nodes. In headless Chromium, a
follower's console shows the cluster (roles and epochs as ``tstreams cluster status``
prints them, log positions, lag), the streams as ``tstreams streams describe --json``, a
partition browser that pages through what a consumer reads, and a consumer held back by an
open transaction, until it is checkpointed."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tstreams_embedded.cli import main
from tstreams_embedded.testing import ZooKeeperServer, eventually

from .conftest import Cluster
from .test_status_page import browser  # noqa: F401 - the headless Chromium fixture

pytestmark = pytest.mark.timeout(180)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def cli_json(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args), catch_exceptions=True)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    lines = result.stdout.splitlines()
    return [json.loads(line) for line in lines] if "--json" in args else json.loads(result.stdout)


def cells(driver: Any, selector: str, cell: str) -> dict[str, str]:
    """``data-*`` value -> text of ``cell`` for the rows matching ``selector``, in one script
    (the page redraws every 2 s)."""
    got: dict[str, str] = driver.execute_script("""
        const out = {};
        for (const tr of document.querySelectorAll(arguments[0])) {
          const td = tr.querySelector(arguments[1]);
          out[Object.values(tr.dataset)[0]] = td ? td.textContent : null;
        }
        return out;""", selector, cell)
    return got


@pytest.fixture
def cluster(zk: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    """The cluster of ``conftest.py``, its consoles sampling the lag every 0.2 s
    (``--console-sample-interval``), so a lag chart moves within the test."""
    c = Cluster(zk, tmp_path, extra_args=["--console-sample-interval", "0.2"]).start()
    yield c
    c.stop()


def test_every_node_serves_the_console(cluster: Cluster, connect: Callable[..., Any], browser: Any,  # noqa: F811
                                       tmp_path: Path) -> None:
    engine = connect()
    engine.create_stream("orders", partitions=2)
    producer = engine.producer("orders", partition=0)
    for i in range(4):
        producer.instant([json.dumps({"order": i}).encode()])
    consumer = engine.consumer("orders", name="billing", partitions=[0])
    consumer.get_transaction(0)
    consumer.checkpoint()

    def lag(node: Any) -> Any:
        status, body = node.http_get("/api/streams/orders/consumers/billing")
        return [(r["partition"], r["lag_transactions"]) for r in body["rows"]] if status == 200 else status

    for node in cluster.nodes:
        eventually(lambda node=node: lag(node) == [(0, 3), (1, 0)], 20, 0.05,
                   message=lambda node=node: f"{node.node_id}: {lag(node)}")
        assert node.http_get("/api/streams/orders/partitions/5/messages")[0] == 400
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/console/", timeout=5) as r:
            assert b"tstreams console" in r.read()

    holder = engine.producer("orders", partition=0, name="billing-loader")
    txn = holder.new_transaction(0)
    txn.send(b'{"open": true}')
    txn.flush()

    leader = cluster.leader()
    follower = cluster.followers(leader)[0]
    base = f"http://127.0.0.1:{follower.http_port}/console/"

    # the overview: the cluster as tstreams cluster status prints it, from a follower
    status = cli_json("cluster", "status", cluster.url)
    browser.get(base + "#/overview")

    def shown() -> dict[str, dict[str, str]] | None:
        rows: dict[str, dict[str, str]] = browser.execute_script("""
            const out = {};
            for (const tr of document.querySelectorAll("#cluster tbody tr")) {
              const t = c => tr.querySelector("." + c).textContent;
              out[tr.dataset.node] = {role: t("role"), epoch: t("epoch"), position: t("last_index"), lag: t("lag")};
            }
            return out;""")
        return rows if len(rows) == 3 and all(r["lag"] in ("0", "1", "2") for r in rows.values()) else None

    rows = eventually(shown, 30, 0.1, message=lambda: f"the cluster on the page: {shown()}")
    assert {n: (r["role"], r["epoch"]) for n, r in rows.items()} == \
        {n: (info["role"], str(info["epoch"])) for n, info in status["nodes"].items()}
    assert sorted(r["role"] for r in rows.values()) == ["follower", "follower", "leader"]
    assert rows[leader.node_id]["role"] == "leader"
    # log positions: at least what the CLI read a moment before (an idle leader appends clock ticks)
    assert all(int(rows[n]["position"]) >= info["last_index"] > 0 for n, info in status["nodes"].items())
    summary = browser.find_element("id", "cluster-summary").text
    assert summary == f"leader {leader.node_id}, epoch {status['epoch']}"
    shoot = DOCS if os.environ.get("TSTREAMS_UPDATE_DOCS") == "1" else tmp_path
    assert browser.save_screenshot(str(shoot / "console-cluster.png"))

    # the streams page: the follower's replicated figures equal the CLI's
    browser.get(base + "#/streams/orders")
    cli = {str(r["partition"]): str(r["transactions"])
           for r in cli_json("streams", "describe", "orders", "--connect", cluster.url, "--json")}
    eventually(lambda: cells(browser, "#partitions tbody tr", ".transactions") == cli, 20, 0.1,
               message=lambda: f"{cells(browser, '#partitions tbody tr', '.transactions')} != {cli}")

    # the partition browser pages through what a consumer reads
    reader = engine.consumer("orders", name="reader", partitions=[0])
    expected = {}
    while (t := reader.get_transaction(0)) is not None:
        expected[str(t.id)] = [json.loads(bytes(i)) for i in t.items]
    browser.get(base + "?format=json&limit=2#/streams/orders/partitions/0")
    seen: dict[str, list[Any]] = {}
    for _ in range(4):
        page = eventually(lambda: cells(browser, "#messages tbody tr", ".items") or None, 20, 0.1)
        seen.update({k: [json.loads(line) for line in v.splitlines()] for k, v in page.items()})
        if len(seen) == len(expected) or browser.find_element("id", "next").get_attribute("disabled"):
            break
        browser.find_element("id", "next").click()
        eventually(lambda shown=set(page): set(cells(browser, "#messages tbody tr", ".items")) != shown, 20, 0.1)
    assert seen == expected and len(seen) == 4

    # the consumer held back by the open transaction, until it is checkpointed
    browser.get(base + "#/consumers/orders/billing")
    eventually(lambda: cells(browser, "#consumer-rows tbody tr", ".lag_transactions") == {"0": "3", "1": "0"},
               20, 0.1)
    blocker = eventually(lambda: browser.execute_script(
        "const e = document.querySelector('[data-partition=\"0\"] .waits'); return e && e.textContent;"), 20, 0.1)
    assert blocker.startswith(f"txn {txn.id}, age ") and "expires in" in blocker
    assert blocker.endswith(", producer billing-loader")  # replicated to the follower with the Open
    txn.checkpoint()
    eventually(lambda: browser.execute_script("return document.querySelector('.waits') === null;"), 20, 0.1)
    eventually(lambda: cells(browser, "#consumer-rows tbody tr", ".lag_transactions") == {"0": "4", "1": "0"},
               20, 0.1)
    assert browser.find_element("id", "lag-chart").tag_name == "svg"
    holder.close()

    # the lists of consumers and of stream apps answer from a follower too
    browser.get(base + "#/consumers")
    eventually(lambda: cells(browser, "#consumers tbody tr", ".partitions") == {"orders/billing": "1"}, 20, 0.1)
    browser.get(base + "#/apps")
    assert "no application" in eventually(lambda: browser.execute_script(
        "const e = document.getElementById('no-apps'); return e && e.textContent;"), 20, 0.1)

    # the lag chart moves when the consumer falls behind (the follower samples every 0.2 s)
    def chart_last() -> int | None:
        value = browser.execute_script(
            "const e = document.getElementById('lag-chart'); return e && e.getAttribute('data-last-max');")
        return int(value) if value is not None else None

    browser.get(base + "#/consumers/orders/billing")
    assert eventually(lambda: chart_last() == 4, 20, 0.1, message=lambda: f"chart: {chart_last()}")  # 3 + 1
    for i in range(3):
        producer.instant([json.dumps({"order": 10 + i}).encode()])
    assert eventually(lambda: chart_last() == 7, 20, 0.1, message=lambda: f"chart: {chart_last()}")
    engine.close()
