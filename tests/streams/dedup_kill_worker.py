"""The dedup kill test's pipeline, run in a real subprocess: ``dedup_kill_worker.py DATA run|finish``.

"orders" (keyed by customer) -> dedup by order id (TTL 1000 ms of event time) -> join with
the table "customers" (the customer's tier) -> "unique"; and the customers per tier
(``group_by(tier).count()``) in the store "per-tier".
``run`` processes until killed; ``finish`` processes until idle and exits.
"""

from __future__ import annotations

import sys

import tstreams_embedded as ts
from tstreams_embedded.streams import App, StreamsBuilder, Topology

TTL_MS = 1000


def topology() -> Topology:
    b = StreamsBuilder()
    customers = b.table("customers", key_serde="str", value_serde="json")
    customers.group_by(lambda k, c: (c["tier"], c), key_serde="str").count(store="per-tier")
    (b.stream("orders", key_serde="str", value_serde="json")
        .dedup(key=lambda k, v: v["id"], ttl_ms=TTL_MS, store="seen-orders")
        .join(customers, lambda order, customer: {**order, "tier": customer["tier"]})
        .to("unique", key_serde="str", value_serde="json"))
    return b.build()


def main() -> None:
    data, mode = sys.argv[1], sys.argv[2]
    with ts.open(data, compaction_interval=None) as engine:
        app = App(engine, application_id="dedup-kill", topology=topology(), commit_records=7, commit_interval_ms=5)
        if mode == "finish":
            app.run(until_idle=True)
            return
        app.start()
        sys.stdin.read()  # runs until killed (stdin stays open)
        app.stop()


if __name__ == "__main__":
    main()
