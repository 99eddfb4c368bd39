"""Every Python example of docs/STREAMS.md runs as written (each asserts its own results)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "STREAMS.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType(f"streams_doc_{index}")  # a real module: dataclasses look theirs up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(BLOCKS[index], f"{DOC.name}[example {index + 1}]", "exec"), module.__dict__)
