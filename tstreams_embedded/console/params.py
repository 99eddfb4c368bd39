"""Query parameters of the console API: each checked, or :class:`~tstreams_embedded.errors.InvalidArgument`
naming the parameter (answered as a JSON 400)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import errors
from ..engine.protocol.validate import check_name
from ..tools.formats import OUTPUT_FORMATS, RECORD_SERDES

MAX_PAGE_TXNS = 100
MAX_ID = 2**63 - 1


class Query:
    """The query arguments of one request (Tornado's ``request.arguments``)."""

    def __init__(self, arguments: Mapping[str, Sequence[bytes]], known: Sequence[str]) -> None:
        unknown = sorted(set(arguments) - set(known))
        if unknown:
            raise errors.InvalidArgument(f"unknown query parameter(s) {', '.join(unknown)}; "
                                         f"expected {', '.join(known) or 'none'}")
        self.values: dict[str, str] = {}
        for name, values in arguments.items():
            if len(values) != 1:
                raise errors.InvalidArgument(f"query parameter {name!r} given {len(values)} times; give it once")
            try:
                self.values[name] = values[0].decode("utf-8")
            except UnicodeDecodeError:
                raise errors.InvalidArgument(f"query parameter {name!r} is not UTF-8") from None

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        """An integer in ``[low, high]``."""
        text = self.values.get(name)
        if text is None:
            return default
        if not text.isascii() or not text.isdigit() or len(text) > 20:
            raise errors.InvalidArgument(f"query parameter {name!r} must be a non-negative integer, got {text!r}")
        value = int(text)
        if not low <= value <= high:
            raise errors.InvalidArgument(f"query parameter {name!r} must be between {low} and {high}, got {value}")
        return value

    def choice(self, name: str, default: str, choices: Sequence[str]) -> str:
        value = self.values.get(name, default)
        if value not in choices:
            raise errors.InvalidArgument(f"query parameter {name!r} must be one of {', '.join(choices)}, "
                                         f"got {value!r}")
        return value

    def text(self, name: str, default: str) -> str:
        return self.values.get(name, default)


def path_name(value: str, what: str) -> str:
    """A stream or consumer name from the URL path."""
    return check_name(value, what)


def path_partition(value: str) -> int:
    """A partition number from the URL path (its range is checked against the stream)."""
    if not value.isascii() or not value.isdigit() or len(value) > 10:
        raise errors.InvalidArgument(f"partition must be a non-negative integer, got {value!r}")
    return int(value)


def message_format(query: Query) -> tuple[str, str, str]:
    """``(format, key_serde, value_serde)`` of the message browser (``tstreams consume --format``)."""
    fmt = query.choice("format", "raw", OUTPUT_FORMATS)
    key_serde = query.choice("key_serde", "msgpack", RECORD_SERDES)
    value_serde = query.choice("value_serde", "msgpack", RECORD_SERDES)
    return fmt, key_serde, value_serde
