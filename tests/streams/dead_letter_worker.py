"""The dead-letter kill test's app, run in a real subprocess: ``dead_letter_worker.py DATA run|finish``.

``in`` (str keys, JSON values) -> group_by_key -> count (store ``n``), with
``on_record_error="dead_letter"``. ``run`` processes until killed; ``finish`` until idle.
"""

from __future__ import annotations

from app_worker import run_worker  # a sibling: the script's directory is on sys.path

from tstreams_embedded.streams import App, StreamsBuilder


def topology() -> object:
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str").count(store="n")
    return b.build()


def main() -> None:
    run_worker(lambda engine: App(engine, application_id="dlq", topology=topology(),  # type: ignore[arg-type]
        on_record_error="dead_letter", commit_records=7, commit_interval_ms=5, static_id="dlq-worker"))


if __name__ == "__main__":
    main()
