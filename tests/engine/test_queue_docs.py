"""docs/QUEUES.md: every ``python`` block runs (with ``path`` set to an empty data directory)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = (Path(__file__).resolve().parents[2] / "docs" / "QUEUES.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)


def test_the_page_has_examples_and_links_from_the_readme() -> None:
    assert len(BLOCKS) >= 3
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "docs/QUEUES.md" in readme


@pytest.mark.parametrize("block", range(len(BLOCKS)))
def test_example_runs(block: int, tmp_path: Path) -> None:
    exec(compile(BLOCKS[block], f"docs/QUEUES.md block {block + 1}", "exec"), {"path": str(tmp_path / "data")})
