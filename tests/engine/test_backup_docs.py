"""docs/BACKUP.md: every ``python`` block runs (``path`` an empty data directory, ``tmp`` a scratch one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = (Path(__file__).resolve().parents[2] / "docs" / "BACKUP.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)


def test_the_page_has_examples_and_links_from_the_readme() -> None:
    assert len(BLOCKS) >= 2
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "docs/BACKUP.md" in readme


@pytest.mark.parametrize("block", range(len(BLOCKS)))
def test_example_runs(block: int, tmp_path: Path) -> None:
    env = {"path": str(tmp_path / "data"), "tmp": str(tmp_path)}
    exec(compile(BLOCKS[block], f"docs/BACKUP.md block {block + 1}", "exec"), env)
