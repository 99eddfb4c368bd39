"""Tables for people (rich) or JSON lines for programs (``--json``), and how times and
durations are shown."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from ..ids import txn_millis
from .formats import to_json

Column = tuple[str, str]
"""``(key in the row, column heading)``."""


class Output:
    """Writes rows to stdout as a table, or as one JSON object per line with ``as_json``."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        tty = sys.stdout.isatty()
        self._console = Console(file=sys.stdout, width=None if tty else 1000, highlight=False,
                                emoji=False, soft_wrap=False)

    def table(self, rows: Sequence[dict[str, Any]], columns: Sequence[Column], title: str | None = None) -> None:
        """The rows (every key in JSON; the ``columns`` in a table)."""
        if self.as_json:
            for row in rows:
                self.json(row)
            return
        table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False)
        for _, heading in columns:
            table.add_column(heading, no_wrap=not sys.stdout.isatty())
        for row in rows:
            table.add_row(*(show(row.get(key)) for key, _ in columns))
        if self._console.is_terminal:
            self._console.print(table)
            return
        with self._console.capture() as captured:  # into a pipe or a file: no trailing blanks
            self._console.print(table)
        sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))

    def json(self, obj: Any) -> None:
        sys.stdout.write(to_json(obj) + "\n")

    def text(self, line: str) -> None:
        """A line of text (tables mode only)."""
        if not self.as_json:
            self._console.print(line, markup=False)


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
