"""One instance of the restart tests' application in a real subprocess, started WITHOUT a
``static_id``: ``restart_worker.py DATA LEASE_MS``. It joins application ``restart``
(:func:`topology`), runs its share of the tasks with ``start()``, prints
``started`` and runs until it is killed (or stdin closes)."""

from __future__ import annotations

import sys

import tstreams_embedded as ts
from tstreams_embedded.streams import App, StreamsBuilder
from tstreams_embedded.streams.topology import Topology

APP_ID = "restart"


def topology() -> Topology:
    """Count per key (store ``n``) and copy every record to ``copy``."""
    b = StreamsBuilder()
    s = b.stream("in", key_serde="str", value_serde="json")
    s.group_by_key(key_serde="str").count(store="n")
    s.to("copy", key_serde="str", value_serde="json")
    return b.build()


def main() -> None:
    with ts.open(sys.argv[1], compaction_interval=None) as engine:
        app = App(engine, application_id=APP_ID, topology=topology(), lease_ms=int(sys.argv[2]),
                  commit_interval_ms=5)
        app.start()
        print("started", flush=True)
        sys.stdin.read()
        app.close()


if __name__ == "__main__":
    main()
