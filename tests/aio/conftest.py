"""Fixtures of the asyncio API tests: ``open_async`` opens an :class:`~tstreams_embedded.aio.AsyncEngine`
on each backend, embedded (``aio.open``) and remote (``aio.connect`` to a real ``tstreams
serve`` subprocess, :class:`~tstreams_embedded.testing.ServeProcess`), so that one test body
runs against both. Tests drive their coroutines with ``asyncio.run``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tstreams_embedded import aio
from tstreams_embedded.testing import ServeProcess

BACKENDS = ("embedded", "remote")

OpenAsync = Callable[[], Awaitable[aio.AsyncEngine]]


@pytest.fixture(params=BACKENDS)
def open_async(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenAsync]:
    """``await open_async()`` -> an async handle on this test's backend (one data directory per test)."""
    data = tmp_path / "data"
    data.mkdir()
    if request.param == "embedded":
        async def embedded() -> aio.AsyncEngine:
            return await aio.open(data, compaction_interval=None)

        yield embedded
        return
    with ServeProcess(data, tmp_path, durability="sync") as server:
        async def remote() -> aio.AsyncEngine:
            return await aio.connect(server.endpoint, timeout=20.0)

        yield remote
