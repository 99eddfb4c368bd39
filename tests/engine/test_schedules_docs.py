"""Every Python example of docs/SCHEDULES.md runs as written (each asserts its own results)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "SCHEDULES.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"{DOC.name}[example {index + 1}]", "exec"), {"__name__": "example"})  # noqa: S102
