"""Every Python example of docs/STREAMS.md runs as written (each asserts its own results),
and so does the README's stream-processing example (checked by what it prints)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "STREAMS.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
README = ROOT / "README.md"


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 8


def run_block(code: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType(name)  # a real module: dataclasses look theirs up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, name, "exec"), module.__dict__)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_block(BLOCKS[index], f"{DOC.name}[example {index + 1}]", monkeypatch)


def readme_streams_example() -> str:
    """The first Python block of the README's "Stream processing" section, as written."""
    section = README.read_text().split("\n## Stream processing\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "README: no Python example under 'Stream processing'"
    return found.group(1)


def test_the_readme_streams_example_runs_in_a_fresh_directory_and_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code = readme_streams_example()
    monkeypatch.chdir(tmp_path)  # it opens "data/": a fresh directory
    comment = [line.strip().lstrip("# ") for line in code.splitlines() if line.strip().startswith("# [")]
    assert len(comment) == 1, "the example shows what it prints in a comment"
    run_block(code, "README.md[stream processing]", monkeypatch)
    assert capsys.readouterr().out.strip() == comment[0]  # prints what the README says it prints
    run_block(code, "README.md[stream processing, again]", monkeypatch)  # the same directory: the input again
    # [0, 5 min) closed at 5 min 10 s of stream time (400_000 ms in the first run): its records are late now
    assert capsys.readouterr().out.strip() == ("[(Windowed(key='/a', start=0, end=300000), 2), "
                                               "(Windowed(key='/a', start=300000, end=600000), 2)]")
