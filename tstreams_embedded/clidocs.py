"""``docs/CLI.md``: the help of every ``tstreams`` command, generated from click.

``python -m tstreams_embedded.clidocs`` rewrites ``docs/CLI.md`` (``--check`` only
compares, exit status 1 when it is out of step); ``tests/tools/test_docs.py`` fails when the
file differs from :func:`render`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

WIDTH = 100
DOC = Path(__file__).resolve().parents[1] / "docs" / "CLI.md"
HEADER = """\
# Command line reference

Every `tstreams` command with its `--help`. This file is generated from the click commands by
`python -m tstreams_embedded.clidocs` (`tests/tools/test_docs.py` fails when it is out of
step). How to operate a deployment with them: README, "Operating it".
"""


def render(root: click.Command | None = None) -> str:
    """The Markdown reference of ``root`` (``tstreams`` by default) and all its subcommands."""
    if root is None:
        from .cli import main

        root = main
    parts = [HEADER]

    def walk(cmd: click.Command, name: str, parent: click.Context | None) -> None:
        ctx = click.Context(cmd, info_name=name, parent=parent, terminal_width=WIDTH, max_content_width=WIDTH)
        parts.append(f"\n## `{ctx.command_path}`\n\n```text\n{cmd.get_help(ctx)}\n```\n")
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(ctx):
                command = cmd.get_command(ctx, sub)
                if command is not None and not command.hidden:
                    walk(command, sub, ctx)

    walk(root, "tstreams", None)
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in args:
        if DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is out of step with the commands: run python -m tstreams_embedded.clidocs",
                  file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
