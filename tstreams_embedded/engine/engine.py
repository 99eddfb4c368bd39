"""The user-facing engine handle: stream administration and factories for producers,
consumers, subscribers. It works over any :class:`~.backend.Backend`: the embedded
:class:`~.core.Core` (``ts.open``) or a remote server (``ts.connect``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .. import errors
from . import ops as O
from .apply import check_int, check_name
from .backend import Backend, StreamInfo
from .batch import Batch
from .consumer import Consumer, Start, Transaction
from .core import Core
from .group import CheckpointGroup
from .keepalive import KeepAlive
from .producer import Producer
from .subscriber import Subscriber

DEFAULT_TXN_TTL = 60.0
DEFAULT_STREAM_TTL = 86_400


class Engine:
    """A handle on a set of streams. Thread-safe. Use as a context manager or call :meth:`close`."""

    def __init__(self, backend: Backend, *, txn_ttl: float = DEFAULT_TXN_TTL, keepalive_interval: float | None = -1,
                 on_close: Callable[[], None] | None = None) -> None:
        self.backend = backend
        self.txn_ttl = txn_ttl
        self._default_ttl_ms = self._ttl_ms(txn_ttl)
        if keepalive_interval == -1:
            keepalive_interval = max(min(txn_ttl / 10.0, 6.0), 0.05)
        self._keepalive = KeepAlive(self, keepalive_interval)
        self._on_close = on_close
        self._closed = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Engine({self.backend!r})"

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed or self.backend.closed

    def _check(self) -> None:
        if self.closed:
            raise errors.EngineClosed("this engine handle is closed")

    def _ttl_ms(self, ttl: float | None) -> int:
        if ttl is None:
            return self._default_ttl_ms
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0.001 <= ttl <= 7 * 86400:
            raise errors.InvalidArgument(f"txn_ttl must be a number of seconds in [0.001, 604800], got {ttl!r}")
        return int(ttl * 1000)

    def close(self) -> None:
        """Stop keep-alives and release the backend. Open transactions then expire on their TTL."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._keepalive.stop()
        if self._on_close is not None:
            self._on_close()
        else:
            self.backend.close()

    # ------------------------------------------------------------------ streams
    def create_stream(self, name: str, partitions: int = 1, ttl: int = DEFAULT_STREAM_TTL,
                      description: str = "") -> StreamInfo:
        """Create a stream. Raises :class:`StreamExists` if the name is taken."""
        self._check()
        check_name(name)
        check_int(partitions, "partitions", 1, 1_000_000)
        check_int(ttl, "ttl (seconds)", 1, 100 * 365 * 86400)
        wire = self.backend.submit([(O.CREATE_STREAM, name, partitions, ttl, description)], durable=True)[0]
        return StreamInfo.from_wire(wire)

    def get_stream(self, name: str) -> StreamInfo:
        """A stream's metadata, or :class:`StreamNotFound`."""
        self._check()
        return self.backend.get_stream(name)

    def has_stream(self, name: str) -> bool:
        try:
            self.get_stream(name)
            return True
        except errors.StreamNotFound:
            return False

    def list_streams(self, prefix: str = "", limit: int | None = None) -> list[StreamInfo]:
        """Streams whose name starts with ``prefix``, in name order."""
        self._check()
        return self.backend.list_streams(prefix, limit)

    def delete_stream(self, name: str) -> None:
        """Delete a stream with all its transactions, data and consumer offsets."""
        self._check()
        self.backend.submit([(O.DELETE_STREAM, name)], durable=True)

    # ------------------------------------------------------------------ agents
    def producer(self, stream: str, partition: int | None = None, serializer: Any = None,
                 txn_ttl: float | None = None, batch_size: int = 100) -> Producer:
        """A producer on ``stream`` (round-robin over partitions unless ``partition`` is given)."""
        self._check()
        return Producer(self, stream, partition, serializer, txn_ttl, batch_size)

    def consumer(self, stream: str, name: str, start: Start = "oldest", partitions: Iterable[int] | None = None,
                 use_last_offset: bool = True, serializer: Any = None, prefetch: int = 256) -> Consumer:
        """A named consumer; its stored offsets win over ``start`` unless ``use_last_offset=False``."""
        self._check()
        return Consumer(self, stream, name, start, partitions, use_last_offset, serializer, prefetch)

    def subscribe(self, stream: str, name: str, callback: Callable[[Transaction], Any], start: Start = "newest",
                  partitions: Iterable[int] | None = None, poll_interval: float = 1.0, serializer: Any = None,
                  on_error: Callable[[BaseException], Any] | None = None) -> Subscriber:
        """Start a background subscriber (see :class:`Subscriber`)."""
        self._check()
        return Subscriber(self, stream, name, callback, start, partitions, poll_interval, serializer, on_error)

    def checkpoint_group(self, *agents: Any) -> CheckpointGroup:
        """Shorthand for ``ts.CheckpointGroup(*agents)``."""
        return CheckpointGroup(*agents)

    def batch(self, durable: bool = True) -> Batch:
        """Collect several operations and apply them in one atomic write (see :class:`Batch`)."""
        self._check()
        return Batch(self, durable)

    def keep_alive(self) -> int:
        """Refresh this handle's open transactions now (the background thread does it every
        ``keepalive_interval``); return how many are alive."""
        self._check()
        return self._keepalive.refresh()

    # ------------------------------------------------------------------ maintenance
    def compact(self) -> dict[str, int]:
        """Delete expired transactions now (also done in the background)."""
        self._check()
        return self.backend.compact()

    def stats(self) -> dict[str, Any]:
        self._check()
        return self.backend.stats()


# ---------------------------------------------------------------------- embedded registry
_registry_lock = threading.Lock()
_registry: dict[str, tuple[Core, int]] = {}


def open_engine(path: str | os.PathLike, durability: str = "sync", *, txn_ttl: float = DEFAULT_TXN_TTL,
                keepalive_interval: float | None = -1, **core_options: Any) -> Engine:
    """Open (creating if needed) the engine in directory ``path``.

    Opening the same directory again in one process shares the underlying environment
    (LMDB forbids two environments on one file in a process); each handle is closed on its
    own and the environment closes with the last one.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise errors.InvalidArgument(f"path must be a string or path, got {type(path).__name__}")
    key = os.path.realpath(os.fspath(path))
    with _registry_lock:
        if key in _registry and not _registry[key][0].closed:
            core, refs = _registry[key]
            if core.durability != durability:
                raise errors.EngineBusy(
                    f"{path!r} is already open in this process with durability={core.durability!r}"
                )
            _registry[key] = (core, refs + 1)
        else:
            core = Core(key, durability, **core_options)
            _registry[key] = (core, 1)

    def release() -> None:
        with _registry_lock:
            c, refs = _registry.get(key, (core, 1))
            if refs <= 1:
                _registry.pop(key, None)
                c.close()
            else:
                _registry[key] = (c, refs - 1)

    return Engine(core, txn_ttl=txn_ttl, keepalive_interval=keepalive_interval, on_close=release)
