"""Stream processing on the engine: a Kafka-Streams-style topology DSL, state stores inside
the engine, event-time windows, and exactly-once processing in ONE engine write per commit.

>>> from tstreams_embedded.streams import StreamsBuilder, App, TimeWindows
>>> b = StreamsBuilder()
>>> counts = (b.stream("views", value_serde="json", timestamp=lambda k, v: v["ts"])
...     .group_by(lambda k, v: v["page"])
...     .windowed_by(TimeWindows(size_ms=300_000, grace_ms=10_000))
...     .count(store="views-per-page"))
>>> counts.suppress_until_window_closes().to_stream().to("page-counts", value_serde="json")

See ``docs/STREAMS.md``.
"""

from __future__ import annotations

from .app import App
from .app_config import AppConfig, Processing
from .builder import StreamsBuilder
from .decoding import decode
from .driver import TestDriver
from .global_table import GlobalTable
from .kstream import BranchedKStream, KGroupedStream, KStream, KTable, WindowedKStream
from .nodes.table import Change
from .processor import STREAM_TIME, WALL_CLOCK, Processor, ProcessorContext
from .produce import send_records
from .record_errors import RecordErrorPolicy
from .records import Record, partition_of
from .serdes import Serde, serde
from .stores import KeyValueStore, ReadOnlyKeyValueStore, ReadOnlyWindowStore
from .table import GroupedTable, Table
from .topology import Topology
from .window_store import WindowStore
from .windows import CalendarWindows, JoinWindows, SessionWindows, SlidingWindows, TimeWindows, Windowed, Windows

__all__ = [
    "STREAM_TIME",
    "WALL_CLOCK",
    "App",
    "AppConfig",
    "BranchedKStream",
    "CalendarWindows",
    "Change",
    "GlobalTable",
    "GroupedTable",
    "JoinWindows",
    "Processing",
    "RecordErrorPolicy",
    "KGroupedStream",
    "KStream",
    "KTable",
    "KeyValueStore",
    "Processor",
    "ProcessorContext",
    "ReadOnlyKeyValueStore",
    "ReadOnlyWindowStore",
    "Record",
    "Serde",
    "SessionWindows",
    "SlidingWindows",
    "StreamsBuilder",
    "Table",
    "TestDriver",
    "TimeWindows",
    "Topology",
    "Windowed",
    "WindowStore",
    "WindowedKStream",
    "Windows",
    "decode",
    "partition_of",
    "send_records",
    "serde",
]
