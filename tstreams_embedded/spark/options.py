"""Parsing and validating the options of the ``tstreams`` Spark data source.

Every problem raises :class:`~tstreams_embedded.errors.InvalidArgument` (or a more specific
error from :mod:`tstreams_embedded.errors`) whose message names the offending option, so a
user reading a Spark stack trace sees which ``.option(...)`` to fix.

Offsets follow the engine's consumer convention: an offset is the ID of the *last
transaction already processed* in a partition (0 = nothing processed). A read therefore
covers the transactions ``start < id <= end`` of each partition.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgument
from .decoding import DEFAULT_CORRUPT_COLUMN, MODES, Decoding
from .rows import COLUMNS

VALUE_FORMATS = ("binary", "string", "json", "msgpack")
#: the longest option 'timeout' (a day)
MAX_TIMEOUT = 86_400.0

#: Options understood by the source, lower case (Spark passes option keys case-insensitively).
KNOWN = {
    "path", "endpoint", "stream", "partitions", "startingoffsets", "endingoffsets",
    "maxrowspertrigger", "valueformat", "rowspersplit", "txnsize", "stagingttl", "producerid",
    "sinkid", "checkpointlocation", "queryname", "timeout", "mode", "columnnameofcorruptrecord",
}

#: A position spec for one partition: "oldest", "newest", ("time", txn_id_floor) or an int offset.
PositionSpec = Any


@dataclass(frozen=True)
class Target:
    """Where the data lives: exactly one of ``path`` (embedded directory) or ``endpoint``."""

    path: str | None
    endpoint: str | None
    stream: str
    timeout: float = 30.0

    def describe(self) -> str:
        where = f"path {self.path!r}" if self.path else f"endpoint {self.endpoint!r}"
        return f"stream {self.stream!r} at {where}"


@dataclass(frozen=True)
class ReadOptions:
    target: Target
    partitions: tuple[int, ...] | None
    starting: dict[str, PositionSpec] = field(default_factory=dict)  # "*" = default for all
    ending: dict[str, PositionSpec] = field(default_factory=dict)
    max_rows_per_trigger: int | None = None
    value_format: str = "binary"
    rows_per_split: int = 500_000
    mode: str = "failfast"
    corrupt_column: str = DEFAULT_CORRUPT_COLUMN

    @property
    def decoding(self) -> Decoding:
        """How the read decodes values (``valueFormat``, ``mode``)."""
        return Decoding(self.value_format, self.mode, self.corrupt_column)


@dataclass(frozen=True)
class WriteOptions:
    target: Target
    txn_size: int = 10_000
    staging_ttl_ms: int = 600_000
    producer_id: str | None = None


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name.lower()) if hasattr(options, "get") else None
    if value is None:
        value = options.get(name) if hasattr(options, "get") else None
    if value is None:
        return None
    value = str(value).strip()
    return value or None


def _positive_int(options: Mapping[str, str], name: str, default: int | None, hi: int = 2**31 - 1) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(f"option {name!r} must be a positive integer, got {raw!r}") from None
    if not 1 <= value <= hi:
        raise InvalidArgument(f"option {name!r} must be between 1 and {hi}, got {value}")
    return value


def parse_target(options: Mapping[str, str]) -> Target:
    """The ``path``/``endpoint``/``stream`` options (shared by reads and writes)."""
    path = _get(options, "path")
    endpoint = _get(options, "endpoint")
    if (path is None) == (endpoint is None):
        raise InvalidArgument(
            "give exactly one of the options 'path' (an embedded engine directory) or "
            "'endpoint' (tcp://host:port of a `tstreams serve`)"
        )
    if endpoint is not None and "://" not in endpoint:
        raise InvalidArgument(f"option 'endpoint' must look like tcp://host:port, got {endpoint!r}")
    if path is not None:
        if path.startswith("file://"):
            path = path[len("file://"):]
        path = os.path.abspath(os.path.expanduser(path))
    stream = _get(options, "stream")
    if stream is None:
        raise InvalidArgument("option 'stream' is required (the name of the T-stream to read or write)")
    timeout_raw = _get(options, "timeout")
    timeout = 30.0
    if timeout_raw is not None:
        try:
            timeout = float(timeout_raw)
        except ValueError:
            raise InvalidArgument(f"option 'timeout' must be a number of seconds, got {timeout_raw!r}") from None
        if not 0 < timeout <= MAX_TIMEOUT:  # also refuses nan; inf or 1e308 would wait forever
            raise InvalidArgument(f"option 'timeout' must be a number of seconds in (0, {MAX_TIMEOUT:.0f}], "
                                  f"got {timeout_raw!r}")
    return Target(path=path, endpoint=endpoint, stream=stream, timeout=timeout)


def _parse_partitions(raw: str | None) -> tuple[int, ...] | None:
    if raw is None:
        return None
    out: list[int] = []
    for part in raw.replace(" ", "").split(","):
        if not part:
            continue
        try:
            p = int(part)
        except ValueError:
            raise InvalidArgument(
                f"option 'partitions' must be a comma-separated list of partition numbers, got {raw!r}"
            ) from None
        if p < 0:
            raise InvalidArgument(f"option 'partitions' must not contain negative numbers, got {raw!r}")
        if p not in out:
            out.append(p)
    if not out:
        raise InvalidArgument(f"option 'partitions' names no partition: {raw!r}")
    return tuple(sorted(out))


def _parse_datetime(raw: str) -> _dt.datetime | None:
    text = raw.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        return _dt.datetime.fromisoformat(text)
    except ValueError:
        return None


def _parse_one_position(name: str, value: Any, where: str, allowed_words: tuple[str, ...]) -> PositionSpec:
    if isinstance(value, bool):
        raise InvalidArgument(f"option {name!r}: {where} must be a transaction id or one of {allowed_words}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidArgument(f"option {name!r}: {where} must be >= 0, got {value}")
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("latest",):
            word = "newest"
        if word in ("earliest",):
            word = "oldest"
        if word in allowed_words:
            return word
        when = _parse_datetime(value)
        if when is not None:
            return ("time", when)
    raise InvalidArgument(
        f"option {name!r}: {where} must be a transaction id, an ISO datetime or one of {allowed_words}, "
        f"got {value!r}"
    )


def parse_positions(options: Mapping[str, str], name: str, default: str,
                    allowed_words: tuple[str, ...]) -> dict[str, PositionSpec]:
    """Parse ``startingOffsets``/``endingOffsets``: a word, an ISO datetime or a JSON map.

    The result maps ``"*"`` (every partition not listed) and partition numbers as strings to
    a position spec.
    """
    raw = _get(options, name)
    if raw is None:
        return {"*": default}
    if raw.startswith("{"):
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            raise InvalidArgument(f"option {name!r} is not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise InvalidArgument(f"option {name!r} must be a JSON object of partition -> transaction id")
        out: dict[str, PositionSpec] = {"*": default}
        for key, value in parsed.items():
            try:
                p = int(key)
            except ValueError:
                raise InvalidArgument(
                    f"option {name!r}: keys must be partition numbers, got {key!r}"
                ) from None
            if p < 0:
                raise InvalidArgument(f"option {name!r}: partition {p} is negative")
            out[str(p)] = _parse_one_position(name, value, f"the value for partition {p}", allowed_words)
        return out
    return {"*": _parse_one_position(name, raw, "the value", allowed_words)}


def parse_value_format(options: Mapping[str, str]) -> str:
    raw = _get(options, "valueFormat")
    if raw is None:
        return "binary"
    fmt = raw.lower()
    if fmt not in VALUE_FORMATS:
        raise InvalidArgument(f"option 'valueFormat' must be one of {', '.join(VALUE_FORMATS)}, got {raw!r}")
    return fmt


def parse_decoding(options: Mapping[str, str]) -> Decoding:
    """The options ``valueFormat``, ``mode`` and ``columnNameOfCorruptRecord`` of a read."""
    fmt = parse_value_format(options)
    raw = _get(options, "mode")
    mode = "failfast" if raw is None else raw.lower()
    if mode not in MODES:
        raise InvalidArgument(f"option 'mode' must be one of failFast, permissive, dropMalformed, got {raw!r}")
    if mode != "failfast" and fmt == "binary":
        raise InvalidArgument(f"option 'mode' {raw!r} needs option 'valueFormat' string, json or msgpack "
                              "(binary values are never malformed)")
    column = _get(options, "columnNameOfCorruptRecord")
    if column is not None and mode != "permissive":
        raise InvalidArgument("option 'columnNameOfCorruptRecord' goes with option 'mode' 'permissive'")
    column = column or DEFAULT_CORRUPT_COLUMN
    if column.lower() in COLUMNS:
        raise InvalidArgument(f"option 'columnNameOfCorruptRecord' {column!r} is the name of another column")
    return Decoding(fmt, mode, column)


def parse_read(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    """Validate the options of a batch (``streaming=False``) or streaming read."""
    target = parse_target(options)
    decoding = parse_decoding(options)
    starting = parse_positions(options, "startingOffsets", "oldest", ("oldest", "newest"))
    if streaming:
        if _get(options, "endingOffsets") is not None:
            raise InvalidArgument("option 'endingOffsets' applies only to batch reads, not to readStream")
        ending: dict[str, PositionSpec] = {"*": "newest"}
        max_rows = _positive_int(options, "maxRowsPerTrigger", None)
    else:
        ending = parse_positions(options, "endingOffsets", "newest", ("newest",))
        if _get(options, "maxRowsPerTrigger") is not None:
            raise InvalidArgument("option 'maxRowsPerTrigger' applies only to readStream, not to batch reads")
        max_rows = None
    return ReadOptions(
        target=target,
        partitions=_parse_partitions(_get(options, "partitions")),
        starting=starting,
        ending=ending,
        max_rows_per_trigger=max_rows,
        value_format=decoding.value_format,
        rows_per_split=_positive_int(options, "rowsPerSplit", 500_000) or 500_000,
        mode=decoding.mode,
        corrupt_column=decoding.corrupt_column,
    )


def parse_write(options: Mapping[str, str], streaming: bool) -> WriteOptions:
    """Validate the options of a batch or streaming write.

    A streaming write needs a stable producer id for its exactly-once marker: ``producerId``
    (alias ``sinkId``) if given, else one derived from ``checkpointLocation``.
    """
    target = parse_target(options)
    for name in ("startingOffsets", "endingOffsets", "maxRowsPerTrigger", "partitions", "mode",
                 "columnNameOfCorruptRecord"):
        if _get(options, name) is not None:
            raise InvalidArgument(f"option {name!r} applies only to reads, not to writes")
    fmt = _get(options, "valueFormat")
    if fmt is not None and fmt.lower() not in ("binary", "string"):
        raise InvalidArgument(
            f"option 'valueFormat' of a write must be binary or string (the value column is stored as is), "
            f"got {fmt!r}"
        )
    ttl = _positive_int(options, "stagingTtl", 600, hi=7 * 24 * 3600)
    producer = _get(options, "producerId") or _get(options, "sinkId")
    if streaming and producer is None:
        checkpoint = _get(options, "checkpointLocation")
        if checkpoint is None:
            raise InvalidArgument(
                "a streaming write to tstreams needs a stable producer id for exactly-once: set "
                "option 'checkpointLocation' on writeStream (the id is derived from it) or option "
                "'producerId'"
            )
        producer = "checkpoint:" + normalize_location(checkpoint)
    return WriteOptions(
        target=target,
        txn_size=_positive_int(options, "txnSize", 10_000) or 10_000,
        staging_ttl_ms=(ttl or 600) * 1000,
        producer_id=producer,
    )


def normalize_location(location: str) -> str:
    """A checkpoint location in a canonical form (local paths made absolute)."""
    loc = location.strip()
    if "://" in loc and not loc.startswith("file:"):
        return loc.rstrip("/")
    if loc.startswith("file:"):
        loc = loc[len("file:"):]
        while loc.startswith("//"):
            loc = loc[1:]
    return os.path.normpath(os.path.abspath(os.path.expanduser(loc)))


def check_unknown(options: Mapping[str, str]) -> None:
    """Reject option names the source does not know (catches typos such as ``startingOffset``)."""
    unknown = sorted(k for k in options.keys() if str(k).lower() not in KNOWN)
    if unknown:
        raise InvalidArgument(
            f"unknown option(s) {', '.join(repr(k) for k in unknown)} for format 'tstreams'; "
            f"known options: {', '.join(sorted(KNOWN))}"
        )
