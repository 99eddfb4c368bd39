"""``python -m benchmarks`` argument handling (no benchmark runs: the plans are empty)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from benchmarks.cli import bench


def test_a_missing_workdir_is_created(tmp_path: Path) -> None:
    workdir, out = tmp_path / "missing" / "work", tmp_path / "out"
    # the engine suite has no pathway variant: an empty plan, which still sets up its workdir
    result = CliRunner().invoke(bench, ["--suite", "engine", "--system", "pathway", "--reps", "1", "--no-plots",
                                        "--workdir", str(workdir), "--out", str(out)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert workdir.is_dir() and json.loads((out / "engine.json").read_text())["suite"] == "engine"


def test_a_workdir_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(bench, ["--suite", "engine", "--system", "pathway", "--reps", "1", "--no-plots",
                                        "--workdir", "/proc/no/such", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, (result.output, result.exception)
    assert result.stderr.startswith("Error: cannot create --workdir '/proc/no/such': ")
    assert result.stderr.count("\n") == 1
