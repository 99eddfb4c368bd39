"""One instance of the global-table scale-out test's application, in a real subprocess:
``global_worker.py DATA|tcp://HOST:PORT NAME`` (an engine directory or a ``tstreams serve``,
and the instance name). Application
``gapp`` left-joins the stream ``orders`` with the global table ``rates`` (the row's
version ``v``) into ``enriched``, with 1 s leases; it runs until it is killed (or stdin
closes) and prints ``started`` once its bootstrap is done."""

from __future__ import annotations

import sys
from typing import Any

import tstreams_embedded as ts
from tstreams_embedded.streams import App, StreamsBuilder
from tstreams_embedded.streams.topology import Topology

APPLICATION = "gapp"
LEASE_MS = 1000


def topology() -> Topology:
    b = StreamsBuilder()
    rates = b.global_table("rates", key_serde="str", value_serde="json")

    def enrich(order: Any, rate: Any) -> list[Any]:
        return [order["id"], order["cc"], None if rate is None else rate["v"]]
    (b.stream("orders", key_serde="str", value_serde="json")
        .left_join(rates, enrich, key_selector=lambda k, order: order["cc"])
        .to("enriched", key_serde="str", value_serde="json"))
    return b.build()


def main() -> None:
    data, name = sys.argv[1], sys.argv[2]
    with (ts.connect(data) if data.startswith("tcp://") else ts.open(data, compaction_interval=None)) as engine:
        app = App(engine, application_id=APPLICATION, topology=topology(), instance_name=name,  # type: ignore[arg-type]
                  commit_records=20, commit_interval_ms=5, lease_ms=LEASE_MS)
        app.start()
        print("started", flush=True)
        sys.stdin.read()  # runs until killed (or stdin closes)
        app.close()


if __name__ == "__main__":
    main()
