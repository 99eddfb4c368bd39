"""The console's read budget: its reads of the engine take a bounded share of the time,
however often its pages are refreshed and however many are open.

The pages that scan a stream (a stream's partitions, a consumer's rows, the lists) cost
time in proportion to what the engine holds. :class:`ReadBudget` times each such read and
then answers the same question from the kept answer until ``(1 / share - 1)`` times that
read's duration has passed (with the default ``share = 0.02``, a read of 20 ms is reused
for 980 ms), and also until as long has passed since the last fresh read of any question
as the question's own last read took, times ``(1 / share - 1)`` (its cost is paid before,
too, so a long read comes after a long pause): fresh reads then take at most ``share`` of
the wall-clock time (the lag
sampler's reads are bounded on their own, :mod:`.sampler`), and every answer carries
``as_of_ms``, the time it was read. The budget wins over freshness: a read of 2 s (a
partition of millions of transactions) is reused for 98 s. Answers are kept serialized
(JSON bytes), at most ``max_bytes`` of them in all (least recently used first out; a larger
answer is not kept), so the memory is bounded by bytes too. A question asked for the first
time is always read.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from .. import errors


@dataclass(frozen=True)
class Kept:
    answer: bytes  # JSON
    seconds: float  # the time its read took


class ReadBudget:
    """Answers ``compute()`` fresh or kept, within ``share`` of the time (see the module)."""

    def __init__(self, share: float = 0.02, max_bytes: int = 16 << 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < share <= 1 or max_bytes < 0:
            raise errors.InvalidArgument(f"read budget needs 0 < share <= 1 and max_bytes >= 0, "
                                         f"got {share}, {max_bytes}")
        self.share = share
        self.max_bytes = max_bytes
        self.kept_bytes = 0
        self.clock = clock
        self.kept: OrderedDict[Hashable, Kept] = OrderedDict()
        self.ratio = 1.0 / share - 1.0  # pause per second read
        self.fresh_after = 0.0  # monotonic time from which the next fresh read is within budget
        self.last_read = 0.0  # monotonic time the last fresh read ended
        self.fresh_reads = 0
        self.kept_answers = 0
        self.read_seconds = 0.0  # the time the fresh reads took
        self._lock = threading.Lock()

    def answer(self, key: Hashable, compute: Callable[[], dict[str, Any]]) -> bytes:
        """``compute()`` with ``as_of_ms`` added, as JSON, or the answer kept for ``key``
        while the budget is spent."""
        with self._lock:
            now = self.clock()
            kept = self.kept.get(key)
            if kept is not None and now < max(self.fresh_after, self.last_read + kept.seconds * self.ratio):
                self.kept.move_to_end(key)
                self.kept_answers += 1
                return kept.answer
        started = self.clock()
        answer = json.dumps({**compute(), "as_of_ms": int(time.time() * 1000)}, default=str).encode()
        done = self.clock()
        with self._lock:
            self.fresh_after = max(self.fresh_after, done + (done - started) * self.ratio)
            self.last_read = max(self.last_read, done)
            old = self.kept.pop(key, None)
            self.kept_bytes -= len(old.answer) if old is not None else 0
            if len(answer) <= self.max_bytes:
                self.kept[key] = Kept(answer, done - started)
                self.kept_bytes += len(answer)
            while self.kept_bytes > self.max_bytes:
                self.kept_bytes -= len(self.kept.popitem(last=False)[1].answer)
            self.fresh_reads += 1
            self.read_seconds += done - started
        return answer
