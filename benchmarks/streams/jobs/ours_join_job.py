"""Ours, the stream–table join: ``clicks`` joined with the table ``users`` (exactly-once,
durable), output ``[n, tier]`` as JSON to ``enriched``.

Both streams hold records keyed by user (envelopes with JSON values, written before the run);
the table's rows come first, so each event sees its row. ``app.run(until_idle=True)``.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.streams.jobs import report, spec_from_argv

APPLICATION_ID = "enrich"


def topology() -> Any:
    from tstreams_embedded.streams import StreamsBuilder

    b = StreamsBuilder()
    users = b.table("users", key_serde="str", value_serde="json")
    (b.stream("clicks", key_serde="str", value_serde="json")
        .join(users, lambda ev, row: [ev["n"], row["tier"]])
        .to("enriched", key_serde="str", value_serde="json"))
    return b.build()


def run(spec: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    import tstreams_embedded as ts
    from tstreams_embedded.streams import App

    with ts.open(spec["data"], durability=spec.get("durability", "sync")) as engine:
        App(engine, application_id=APPLICATION_ID, topology=topology()).run(until_idle=True)
    report(process_seconds=time.perf_counter() - t0)


if __name__ == "__main__":
    run(spec_from_argv())
