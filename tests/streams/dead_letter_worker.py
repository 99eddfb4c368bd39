"""The dead-letter kill test's app, run in a real subprocess: ``dead_letter_worker.py DATA run|finish``.

``in`` (str keys, JSON values) -> group_by_key -> count (store ``n``), with
``on_record_error="dead_letter"``. ``run`` processes until killed; ``finish`` until idle.
"""

from __future__ import annotations

import sys

import tstreams_embedded as ts
from tstreams_embedded.streams import App, StreamsBuilder


def topology() -> object:
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str").count(store="n")
    return b.build()


def main() -> None:
    data, mode = sys.argv[1], sys.argv[2]
    with ts.open(data, compaction_interval=None) as engine:
        app = App(engine, application_id="dlq", topology=topology(),  # type: ignore[arg-type]
                  on_record_error="dead_letter", commit_records=7, commit_interval_ms=5, static_id="dlq-worker")
        if mode == "finish":
            app.run(until_idle=True)
            print("done", flush=True)
            return
        app.start()
        print("started", flush=True)
        app.stop() if sys.stdin.read() is None else app.stop()  # runs until killed (stdin stays open)


if __name__ == "__main__":
    main()
