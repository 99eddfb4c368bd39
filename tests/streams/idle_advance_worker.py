"""The idle-advance kill test's app, run in a real subprocess: ``idle_advance_worker.py DATA run|finish``.

``in`` (str keys, JSON values) -> group_by_key -> 50 ms tumbling windows (grace 200 ms)
-> count -> ``suppress_until_window_closes()`` -> ``out`` as ``"key@start"`` -> count, with
``idle_advance_ms=30`` on the real clock: the last windows close without later records.
"""

from __future__ import annotations

from app_worker import run_worker  # a sibling: the script's directory is on sys.path

from tstreams_embedded.streams import App, StreamsBuilder, TimeWindows
from tstreams_embedded.streams.topology import Topology

SIZE_MS = 50
GRACE_MS = 200
IDLE_ADVANCE_MS = 30


def topology() -> Topology:
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
     .windowed_by(TimeWindows(size_ms=SIZE_MS, grace_ms=GRACE_MS)).count(store="n")
     .suppress_until_window_closes().to_stream()
     .map(lambda w, n: (f"{w.key}@{w.start}", n)).to("out", key_serde="str", value_serde="json"))
    return b.build()


def main() -> None:
    run_worker(lambda engine: App(engine, application_id="idle", topology=topology(), commit_interval_ms=5,
                                  idle_advance_ms=IDLE_ADVANCE_MS, static_id="idle-worker"))


if __name__ == "__main__":
    main()
