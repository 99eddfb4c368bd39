"""Subscribers: push each committed transaction to a callback, in order, per partition.

A subscriber is a consumer run by a background thread. After the callback returns for a
round of transactions, their offsets are stored; after a restart the subscriber resumes from
the stored offsets (delivery is at-least-once: a crash between the callback and the offset
write delivers those transactions again). In the same process, delivery is woken by the
commit itself; commits made by other processes on the same directory wake it too, through
the engine's inotify waker (:mod:`..storage.commit_waker`; without inotify, within ``poll_interval``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ... import errors
from ..protocol.validate import check_interval
from .consumer import Consumer, Start, Transaction

if TYPE_CHECKING:
    from .context import AgentContext

log = logging.getLogger(__name__)


class Subscriber:
    """Runs ``callback(transaction)`` for every checkpointed transaction of a stream."""

    def __init__(self, engine: AgentContext, stream: str, name: str, callback: Callable[[Transaction], Any],
                 start: Start = "newest", partitions: Iterable[int] | None = None, poll_interval: float = 1.0,
                 serializer: Any = None, on_error: Callable[[BaseException], Any] | None = None) -> None:
        if not callable(callback):
            raise errors.InvalidArgument("callback must be callable")
        check_interval(poll_interval, "poll_interval")
        self.engine = engine
        self.consumer = Consumer(engine, stream, name, start=start, partitions=partitions, serializer=serializer)
        self.callback = callback
        self.on_error = on_error
        self.poll_interval = float(poll_interval)
        self.error: BaseException | None = None
        self.delivered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tstreams-subscriber-{stream}-{name}", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        backend = self.engine.backend
        try:
            while not self._stop.is_set():
                seen = backend.wait_for_commit(-1, 0)
                delivered = self._deliver_round()
                if delivered:
                    self.consumer.checkpoint()
                else:
                    self._wait(seen)
        except errors.EngineClosed:
            return
        except BaseException as exc:  # noqa: BLE001 - reported to the user, never swallowed
            self.error = exc
            if self.on_error is not None:
                self.on_error(exc)
            else:
                log.exception("subscriber %s on %s stopped", self.consumer.name, self.consumer.stream)

    def _wait(self, seen: int) -> None:
        """Wait for a commit after ``seen`` or ``poll_interval``, whichever first; stop() cuts it short."""
        deadline = time.monotonic() + self.poll_interval
        while not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.engine.backend.wait_for_commit(seen, min(remaining, 0.25)) > seen:
                return

    def _deliver_round(self) -> int:
        n = 0
        for p in self.consumer.partitions:
            while not self._stop.is_set():
                t = self.consumer.get_transaction(p)
                if t is None:
                    break
                self.callback(t)
                n += 1
                self.delivered += 1
        return n

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop delivering; the offsets of delivered transactions are stored."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
