"""Positions in a stream as operators write them: ``oldest``, ``newest``, a time, or an ID.

A time is ISO 8601 (``2026-11-23T13:45``, ``2026-11-23 13:45:10.5+01:00``, ``…Z``; without
a zone it is UTC) or relative to now (``-90s``, ``-15m``, ``-2h``, ``-1d``). A transaction ID is
a plain integer. :meth:`Position.offset` turns a position into the offset a consumer stores
(the ID of the last transaction passed), given the partition's :class:`Bounds`:

* ``oldest``: 0;
* ``newest``: the *stable* offset: after the last checkpointed transaction and before any
  transaction still open (like Kafka's last stable offset under read-committed);
* an ID: that transaction is the next one read (offset ``ID - 1``);
* a time T: everything checkpointed at or after T is read again, and so is everything opened
  at or after T. A transaction ID records when the transaction was *opened*, so the offset
  is ``txn_id_at(T) - 1``, stepped back to before the oldest transaction that was still open
  at T (opened before T, checkpointed at or after T or still open:
  :meth:`~tstreams_embedded.engine.protocol.backend.Backend.first_open_at`). Transactions opened
  before T and checkpointed after T are therefore read again, and so may be a few
  transactions checkpointed before T that follow them.

An offset past the stable offset is lowered to it (which changes nothing a consumer reads
when the position is in the past); a position in the future, or beyond an open transaction,
is reported as *clamped* to it, as ``kafka-consumer-groups --reset-offsets`` clamps a reset
past the log end: otherwise the consumer would skip everything written until then.

``consume --from TIME`` (``engine.consumer(start=time)``) is simpler: it reads the
transactions *opened* at or after T.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from .. import errors
from ..engine.api.consumer import Start
from ..engine.protocol.backend import Backend, PartitionInfo
from ..ids import ID_MULTIPLIER, MAX_ID, txn_id_at

_RELATIVE = re.compile(r"^-([0-9]+(?:\.[0-9]+)?)([smhd])$")
_DIGITS = re.compile(r"^[0-9]+$")
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

    def wanted(self, backend: Backend, stream: str, partition: int, stable: int) -> int:
        """The offset (last transaction passed) that makes a consumer start here, before
        clamping to ``stable``."""
        if self.kind == "oldest":
            return 0
        if self.kind == "newest":
            return stable
        if self.kind == "time":
            assert self.time is not None
            at = txn_id_at(self.time)
            offset = at - 1
            if at <= stable + 1:  # a time in the future has nothing open at it yet
                opened = backend.first_open_at(stream, partition, at // ID_MULTIPLIER)
                if opened:
                    offset = min(offset, opened - 1)
            return max(offset, 0)
        return max(self.txn_id - 1, 0)


def skips_ahead(offset: int, p: PartitionInfo, now_ms: int) -> bool:
    """Whether a consumer at ``offset`` would skip what is not readable yet: a transaction
    still open, or transactions not written yet (an offset in the future)."""
    if offset <= stable_offset(p):
        return False
    return offset >= now_ms * ID_MULTIPLIER or bool(p.open_count and p.open and offset >= p.open[0].id)


def stable_offset(p: PartitionInfo) -> int:
    """The partition's stable offset: after its last allocated transaction, or before its
    oldest open transaction if one is open (Kafka's last stable offset)."""
    if p.open_count and p.open:
        return min(p.last_id, p.open[0].id - 1)
    return p.last_id


def parse_position(text: str, now: dt.datetime | None = None) -> Position:
    """Parse ``text``; :class:`~tstreams_embedded.errors.InvalidArgument` names what is wrong."""
    value = text.strip()
    if value in ("oldest", "newest"):
        return Position(value, value)
    if _DIGITS.match(value):
        txn_id = int(value)
        if txn_id > MAX_ID:
            raise errors.InvalidArgument(f"transaction ID {value} is above the largest ID {MAX_ID}")
        return Position("id", value, txn_id=txn_id)
    m = _RELATIVE.match(value)
    if m:
        now = now or dt.datetime.now(dt.timezone.utc)
        try:
            when = now - dt.timedelta(seconds=float(m.group(1)) * _UNIT_SECONDS[m.group(2)])
        except OverflowError:
            raise errors.InvalidArgument(f"{text!r} is too far in the past: a time must be after "
                                         "1970-01-01T00:00:00Z") from None
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
