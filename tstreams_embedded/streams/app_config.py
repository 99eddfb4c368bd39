"""``AppConfig``: the options of a stream application (:class:`~.app.App`), with their checks
in one place. ``App(engine, application_id=..., topology=..., **options)`` builds one from
its keyword options; the meaning of each option is documented on :class:`~.app.App`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .. import errors
from ..engine.protocol.validate import check_name
from .record_errors import RecordErrorPolicy, check_policy
from .stores import DEFAULT_CACHE_BYTES

#: the most records a task processes in one turn (see :class:`~.app.App`)
DEFAULT_TURN_RECORDS = 1000


class Processing(str, Enum):
    """``App(processing=...)``: every commit durable (exactly once) or not (at least once);
    the documented strings are accepted and compare equal."""

    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


#: the values of ``App(processing=...)``
PROCESSING = tuple(p.value for p in Processing)


def _positive(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise errors.InvalidArgument(f"{what} must be a positive integer, got {value!r}")


def _optional_int(value: Any, what: str, low: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
        kind = "positive" if low > 0 else "non-negative"
        raise errors.InvalidArgument(f"{what} must be None or a {kind} integer, got {value!r}")


@dataclass(frozen=True)
class AppConfig:
    """The options of :class:`~.app.App` (see its docstring), checked when made:
    :class:`~tstreams_embedded.errors.InvalidArgument` names the first bad one."""

    application_id: str
    num_threads: int = 1
    processing: Processing = Processing.EXACTLY_ONCE
    commit_interval_ms: int = 100
    commit_records: int = 10_000
    commit_bytes: int = 8 << 20
    poll_interval_ms: int = 10
    clock: Callable[[], int] | None = None
    lease_ms: int = 5_000
    instance_name: str = "instance"
    static_id: str | None = None
    on_record_error: RecordErrorPolicy = RecordErrorPolicy.FAIL
    http_host: str = "127.0.0.1"
    http_port: int | None = None
    advertised_host: str | None = None
    max_task_idle_ms: int = 0
    store_cache_bytes: int = DEFAULT_CACHE_BYTES
    turn_records: int = DEFAULT_TURN_RECORDS
    turn_slack_ms: int | None = None
    max_future_ms: int | None = None
    dead_letter_stream: str | None = None
    idle_advance_ms: int | None = None

    def __post_init__(self) -> None:
        check_name(self.application_id, "application_id")
        if "/" in self.application_id:
            raise errors.InvalidArgument(f"application_id must not contain '/', got {self.application_id!r}")
        if self.processing not in PROCESSING:
            raise errors.InvalidArgument(f"processing must be one of {PROCESSING}, got {self.processing!r}")
        object.__setattr__(self, "processing", Processing(self.processing))
        object.__setattr__(self, "on_record_error", check_policy(self.on_record_error))
        for what in ("num_threads", "commit_interval_ms", "commit_records", "commit_bytes", "poll_interval_ms",
                     "lease_ms", "store_cache_bytes", "turn_records"):
            _positive(getattr(self, what), what)
        if isinstance(self.max_task_idle_ms, bool) or not isinstance(self.max_task_idle_ms, int) \
                or self.max_task_idle_ms < 0:
            raise errors.InvalidArgument(f"max_task_idle_ms must be a non-negative integer, "
                                         f"got {self.max_task_idle_ms!r}")
        _optional_int(self.turn_slack_ms, "turn_slack_ms", 0)
        _optional_int(self.max_future_ms, "max_future_ms", 0)
        _optional_int(self.idle_advance_ms, "idle_advance_ms", 1)
        if self.dead_letter_stream is not None:
            check_name(self.dead_letter_stream, "dead_letter_stream")
        check_name(self.instance_name, "instance_name")
        if self.static_id is not None:
            check_name(self.static_id, "static_id")
        port = self.http_port
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535):
            raise errors.InvalidArgument(f"http_port must be None or a port number 0..65535, got {port!r}")
        if not isinstance(self.http_host, str) or not self.http_host:
            raise errors.InvalidArgument(f"http_host must be a host name or address, got {self.http_host!r}")

    @property
    def durable(self) -> bool:
        """Whether every commit is durable (exactly once)."""
        return self.processing is Processing.EXACTLY_ONCE
