"""A console on a real process, over a served or an embedded data directory, with traffic.

``served``: ``tstreams serve --http`` (:class:`ServeProcess`), the test's engine connected
to it. ``embedded``: the test's engine opens the directory (``ts.open``) and ``tstreams
console --data`` runs beside it in a child process, as beside a running application.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tstreams_embedded as ts
from tstreams_embedded.cli import main
from tstreams_embedded.testing import ServeProcess, eventually, free_port

#: seconds between the console's lag samples in these tests
SAMPLE_INTERVAL = 0.2


@dataclass
class Console:
    kind: str
    data: Path
    engine: ts.Engine
    port: int
    target: list[str]
    token: str | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, Any]:
        """``(status, content type, JSON body)`` of ``GET path``."""
        all_headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        all_headers.update(headers or {})
        req = urllib.request.Request(self.base + path, headers=all_headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.headers["Content-Type"], json.loads(r.read())
        except urllib.error.HTTPError as exc:
            body = exc.read()
            return exc.code, exc.headers["Content-Type"], json.loads(body) if body.startswith(b"{") else body

    def api(self, path: str) -> Any:
        status, _, body = self.get("/api/" + path)
        assert status == 200, (path, status, body)
        return body

    def cli_json(self, *args: str) -> list[Any]:
        """The JSON lines of ``tstreams ARGS --json`` on the same directory or server."""
        result = CliRunner().invoke(main, [*args, *self.target, "--json"], catch_exceptions=True)
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        return [json.loads(line) for line in result.stdout.splitlines()]


def wait_http(port: int) -> None:
    def up() -> bool:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/overview", timeout=2).close()
        except urllib.error.HTTPError:
            return True  # answering (e.g. 401)
        except OSError:
            return False
        return True

    eventually(up, timeout=30, interval=0.05)


def console_process(data: Path, port: int, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tstreams_embedded.cli", "console", "--data", str(data),
                             "--http", f"127.0.0.1:{port}", "--sample-interval", str(SAMPLE_INTERVAL), *extra],
                            stdout=subprocess.DEVNULL, stderr=log.open("wb"))


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.fixture(params=["served", "embedded"])
def console(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Console]:
    port = free_port()
    data = tmp_path / "data"
    if request.param == "served":
        args = ["--http", f"127.0.0.1:{port}", "--console-sample-interval", str(SAMPLE_INTERVAL)]
        with ServeProcess(data, tmp_path, extra_args=args) as server:
            engine = server.connect(timeout=10)
            wait_http(port)
            try:
                yield Console("served", data, engine, port, ["--connect", server.endpoint])
            finally:
                engine.close()
        return
    data.mkdir()
    with ts.open(data, compaction_interval=None) as engine:
        proc = console_process(data, port, tmp_path / "console.log")
        try:
            wait_http(port)
            yield Console("embedded", data, engine, port, ["--data", str(data)])
        finally:
            stop(proc)


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Debian chromium through chromium-driver (as tests/cluster/test_status_page.py);
    skipped without them, except under ``CI=true``, where it fails."""
    import os
    import shutil

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
                "--window-size=1200,1000", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
