"""Every Python example of docs/STREAMS.md runs as written (each asserts its own results),
and so does the README's stream-processing example (checked by what it prints)."""

from __future__ import annotations

import os
import re
import subprocess
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


def test_the_quick_starts_of_the_readme_and_of_streams_md_are_the_same() -> None:
    quick_start = DOC.read_text().split("\n## Quick start\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", quick_start, re.S)
    assert found is not None, "STREAMS.md: no Python example under 'Quick start'"
    assert found.group(1) == readme_streams_example()


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


def test_the_one_page_path_runs_as_written(tmp_path: Path) -> None:
    """STREAMS.md's one-page path: its app file and its shell commands (a real SIGKILL of the
    running app, a restart, the CLI) in a fresh directory; step 5 prints what the page says."""
    page = DOC.read_text().split("\n## One page: produce, run, kill, restart, read, inspect\n", 1)[1]
    page = page.split("\n## ", 1)[0]
    app = re.search(r"```python\n(.*?)```", page, re.S)
    commands = re.search(r"```sh\n(.*?)```", page, re.S)
    printed = re.search(r"Step 5 prints `(.*?)`", page)
    assert app is not None and commands is not None and printed is not None
    (tmp_path / "shop.py").write_text(app.group(1))
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    done = subprocess.run(["bash", "-e", "-c", commands.group(1)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert printed.group(1) in done.stdout.splitlines()
    assert "shop-by-customer-repartition" in done.stdout
    assert done.stdout.count('"key":"ann","value":8,') == 1  # the last update of "ann", read by the CLI


def test_the_page_links_only_to_its_own_headings() -> None:
    """Every ``](#anchor)`` of STREAMS.md names one of its headings (GitHub's anchors)."""
    text = DOC.read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#{1,4} (.+)$", text, re.M)}
    links = set(re.findall(r"\]\(#([a-z0-9-]+)\)", text))
    assert links and links <= anchors, sorted(links - anchors)
