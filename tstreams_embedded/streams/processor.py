"""The Processor API: user processors with stores, ``forward`` and punctuators, and the
runtime node that runs one (:class:`ProcessorNode`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import errors
from .nodes import Node, TaskContext
from .records import Record
from .stores import KeyValueStore
from .window_store import WindowStore

STREAM_TIME = "stream_time"
WALL_CLOCK = "wall_clock"


class Processor:
    """Subclass and override :meth:`process`; ``self.context`` is set by :meth:`init`."""

    context: ProcessorContext

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ProcessorContext:
    """What a processor may do: forward records, use its stores, schedule punctuators."""

    def __init__(self, task: TaskContext, node: ProcessorNode) -> None:
        self._task = task
        self._node = node
        self._stores: tuple[str, ...] = node.store_names

    @property
    def application_id(self) -> str:
        return self._task.application_id

    @property
    def partition(self) -> int:
        """The task's partition number."""
        return self._task.partition

    @property
    def stream_time(self) -> int | None:
        """The largest record timestamp the task has seen (None before the first record)."""
        return self._task.stream_time()

    def wall_clock_ms(self) -> int:
        return self._task.wall_clock_ms()

    def forward(self, record: Record) -> None:
        """Pass ``record`` to the processor's children."""
        if not isinstance(record, Record):
            raise errors.InvalidArgument(f"forward takes a Record, got {type(record).__name__}")
        self._node.forward(record)

    def get_store(self, name: str) -> KeyValueStore | WindowStore:
        """A store this processor was given (``stores=[...]``): a :class:`~.stores.KeyValueStore`,
        or for a windowed store (``add_window_store``, or a DSL windowed aggregation's) a
        :class:`~.window_store.WindowStore`."""
        if name not in self._stores:
            raise errors.StoreNotFound(f"processor {self._node.name!r} was not given store {name!r} "
                                       f"(it has {list(self._stores)})")
        windowed = self._task.window_store(name)
        return self._task.store(name) if windowed is None else windowed

    def schedule(self, interval_ms: int, punctuation: str, callback: Callable[[int], Any]) -> None:
        """Call ``callback(time)`` every ``interval_ms`` of stream time (``"stream_time"``:
        when records advance it) or of wall-clock time (``"wall_clock"``)."""
        if isinstance(interval_ms, bool) or not isinstance(interval_ms, int) or interval_ms < 1:
            raise errors.InvalidArgument(f"interval_ms must be a positive integer, got {interval_ms!r}")
        if punctuation not in (STREAM_TIME, WALL_CLOCK):
            raise errors.InvalidArgument(f"punctuation must be {STREAM_TIME!r} or {WALL_CLOCK!r}, got {punctuation!r}")
        if not callable(callback):
            raise errors.InvalidArgument(f"the punctuator's callback must be callable (time) -> None, got "
                                         f"{callback!r:.60}")
        self._task.schedule(interval_ms, punctuation, callback)


class ProcessorNode(Node):
    """A user :class:`Processor` (``stream.process`` / ``add_processor``)."""

    def __init__(self, name: str, factory: Callable[[], Any], stores: tuple[str, ...]) -> None:
        super().__init__(name)
        self.factory = factory
        self.store_names = stores

    def init(self, ctx: TaskContext) -> None:
        super().init(ctx)
        made = self.factory()
        if not all(callable(getattr(made, m, None)) for m in ("init", "process", "close")):
            raise errors.TopologyError(f"processor {self.name!r}: the factory must return a Processor (init, process, "
                                       f"close), got {type(made).__name__}")
        self.processor = made
        self.processor.init(ProcessorContext(ctx, self))

    def process(self, rec: Record) -> None:
        self.processor.process(rec)

    def close(self) -> None:
        self.processor.close()
