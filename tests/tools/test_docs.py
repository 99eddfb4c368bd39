"""``docs/CLI.md`` is the help of the commands as they are."""

from __future__ import annotations

from tstreams_embedded import clidocs


def test_cli_reference_is_in_step_with_the_commands() -> None:
    assert clidocs.DOC.read_text(encoding="utf-8") == clidocs.render(), (
        "docs/CLI.md is out of step with the click commands: run python -m tstreams_embedded.clidocs")


def test_the_reference_covers_every_operator_command() -> None:
    text = clidocs.render()
    for command in ("tstreams streams describe", "tstreams consume", "tstreams produce", "tstreams consumers list",
                    "tstreams consumers describe", "tstreams consumers reset", "tstreams consumers delete",
                    "tstreams check"):
        assert f"## `{command}`" in text
        assert f"Usage: {command} [OPTIONS]" in text
