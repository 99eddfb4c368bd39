"""Positions in a stream as operators write them: ``oldest``, ``newest``, a time, or an ID.

A time is ISO 8601 (``2026-11-23T13:45``, ``2026-11-23 13:45:10.5+01:00``, ``…Z``; without
a zone it is UTC) or relative to now (``-90s``, ``-15m``, ``-2h``, ``-1d``). A transaction ID is
a plain integer. :meth:`Position.offset` turns a position into the offset a consumer stores
(the ID of the last transaction passed), with the same rules as ``engine.consumer(start=…)``:
a time starts at the first transaction at or after it (offset ``ts.txn_id_at(time) - 1``), an
ID starts at that transaction.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from .. import errors
from ..engine.backend import Backend
from ..engine.consumer import Start
from ..ids import MAX_ID, txn_id_at

_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Position:
    """A parsed position: ``kind`` is ``oldest``, ``newest``, ``time`` or ``id``."""

    kind: str
    text: str
    time: dt.datetime | None = None
    txn_id: int = 0

    @property
    def start(self) -> Start:
        """The ``start`` argument of ``engine.consumer`` for this position."""
        if self.kind == "time":
            assert self.time is not None
            return self.time
        if self.kind == "id":
            return self.txn_id
        return self.kind

    def offset(self, backend: Backend, stream: str, partition: int) -> int:
        """The offset (last transaction passed) that makes a consumer start here."""
        if self.kind == "oldest":
            return 0
        if self.kind == "newest":
            return backend.last_txn_id(stream, partition)
        if self.kind == "time":
            assert self.time is not None
            return max(txn_id_at(self.time) - 1, 0)
        return max(self.txn_id - 1, 0)


def parse_position(text: str, now: dt.datetime | None = None) -> Position:
    """Parse ``text``; :class:`~tstreams_embedded.errors.InvalidArgument` names what is wrong."""
    value = text.strip()
    if value in ("oldest", "newest"):
        return Position(value, value)
    if value.isdigit():
        txn_id = int(value)
        if txn_id > MAX_ID:
            raise errors.InvalidArgument(f"transaction ID {value} is above the largest ID {MAX_ID}")
        return Position("id", value, txn_id=txn_id)
    m = _RELATIVE.match(value)
    if m:
        now = now or dt.datetime.now(dt.timezone.utc)
        when = now - dt.timedelta(seconds=float(m.group(1)) * _UNIT_SECONDS[m.group(2)])
    else:
        try:
            when = dt.datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value)
        except ValueError:
            raise errors.InvalidArgument(
                f"{text!r} is not a position: expected oldest, newest, a transaction ID, an ISO 8601 time "
                "(2026-11-23T13:45:00, UTC unless it has a zone) or a relative time (-15m, -2h, -1d)"
            ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    txn_id_at(when)  # InvalidArgument outside what IDs can encode
    return Position("time", text, time=when)


if TYPE_CHECKING:
    _ParamType = click.ParamType[Position, Any]  # generic in click's type hints (8.2+)
else:
    _ParamType = click.ParamType


class PositionType(_ParamType):
    """A click parameter holding a :class:`Position`."""

    name = "oldest|newest|TIME|ID"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Position:
        if isinstance(value, Position):
            return value
        try:
            return parse_position(str(value))
        except errors.InvalidArgument as exc:
            self.fail(str(exc), param, ctx)
