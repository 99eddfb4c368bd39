"""Tables for people (rich) or JSON lines for programs (``--json``), and how times and
durations are shown."""

from __future__ import annotations

import datetime as dt
import io
import os
import shutil
import sys
from collections.abc import Sequence
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table

from ..ids import txn_millis
from .formats import to_json

Column = tuple[str, str]
"""``(key in the row, column heading)``."""


class OutputFailed(click.ClickException):
    """Standard output could not be written (a full disk, an I/O error): one line on stderr,
    exit status 1."""

    exit_code = 1


def silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so that nothing more (not even the flush at
    exit) fails on an output that went away."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def output_failed(exc: OSError) -> OutputFailed:
    """The error to raise when writing standard output failed with ``exc``."""
    silence_stdout()
    return OutputFailed(f"cannot write the output: {exc.strerror or exc}")


def emit(text: str) -> None:
    """Write ``text`` to standard output and flush it; a failed write (other than a reader
    that went away) raises :class:`OutputFailed`."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise output_failed(exc) from None


class Output:
    """Writes rows to stdout as a table, or as one JSON object per line with ``as_json``."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self._tty = sys.stdout.isatty()

    def table(self, rows: Sequence[dict[str, Any]], columns: Sequence[Column], title: str | None = None) -> None:
        """The rows (every key in JSON; the ``columns`` in a table)."""
        if self.as_json:
            for row in rows:
                self.json(row)
            return
        table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False)
        for _, heading in columns:
            table.add_column(heading, no_wrap=not self._tty)
        for row in rows:
            table.add_row(*(show(row.get(key)) for key, _ in columns))
        rendered = io.StringIO()  # rendered first, then written with emit (a failed write is one line)
        width = shutil.get_terminal_size().columns if self._tty else 1000
        Console(file=rendered, width=width, highlight=False, emoji=False, soft_wrap=False).print(table)
        emit("".join(line.rstrip() + "\n" for line in rendered.getvalue().splitlines()))

    def json(self, obj: Any) -> None:
        emit(to_json(obj) + "\n")

    def text(self, line: str) -> None:
        """A line of text (tables mode only)."""
        if not self.as_json:
            emit(line + "\n")


def show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def id_time(txn_id: int) -> str | None:
    """The UTC time a transaction ID encodes, ISO 8601 to the millisecond (None for 0)."""
    if not txn_id:
        return None
    return ms_time(txn_millis(txn_id))


def ms_time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def duration(ms: int | None) -> str | None:
    """``ms`` as ``950ms``, ``12.3s``, ``4m05s``, ``2h03m`` or ``3d04h``."""
    if ms is None:
        return None
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    s = ms / 1000
    if s < 60:
        return f"{sign}{s:.1f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{sign}{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{sign}{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{sign}{d}d{h:02d}h"


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return f"{n} TiB"
