"""The store-cache memory test's app, run in a real subprocess: ``cache_worker.py DATA CACHE_BYTES``.

"counts-in" (str keys) -> ``group_by_key().count()`` in the store "counts", with
``App(store_cache_bytes=CACHE_BYTES)``, one partition (one task). It runs until its stdin is
closed.
"""

from __future__ import annotations

import sys

import tstreams_embedded as ts
from tstreams_embedded.streams import App, StreamsBuilder, Topology

APPLICATION_ID = "cache"


def topology() -> Topology:
    b = StreamsBuilder()
    b.stream("counts-in", key_serde="str", value_serde="msgpack").group_by_key(key_serde="str").count(store="counts")
    return b.build()


def main() -> None:
    with ts.open(sys.argv[1]) as engine:
        app = App(engine, application_id=APPLICATION_ID, topology=topology(), store_cache_bytes=int(sys.argv[2]))
        app.start()
        sys.stdin.read()  # runs until stdin is closed
        app.stop()


if __name__ == "__main__":
    main()
