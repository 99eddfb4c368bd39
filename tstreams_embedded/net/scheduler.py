"""Running the generators of ``STREAM`` handlers on the server loop.

A ``STREAM`` handler is a generator function: each value it yields is sent at once as a
response flagged ``MORE``, and its ``return`` value is the final response. The
:class:`GeneratorScheduler` resumes generators one step at a time from the loop, so a
generator never blocks the loop or other generators. A generator that yields a
:class:`~tstreams_embedded.net.registry.Directive` is *parked* instead:

* :class:`~tstreams_embedded.net.registry.Sleep` resumes it after some seconds;
* :class:`~tstreams_embedded.net.registry.WaitCommit` resumes it when the engine commits
  (see :mod:`~tstreams_embedded.net.commits`) or on its timeout, sending it the newest
  commit generation.

A generator ends when it returns or raises, when its client cancels it
(``cancel(request_id)``), when a new request of the same client reuses its request ID,
or when its client's session ends.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Generator
from typing import Any

from tornado.ioloop import IOLoop

from ..errors import RemoteError
from . import framing
from .commits import CommitWatch, CommitWatcher
from .outbox import Outbox
from .registry import Directive, Sleep, WaitCommit
from .session import Running, Session
from .stats import ServerStats

log = logging.getLogger(__name__)


class GeneratorScheduler:
    """The generator requests in progress on one server loop."""

    def __init__(self, loop: IOLoop, outbox: Outbox, stats: ServerStats,
                 commit_watch: CommitWatch | None) -> None:
        self._loop = loop
        self._outbox = outbox
        self._stats = stats
        self._commits = CommitWatcher(loop, commit_watch, self._resume_on_commit)
        self._ready: deque[Running] = deque()
        self._run_scheduled = False

    def start(self) -> None:
        self._commits.start()

    def stop(self) -> None:
        self._commits.stop()

    def run(self, session: Session, req_id: int, gen: Generator[Any, Any, Any]) -> None:
        """Start the generator of request ``req_id`` (replacing one with the same ID)."""
        r = Running(session, req_id, gen)
        old = session.running.pop(req_id, None)
        if old is not None:
            self._close(old)
        session.running[req_id] = r
        self._stats.running_generators += 1
        self._make_ready(r, None)

    def cancel(self, session: Session, req_id: int) -> bool:
        """End the generator request ``req_id`` of ``session`` (no further responses)."""
        r = session.running.pop(req_id, None)
        if r is None:
            return False
        self._close(r)
        return True

    def end_session(self, s: Session, notify: bool) -> None:
        """Close the session's generators; with ``notify``, answer each ``NOT_EXECUTED``."""
        s.closed = True
        for r in list(s.running.values()):
            self._close(r)
            if notify:
                self._outbox.send_error(s.identity, r.req_id,
                                        RemoteError("server is shutting down; request not executed"),
                                        framing.NOT_EXECUTED)
        s.running.clear()

    # ------------------------------------------------------------------ stepping
    def _make_ready(self, r: Running, value: Any) -> None:
        r.parked = None
        r.resume = value
        self._ready.append(r)
        if not self._run_scheduled:
            self._run_scheduled = True
            self._loop.add_callback(self._run_ready)

    def _run_ready(self) -> None:
        self._run_scheduled = False
        batch, self._ready = self._ready, deque()
        with self._outbox.burst():
            for r in batch:
                self._step(r)

    def _step(self, r: Running) -> None:
        s = r.session
        if s.closed or s.running.get(r.req_id) is not r:
            return
        try:
            v = r.gen.send(r.resume)
        except StopIteration as stop:
            self._finish(r)
            self._outbox.send_value(s.identity, r.req_id, stop.value)
            return
        except Exception as e:
            self._finish(r)
            self._outbox.send_error(s.identity, r.req_id, e)
            return
        if isinstance(v, Directive):
            self._park(r, v)
        else:
            self._outbox.send_value(s.identity, r.req_id, v, framing.MORE)
            self._make_ready(r, None)

    # ------------------------------------------------------------------ parking
    def _park(self, r: Running, d: Directive) -> None:
        if isinstance(d, Sleep):
            r.parked = self._loop.call_later(max(0.0, float(d.seconds)), self._make_ready, r, None)
        elif isinstance(d, WaitCommit):
            generation = self._commits.current()
            if generation > d.seen:
                self._make_ready(r, generation)
                return
            self._commits.add(r, d.seen)
            r.parked = self._loop.call_later(max(0.0, float(d.timeout)), self._commit_timeout, r)
        else:
            self._make_ready(r, None)

    def _commit_timeout(self, r: Running) -> None:
        if self._commits.discard(r):
            self._make_ready(r, max(self._commits.generation, 0))

    def _resume_on_commit(self, r: Running, generation: int) -> None:
        self._unpark(r)
        self._make_ready(r, generation)

    def _unpark(self, r: Running) -> None:
        self._commits.discard(r)
        if r.parked is not None:
            self._loop.remove_timeout(r.parked)
            r.parked = None

    # ------------------------------------------------------------------ ending
    def _finish(self, r: Running) -> None:
        if r.session.running.get(r.req_id) is r:
            del r.session.running[r.req_id]
        self._stats.running_generators -= 1
        self._unpark(r)

    def _close(self, r: Running) -> None:
        self._unpark(r)
        self._stats.running_generators -= 1
        try:
            r.gen.close()
        except Exception:  # a generator misbehaving on close must not hurt the loop
            log.debug("generator close failed", exc_info=True)
