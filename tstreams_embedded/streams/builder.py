"""The DSL's entry point: :class:`StreamsBuilder` builds a :class:`~.topology.Topology`.

It is a :class:`~.topology.TopologyGraph` with the sources of the DSL: streams
(:mod:`.kstream`), tables (:mod:`.table`), global tables (:mod:`.global_table`), and the
Processor API's stores and processors (:mod:`.processor`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .. import errors
from ..engine.protocol.validate import check_name
from .global_table import GlobalTable, add_global_table
from .kstream import KStream
from .serdes import SerdeSpec
from .table import Table, source_table
from .topology import TopologyGraph

DAY_MS = 86_400_000
#: the longest window size or retention of a processor's windowed store (about 10,000 years:
#: window ends and expiry stay inside 64-bit window keys for every valid timestamp)
MAX_WINDOW_MS = 1 << 48


class StreamsBuilder(TopologyGraph):
    """Builds a topology with the DSL (``stream``, ``filter``, ``group_by``, …) or the
    Processor API (``add_state_store``, ``add_processor`` / ``stream.process``)."""

    def stream(self, name: str, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "bytes",
               timestamp: Callable[[Any, Any], int] | None = None) -> KStream:
        """A stream of records read from the engine stream ``name``.

        Items written by this library (envelopes) carry key, value and timestamp; any other
        item is a value with key None and its transaction's time. ``timestamp(key, value)``
        overrides the timestamp (event time, epoch ms)."""
        check_name(name)
        if timestamp is not None and not callable(timestamp):
            raise errors.InvalidArgument("timestamp must be a function (key, value) -> epoch ms")
        return KStream(self, self.add_source_node(name, key_serde, value_serde, timestamp), key_changed=False)

    def add_source(self, stream: str, key_serde: SerdeSpec, value_serde: SerdeSpec) -> KStream:
        """A source node reading ``stream`` (checked like :meth:`stream`)."""
        check_name(stream)
        return KStream(self, self.add_source_node(stream, key_serde, value_serde, None), key_changed=False)

    def table(self, name: str, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack",
              store: str | None = None) -> Table:
        """A table (KTable) of the latest value per key of stream ``name`` (a None value
        deletes the key), materialized in store ``store`` (default ``<name>-table``)."""
        return source_table(self, name, key_serde, value_serde, store)

    def global_table(self, name: str, *, key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack",
                     store: str | None = None) -> GlobalTable:
        """A global table: stream ``name`` replicated whole to every task (see
        :mod:`.global_table`); join it with ``stream.join(table, joiner, key_selector=…)``."""
        return add_global_table(self, name, key_serde, value_serde, store)

    def add_state_store(self, name: str, *, key_serde: SerdeSpec = "msgpack",
                        value_serde: SerdeSpec = "msgpack") -> StreamsBuilder:
        """Declare a key-value store for processors (``stores=[name]``)."""
        self.add_store(name, key_serde, value_serde)
        return self

    def add_window_store(self, name: str, *, size_ms: int, retention_ms: int | None = None,
                         key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack") -> StreamsBuilder:
        """Declare a windowed store for processors (``stores=[name]``; ``get_store`` gives a
        :class:`~.window_store.WindowStore`): windows of ``size_ms``, deleted once their end
        is ``retention_ms`` (default: ``max(size_ms, 1 day)``, at least ``size_ms``) behind
        the task's stream time."""
        for value, what in ((size_ms, "size_ms"), (retention_ms, "retention_ms")):
            if value is None and what == "retention_ms":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WINDOW_MS:
                raise errors.InvalidArgument(f"{what} must be a positive integer of ms (at most {MAX_WINDOW_MS}), "
                                             f"got {value!r:.40}")
        retention = max(size_ms, DAY_MS) if retention_ms is None else retention_ms
        if retention < size_ms:
            raise errors.InvalidArgument(f"retention_ms must be at least size_ms ({size_ms}), got {retention}")
        self.add_store(name, key_serde, value_serde, windowed=True, size_ms=size_ms, retention_ms=retention)
        return self

    def add_processor(self, name: str, factory: Callable[[], Any], parent: KStream,
                      stores: Iterable[str] = ()) -> KStream:
        """A user processor (see :class:`~.processor.Processor`) fed by ``parent``."""
        if not isinstance(parent, KStream) or parent.builder is not self:
            raise errors.TopologyError(f"add_processor: parent must be a KStream of this builder, got {parent!r:.60}")
        return parent.process(factory, stores=stores, name=name)


__all__ = ["StreamsBuilder"]
