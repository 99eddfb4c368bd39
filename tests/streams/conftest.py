"""Fixtures of the streams tests, on top of the ``tstreams_embedded.testing`` plugin (loaded by
``tests/conftest.py``).

* ``shared_engine``: one engine per test module and backend (embedded, and served by one
  ``tstreams serve`` child process), for the many cases of a test that only refuses bad input
  and checks that nothing was written: each case would otherwise start a server of its own.
  A case that wrongly writes fails its own check.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tstreams_embedded as ts
from tstreams_embedded.testing.backends import BACKENDS, engine_on


@pytest.fixture(scope="module", params=BACKENDS)
def shared_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ts.Engine]:
    with engine_on(request.param, tmp_path_factory.mktemp(f"shared-{request.param}"), durability="sync") as engine:
        yield engine
