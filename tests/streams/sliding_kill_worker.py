"""The sliding-window kill test's app, run in a real subprocess: ``sliding_kill_worker.py DATA run|finish``.

``in`` (str keys, JSON int values) -> group_by_key -> 50 ms sliding windows (20 ms grace,
retention long enough to keep every window) -> the list of values in aggregation order
(store ``seen``). ``run`` processes until killed; ``finish`` processes until idle and exits.
"""

from __future__ import annotations

from app_worker import run_worker  # a sibling: the script's directory is on sys.path

from tstreams_embedded.streams import App, SlidingWindows, StreamsBuilder

SIZE_MS = 50
GRACE_MS = 20


def topology() -> object:
    b = StreamsBuilder()
    (b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str")
     .windowed_by(SlidingWindows(size_ms=SIZE_MS, grace_ms=GRACE_MS, retention_ms=10**9))
     .aggregate(list, lambda k, v, agg: [*agg, v], store="seen"))
    return b.build()


def main() -> None:
    run_worker(lambda engine: App(engine, application_id="slide", topology=topology(),  # type: ignore[arg-type]
        commit_records=9, commit_interval_ms=5, static_id="slide-worker", store_cache_bytes=4096))


if __name__ == "__main__":
    main()
