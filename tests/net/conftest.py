"""Fixtures of the network tests: real ``tstreams serve`` subprocesses on 127.0.0.1
(:class:`tstreams_embedded.testing.ServeProcess`, stopped by PID at teardown)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tstreams_embedded.testing import ServeProcess


@pytest.fixture
def make_server(tstreams_make_server: Callable[..., ServeProcess]) -> Callable[..., ServeProcess]:
    """``make_server(data=None, **ServeProcess options)`` -> a running server."""
    return tstreams_make_server


@pytest.fixture
def server(tstreams_server: ServeProcess) -> ServeProcess:
    return tstreams_server


@pytest.fixture
def remote(server: ServeProcess) -> Iterator[Any]:
    """An engine connected to ``server``."""
    e = server.connect(timeout=20.0)
    yield e
    e.close()
