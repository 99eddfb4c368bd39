"""A background writer for the cluster tests: uniquely numbered items, every acknowledged
one recorded, so that a test can check the nodes' final states against them."""

from __future__ import annotations

import threading
import time
from typing import Any

from tstreams_embedded import errors

from .conftest import ClusterNode


class ItemWriter(threading.Thread):
    """Writes uniquely numbered items to ``stream`` until :meth:`stop`: instants, and with
    ``txn_every=N`` a 3-item transaction every Nth write. Acknowledged items go to
    :attr:`acked`; an error to :attr:`failed` (an outcome unknown, not counted as
    acknowledged), after which the writer stops when ``stop_on_error``, else goes on.
    :attr:`acked_at` and :attr:`failed_at` hold when (``time.monotonic()``) each write was
    acknowledged or failed."""

    def __init__(self, engine: Any, stream: str = "s", prefix: str = "w", *, txn_every: int = 0,
                 stop_on_error: bool = False) -> None:
        super().__init__(daemon=True)
        self.producer = engine.producer(stream)
        self.prefix = prefix
        self.txn_every = txn_every
        self.stop_on_error = stop_on_error
        self.acked: list[str] = []
        self.failed: list[BaseException] = []
        self.acked_at: list[float] = []
        self.failed_at: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.halt.is_set():
            try:
                if self.txn_every and i % self.txn_every == self.txn_every - 1:
                    items = [f"t{i}-{j}" for j in range(3)]
                    txn = self.producer.new_transaction(partition=0)
                    for item in items:
                        txn.send(item.encode())
                    txn.checkpoint()
                else:
                    items = [f"{self.prefix}{i}"]
                    self.producer.instant([items[0].encode()])
                self.acked.extend(items)
                self.acked_at.append(time.monotonic())
            except errors.TStreamsError as exc:
                self.failed.append(exc)
                self.failed_at.append(time.monotonic())
                if self.stop_on_error:
                    return
            i += 1

    def stop(self) -> None:
        self.halt.set()
        self.join(90)
        assert not self.is_alive()


def items_on(node: ClusterNode) -> list[str]:
    """Every item of the node's applied state (its ``/state?items=1``)."""
    items: list[str] = node.state(items=True)["items"]
    return items
