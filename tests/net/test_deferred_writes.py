"""A write batch function that answers later (net/deferred.py): the write executor goes on
with the next batch meanwhile, and every call is answered once, with its own outcome."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from tstreams_embedded.net.deferred import Deferred
from tstreams_embedded.net.executors import Call, Done, WriteExecutor, execute
from tstreams_embedded.net.registry import CALL, Handler
from tstreams_embedded.testing import eventually


class _Later:
    """A batch function whose batches stay open until :meth:`release`."""

    def __init__(self) -> None:
        self.open: list[tuple[Deferred, list[Any]]] = []

    def batch(self, calls: Sequence[Sequence[Any]]) -> Deferred:
        d = Deferred()
        self.open.append((d, [c[0] for c in calls]))
        return d

    def release(self) -> None:
        for d, args in self.open:
            d.complete([(True, a * 10) for a in args])


def _call(i: int) -> Call:
    return Call(None, i, 0, 1)  # type: ignore[arg-type]


def test_the_executor_takes_the_next_batch_while_one_is_deferred() -> None:
    later = _Later()
    h = Handler("w", CALL, lambda s, a: a, "write", later.batch)
    delivered: list[Done] = []
    lock = threading.Lock()

    def deliver(done: list[Done]) -> None:
        with lock:
            delivered.extend(done)

    ex = WriteExecutor(deliver)
    try:
        for i in range(3):
            ex.put((h, _call(i), [i]))
            eventually(lambda i=i: len(later.open) == i + 1, 5, message="the next batch starts before any answer")
        assert delivered == []
        later.release()
        eventually(lambda: len(delivered) == 3, 5)
        assert sorted((c.req_id, ok, v) for c, ok, v in delivered) == [(0, True, 0), (1, True, 10), (2, True, 20)]
    finally:
        later.release()
        ex.stop(5)


def test_without_a_deferral_execute_waits_for_the_outcomes() -> None:
    d = Deferred()
    h = Handler("w", CALL, lambda s, a: a, "write", lambda calls: d)
    threading.Timer(0.05, d.complete, args=([(False, ValueError("x"))],)).start()
    [(call, ok, value)] = execute([(h, _call(7), [1])])
    assert call.req_id == 7 and not ok and isinstance(value, ValueError)
