"""The cluster status page (``/`` on ``--http``) in headless Chromium, on a real 3-node
cluster: it shows every node with its role, the followers' lag (a SIGSTOPped follower falls
behind, then catches up), the streams with their consumer lag, and a stream-processing App
running against the cluster with its member, its tasks and its input lag. The screenshot taken
while the follower lags is ``docs/cluster-status.png`` (README, docs/CLUSTER.md).

Needs Debian's ``chromium`` and ``chromium-driver`` (``make test`` installs them) and
selenium. Without them the test is skipped, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tstreams_embedded.streams import App, StreamsBuilder
from tstreams_embedded.testing import eventually

from .conftest import Cluster

pytestmark = pytest.mark.timeout(180)

DOC_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "cluster-status.png"


@pytest.fixture
def screenshot(tmp_path: Path) -> Path:
    """Where the screenshot goes: ``docs/cluster-status.png`` when ``TSTREAMS_UPDATE_DOCS=1``
    (to refresh the picture in the docs), else a temporary file (a test run leaves the
    working tree clean)."""
    return DOC_SCREENSHOT if os.environ.get("TSTREAMS_UPDATE_DOCS") == "1" else tmp_path / "cluster-status.png"


@pytest.fixture
def browser() -> Iterator[Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        webdriver = None  # type: ignore[assignment]
    missing = [what for what, ok in (("chromium", chromium), ("chromedriver (chromium-driver)", driver_path),
                                     ("selenium", webdriver)) if not ok]
    if missing:
        reason = f"{', '.join(missing)} not installed (make test installs them: make system-deps)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: the browser test must run, but {reason}")
        pytest.skip(reason)
    options = Options()
    options.binary_location = chromium  # type: ignore[assignment]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1000,1000", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def node_rows(driver: Any) -> dict[str, dict[str, str]]:
    """The page's nodes table: node id -> {role, lag}, read in one script (the page redraws
    every second, so elements found one by one could go stale in between)."""
    rows: dict[str, dict[str, str]] = driver.execute_script("""
        const out = {};
        for (const tr of document.querySelectorAll("#nodes tbody tr")) {
          out[tr.dataset.node] = {role: tr.querySelector(".role").textContent,
                                  lag: tr.querySelector(".lag").textContent};
        }
        return out;""")
    return rows


def consumer_lags(driver: Any, stream: str) -> list[str]:
    lags: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(td => td.textContent);",
        f'[data-stream="{stream}"] .consumer-lag')
    return lags


def app_panel(driver: Any, app: str) -> dict[str, Any] | None:
    """The applications panel's entry of ``app``: its members' (state, tasks) and its input
    lag by ``stream/partition`` (None while the page does not show it)."""
    panel: dict[str, Any] | None = driver.execute_script("""
        const box = document.querySelector(`#apps [data-app="${arguments[0]}"]`);
        if (!box) return null;
        const members = Array.from(box.querySelectorAll("tr[data-member]")).map(tr =>
          [tr.querySelector(".member-state").textContent, tr.querySelector(".member-tasks").textContent]);
        const lag = {};
        for (const tr of box.querySelectorAll(".app-lag tbody tr")) {
          lag[tr.dataset.stream + "/" + tr.dataset.partition] = tr.querySelector(".input-lag").textContent;
        }
        return {members: members, lag: lag, title: box.querySelector("h3").textContent};""", app)
    return panel


def order_sizes() -> Any:
    b = StreamsBuilder()
    b.stream("orders", value_serde="bytes").map_values(len).to("order-sizes", value_serde="json")
    return b.build()


def test_status_page_shows_roles_and_lag(cluster: Cluster, connect: Callable[..., Any], browser: Any,
                                         screenshot: Path) -> None:
    leader = cluster.leader()
    follower = cluster.followers(leader)[-1]
    engine = connect()
    engine.create_stream("orders", partitions=2, description="demo")
    for p in (0, 1):
        producer = engine.producer("orders", partition=p)
        for i in range(4):
            producer.instant([f"order-{p}-{i}".encode()])
    consumer = engine.consumer("orders", name="billing", start="oldest", partitions=[0])
    consumer.get_transaction(0)
    consumer.checkpoint()

    browser.get(f"http://127.0.0.1:{leader.http_port}/")

    def roles_shown() -> dict[str, dict[str, str]] | None:
        rows = node_rows(browser)
        roles = sorted(r["role"] for r in rows.values())
        if roles != ["follower", "follower", "leader"] or not all(r["lag"] == "0" for r in rows.values()):
            return None
        return rows

    rows = eventually(roles_shown, 30, 0.1, message=lambda: f"roles and lag on the page: {node_rows(browser)}")
    assert rows[leader.node_id]["role"] == "leader"
    assert eventually(lambda: consumer_lags(browser, "orders") == ["3"], 20, 0.1,
                      message=lambda: f"consumer lag on the page: {consumer_lags(browser, 'orders')}")

    # a stream-processing app against the cluster: the applications panel shows its member
    # holding both tasks, and its lag on both input partitions falling to 0
    app = App(engine, application_id="order-sizes", topology=order_sizes(), instance_name="sizer")
    app.start()
    caught_up = {"members": [["live", "0, 1"]], "lag": {"orders/0": "0", "orders/1": "0"}}

    def app_shown() -> dict[str, Any] | None:
        panel = app_panel(browser, "order-sizes")
        return panel if panel and {k: panel[k] for k in caught_up} == caught_up else None

    try:
        panel = eventually(app_shown, 30, 0.1,
                           message=lambda: f"the app on the page: {app_panel(browser, 'order-sizes')}")
        assert panel["title"].startswith("order-sizes — 1 live member")

        # a paused follower falls behind: the leader's page shows its lag growing
        follower.pause()
        try:
            writer = engine.producer("orders", partition=1)
            for i in range(12):
                writer.instant([f"late-{i}".encode()])  # the leader and the other follower are a quorum

            def lagging() -> int | None:
                lag = node_rows(browser).get(follower.node_id, {}).get("lag", "")
                return int(lag) if lag.isdigit() and int(lag) >= 12 else None

            eventually(lagging, 20, 0.1, message=lambda: f"the paused follower's lag: {node_rows(browser)}")
            eventually(app_shown, 30, 0.1, message=lambda: f"the app kept up: {app_panel(browser, 'order-sizes')}")
            screenshot.parent.mkdir(exist_ok=True)
            assert browser.save_screenshot(str(screenshot))
        finally:
            follower.resume()
        assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        # resumed, it catches up: back to follower with lag 0
        eventually(roles_shown, 40, 0.1, message=lambda: f"the follower caught up on the page: {node_rows(browser)}")
    finally:
        app.close()

    # the app left its group: its member is gone and its tasks unassigned
    def app_gone() -> dict[str, Any] | None:
        panel = app_panel(browser, "order-sizes")
        return panel if panel and panel["members"] == [["gone", "–"]] else None

    gone = eventually(app_gone, 30, 0.1, message=lambda: f"the app after close: {app_panel(browser, 'order-sizes')}")
    assert "unassigned tasks 0, 1" in gone["title"]
    engine.close()
