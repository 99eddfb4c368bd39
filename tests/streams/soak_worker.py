"""The memory soak's app, run in a real subprocess: ``soak_worker.py DATA [TTL_MS WINDOW_MS]``.

The pipeline of issue 19's soak: "orders" (order id, customer) -> ``dedup`` by order id (TTL
30 s of event time) -> ``group_by`` customer -> a 10 s windowed count with
``suppress_until_window_closes()`` -> "per-customer" (a short run gives a shorter TTL and
window). It runs until its stdin is closed.
"""

from __future__ import annotations

import sys

import tstreams_embedded as ts
from tstreams_embedded.streams import App, StreamsBuilder, TimeWindows, Topology

APPLICATION_ID = "soak"
TTL_MS = 30_000
WINDOW_MS = 10_000


def topology(ttl_ms: int = TTL_MS, window_ms: int = WINDOW_MS) -> Topology:
    b = StreamsBuilder()
    (b.stream("orders", key_serde="str", value_serde="msgpack")
        .dedup(key=lambda k, v: v[0], ttl_ms=ttl_ms, store="seen-orders")
        .group_by(lambda k, v: v[1], key_serde="str")
        .windowed_by(TimeWindows(size_ms=window_ms, grace_ms=0))
        .count(store="per-customer")
        .suppress_until_window_closes()
        .to_stream()
        .to("per-customer"))
    return b.build()


def main() -> None:
    with ts.open(sys.argv[1]) as engine:
        app = App(engine, application_id=APPLICATION_ID, topology=topology(*map(int, sys.argv[2:4])))
        app.start()
        sys.stdin.read()  # runs until stdin is closed
        app.stop()


if __name__ == "__main__":
    main()
