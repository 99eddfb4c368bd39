"""Keeps the open transactions of an engine handle alive.

Every ``interval`` seconds one KEEPALIVE operation pushes the deadline of every open
transaction of every producer of this handle to ``now + txn_ttl``. When the process dies
the refreshes stop and its open transactions expire ``txn_ttl`` later; consumers then pass
over them. Over the network this is the client's heartbeat.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

from ... import errors
from ..protocol import ops as O
from ..protocol.backend import Backend

log = logging.getLogger(__name__)


class OpenTransaction(Protocol):
    """What keep-alive reads of an open producer transaction."""

    @property
    def partition(self) -> int: ...

    @property
    def registered(self) -> bool: ...

    @property
    def id(self) -> int: ...


class KeptAlive(Protocol):
    """What keep-alive reads of a producer."""

    @property
    def stream(self) -> str: ...

    @property
    def stream_id(self) -> int: ...

    @property
    def txn_ttl_ms(self) -> int: ...

    def open_transactions(self) -> Sequence[OpenTransaction]: ...


class KeepAlive:
    """The keep-alive of one engine handle: tracks its producers, refreshes in a thread."""

    def __init__(self, backend: Backend, interval: float | None) -> None:
        self.backend = backend
        self.interval = interval
        self._producers: weakref.WeakSet[KeptAlive] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def track(self, producer: KeptAlive) -> None:
        with self._lock:
            self._producers.add(producer)
            if self.interval and self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="tstreams-keepalive", daemon=True)
                self._thread.start()

    def refresh(self) -> int:
        """Refresh every open transaction now; return how many are still alive."""
        with self._lock:
            producers = list(self._producers)
        by_ttl: dict[int, list[list[Any]]] = {}
        for p in producers:
            for t in p.open_transactions():
                if t.registered:  # unregistered transactions have nothing in storage to keep alive
                    by_ttl.setdefault(p.txn_ttl_ms, []).append([p.stream, t.partition, t.id, p.stream_id])
        alive = 0
        for ttl, targets in by_ttl.items():
            alive += self.backend.submit([O.KeepAlive(targets, ttl)], durable=False)[0]
        return alive

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except errors.EngineClosed:
                return
            except Exception:  # noqa: BLE001 - keep trying; a missed beat only shortens the deadline
                log.exception("keep-alive failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
