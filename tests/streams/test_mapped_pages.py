"""An app gives back the pages of the engine's memory map it has read (issue 21: the windowed
count's peak RSS grew with its input, the map's file pages): :class:`MappedPages` after a
read of its input, and an app that has read more than its bound."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol.iteration import iter_transactions
from tstreams_embedded.streams import App, StreamsBuilder
from tstreams_embedded.streams.mapped_pages import MappedPages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and madvise are Linux's")


def mapped_data_kb(directory: Path) -> int:
    """The resident kB of this process's maps of the engine's data file."""
    path = str((directory / "data.mdb").resolve())
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="utf-8") as smaps:
        for line in smaps:
            if "-" in line.split(" ", 1)[0] and not line[0].isupper():
                inside = line.rstrip("\n").endswith(path)
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def write_input(engine: ts.Engine, mb: int) -> None:
    engine.create_stream("in")
    producer = engine.producer("in")
    for i in range(mb):
        producer.instant([bytes([i % 250]) * 1000] * 1000)


def test_release_unmaps_the_pages_read_and_they_read_again(tmp_path: Path) -> None:
    with ts.open(str(tmp_path)) as engine:
        write_input(engine, 8)
        assert sum(len(t.items) for t in iter_transactions(engine.backend, "in", 0)) == 8000
        before = mapped_data_kb(tmp_path)
        assert before > 6_000  # the pages read are resident in this process
        assert MappedPages(str(tmp_path)).release() > 0
        assert mapped_data_kb(tmp_path) < before - 6_000
        assert sum(len(t.items) for t in iter_transactions(engine.backend, "in", 0)) == 8000  # read again


def test_an_app_reading_past_the_bound_keeps_few_of_the_maps_pages(tmp_path: Path) -> None:
    with ts.open(str(tmp_path)) as engine:
        write_input(engine, 12)
        MappedPages(str(tmp_path)).release()
        b = StreamsBuilder()
        b.stream("in", value_serde="bytes").filter(lambda _k, v: v[0] == 255).to("out")
        app = App(engine, application_id="a", topology=b.build())
        app.mapped_pages.every_bytes = 2 << 20
        app.run(until_idle=True)
        assert app.metrics["records"] == 12_000
        assert mapped_data_kb(tmp_path) < 6_000  # not the 12 MB read
        app.close()


def test_a_served_engine_has_no_map_to_release() -> None:
    assert MappedPages(None).release() == 0
