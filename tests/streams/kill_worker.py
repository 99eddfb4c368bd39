"""The kill test's pipeline, run in a real subprocess: ``kill_worker.py DATA run|finish``.

filter -> group_by_key -> 100 ms tumbling windows (20 ms grace) -> count -> suppress ->
"out", plus group_by(user) (through a repartition stream) -> aggregate (sum of n).
``run`` processes until killed; ``finish`` processes until idle and exits.
"""

from __future__ import annotations

from app_worker import run_worker  # a sibling: the script's directory is on sys.path

from tstreams_embedded.streams import App, StreamsBuilder, TimeWindows


def topology() -> object:
    b = StreamsBuilder()
    views = b.stream("views", key_serde="str", value_serde="json", timestamp=lambda k, v: v["ts"])
    kept = views.filter(lambda k, v: v["page"] != "/health")
    (kept.group_by_key(key_serde="str")
        .windowed_by(TimeWindows(size_ms=100, grace_ms=20, retention_ms=10**9))
        .count(store="counts")
        .suppress_until_window_closes()
        .to_stream()
        .to("out", key_serde="str"))
    (kept.group_by(lambda k, v: v["user"], key_serde="str")
        .aggregate(lambda: 0, lambda k, v, total: total + v["n"], store="totals"))
    return b.build()


def main() -> None:
    run_worker(lambda engine: App(engine, application_id="kill", topology=topology(),  # type: ignore[arg-type]
        commit_records=15, commit_interval_ms=5, static_id="kill-worker"))


if __name__ == "__main__":
    main()
