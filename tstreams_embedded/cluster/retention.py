"""How far a node trims its replicated log (:mod:`.log`): the retention settings and the
pure rule that turns them into a trim point.

Two bounds, both from the cluster configuration (``tstreams cluster init
--log-retain-entries N --log-retain-bytes B``):

* **entries** (soft): keep the newest ``N`` entries. Entries that a *live* follower (one
  whose ZooKeeper node exists) has not acknowledged yet, or that a snapshot being sent
  starts after, are kept beyond ``N``: the follower catches up from the log, cheaply.
* **bytes** (hard): the log never holds much more than ``B`` bytes of entries. Past that,
  the oldest entries go even if a live follower still needs them; that follower then
  catches up from a snapshot (:mod:`.snapshot`), which replaces them.

Neither bound ever trims past the node's applied index: an entry not yet applied stays.
Trimming starts only once the log is ``N/8`` entries (at least one) over its bound, so that
its synced write is amortised over many appends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import errors

DEFAULT_RETAIN_ENTRIES = 100_000
DEFAULT_RETAIN_BYTES = 256 << 20
#: Seconds between replicated compactions of expired transactions (:mod:`.compaction`).
DEFAULT_COMPACTION_INTERVAL = 60.0


def check_compaction_interval(value: object) -> float:
    """A valid ``compaction_interval`` (seconds, 0 for never), or ``InvalidArgument``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86_400 * 365:
        raise errors.InvalidArgument(f"compaction_interval must be 0 (never) or a number of seconds, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Retention:
    """The log retention of a cluster (see the module docstring)."""

    entries: int = DEFAULT_RETAIN_ENTRIES
    bytes: int = DEFAULT_RETAIN_BYTES

    def __post_init__(self) -> None:
        check_entries(self.entries)
        check_bytes(self.bytes)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Retention:
        """The retention recorded in the cluster's configuration (defaults where absent)."""
        return cls(config.get("log_retain_entries", DEFAULT_RETAIN_ENTRIES),
                   config.get("log_retain_bytes", DEFAULT_RETAIN_BYTES))

    @property
    def slack(self) -> int:
        """Entries over the bound before a trim starts."""
        return max(1, self.entries // 8)


def check_entries(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 40:
        raise errors.InvalidArgument(f"log_retain_entries must be an integer from 0 to 2**40, got {value!r}")
    return value


def check_bytes(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 << 16 <= value <= 1 << 32:
        raise errors.InvalidArgument(f"log_retain_bytes must be an integer from 65536 to 2**32, got {value!r}")
    return value


def trim_point(retention: Retention, base: int, last: int, size_bytes: int, applied: int,
               needed_from: Iterable[int] = (), bytes_upto: int | None = None) -> int:
    """The index up to which the log may be trimmed now (``<= base``: nothing to trim).

    ``base``/``last``: the log's base and last index; ``size_bytes`` its size; ``applied``
    the node's applied index; ``needed_from``: first indexes that live followers (or
    snapshots in flight) still need from this log; ``bytes_upto``: the smallest index whose
    removal brings the log within ``retention.bytes`` (only needed when it is over it)."""
    count = last - base
    over_count = count > retention.entries + retention.slack
    over_bytes = size_bytes > retention.bytes and bytes_upto is not None
    if not over_count and not over_bytes:
        return base
    soft = base
    if over_count:
        soft = last - retention.entries
        for first in needed_from:
            soft = min(soft, first - 1)
    hard = bytes_upto if over_bytes and bytes_upto is not None else base
    return max(base, min(applied, max(soft, hard)))
