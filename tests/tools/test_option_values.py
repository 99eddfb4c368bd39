"""Option values that once hung a command or ended in a traceback: each is one line and a
non-zero exit status now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tstreams_embedded.cli import main
from tstreams_embedded.testing import free_port
from tstreams_embedded.tools.params import FiniteFloat


def _float_options(cmd: click.Command, path: str) -> list[tuple[str, click.Parameter]]:
    found = [(f"{path} {p.name}", p) for p in cmd.params
             if isinstance(p.type, (click.types.FloatParamType, click.FloatRange))]
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            found += _float_options(sub, f"{path} {name}")
    return found


def test_every_float_option_is_a_finite_float_with_an_upper_bound() -> None:
    options = _float_options(main, "tstreams")
    assert {name for name, _ in options} >= {"tstreams consume timeout", "tstreams cluster init compaction_interval",
                                              "tstreams serve session_timeout", "tstreams demo produce_seconds"}
    for name, option in options:
        assert isinstance(option.type, FiniteFloat) and option.type.max is not None, name


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e308"])
def test_a_timeout_that_is_not_a_finite_number_of_seconds_is_refused_at_once(value: str) -> None:
    """These made the command wait forever for a server that does not exist."""
    argv = [sys.executable, "-m", "tstreams_embedded.cli", "streams", "list",
            "--connect", f"tcp://127.0.0.1:{free_port()}", "--timeout", value]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("Error: Invalid value for '--timeout'") and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("args", [
    ["cluster", "init", "zk://127.0.0.1:1/x", "--nodes", "3", "--compaction-interval", "nan"],
    ["demo", "--produce-seconds", "inf"],
    ["demo", "--kill-at", "nan"],
])
def test_other_float_options_refuse_what_is_not_finite(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert "is not a finite number" in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_an_unknown_log_level_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    data = tmp_path / "new"
    result = CliRunner().invoke(main, ["serve", "--data", str(data), "--log-level", "NOPE"])
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert result.stderr.startswith("Error: Invalid value for '--log-level': 'NOPE' is not one of")
    assert result.stderr.count("\n") == 1 and not data.exists()


def test_keys_in_a_directory_that_cannot_be_made_is_one_line() -> None:
    result = CliRunner().invoke(main, ["keys", "generate", "/proc/x"])
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert result.stderr.startswith("Error: cannot write keys in '/proc/x': ") and result.stderr.count("\n") == 1
