"""Bytewax 0.21, the stream–table join with its ``join`` operator (state per key).

One ``FileSource`` of the combined file (table rows, then events, each tagged with its side)
-> ``json.loads`` -> ``branch`` into rows and events, both keyed by user -> ``op.join(rows,
events, insert_mode="last", emit_mode="running")`` (the last row and the last event per
key, emitted on every update) -> keep the tuples emitted for an event that has a row (an
inner stream–table join; rows all precede events, so a row never re-emits an old event)
-> ``FileSink``. Recovery on, as in the windowed-count job: SQLite, 1-s snapshots.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.streams.jobs import spec_from_argv
from benchmarks.streams.jobs.bytewax_job import run_flow


def build_flow(input_path: str, output_path: str) -> Any:
    import bytewax.operators as op
    from bytewax.connectors.files import FileSink, FileSource
    from bytewax.dataflow import Dataflow

    flow = Dataflow("enrich")
    lines = op.input("in", flow, FileSource(input_path))
    records = op.map("parse", lines, json.loads)
    sides = op.branch("side", records, lambda r: r["side"] == "row")
    rows = op.key_on("rows", sides.trues, lambda r: r["user"])
    events = op.key_on("events", sides.falses, lambda e: e["user"])
    joined = op.join("join", rows, events, insert_mode="last", emit_mode="running")

    def result(key_pair: tuple[str, tuple[Any, Any]]) -> tuple[str, str] | None:
        _user, (row, event) = key_pair
        if row is None or event is None:
            return None
        return ("out", json.dumps([event["n"], row["tier"]]))

    out = op.filter_map("result", joined, result)
    op.output("out", out, FileSink(Path(output_path)))
    return flow


def run(spec: dict[str, Any]) -> None:
    run_flow(build_flow, spec, 1)


if __name__ == "__main__":
    run(spec_from_argv())
