"""The README documents every fixture of the pytest plugin, with what it gives the test, and
how ``--tstreams-backend=embedded`` skips the served run (#19 item 29)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from tstreams_embedded.testing import pytest_plugin

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def fixture_names() -> list[str]:
    """The plugin's fixtures (pytest marks them: ``_fixture_function_marker`` in pytest 8.4+,
    ``_pytestfixturefunction`` before)."""
    return sorted(name for name, obj in inspect.getmembers(pytest_plugin)
                  if hasattr(obj, "_fixture_function_marker") or hasattr(obj, "_pytestfixturefunction"))


def test_every_fixture_has_a_row_in_the_readme() -> None:
    names = fixture_names()
    assert "tstreams_engine" in names and "zookeeper" in names
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)`(?: \(session\))? \| (.+) \|$", README, re.M)}
    for name in names:
        assert name in rows, f"README: no row for the fixture {name}"
    assert "make(path=None, **options) -> Engine" in rows["tstreams_make_engine"]
    assert "make(data=None, **options) -> ServeProcess" in rows["tstreams_make_server"]
    assert "--tstreams-backend=embedded" in rows["tstreams_engine"] and "skipped" in rows["tstreams_engine"]
