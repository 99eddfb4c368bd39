"""An app's input that the stream's TTL deleted before the app read it is counted in the
app's metrics (issue 19, item 23: ``input_expired_unread_total{app,stream,partition}``)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

import tstreams_embedded as ts
from tstreams_embedded.streams import App, StreamsBuilder, send_records
from tstreams_embedded.streams import metrics as M
from tstreams_embedded.testing import FakeClock


def _expired(app: App) -> dict[tuple[str, str], float]:
    text = app.prometheus.exposition().decode()
    family = {f.name: f for f in text_string_to_metric_families(text)}[f"{M.PREFIX}_input_expired_unread"]
    return {(s.labels["stream"], s.labels["partition"]): s.value for s in family.samples
            if s.name.endswith("_total")}


def test_input_that_expires_before_the_app_reads_it_is_counted(tmp_path: Path) -> None:
    clock = FakeClock()
    with ts.open(tmp_path / "d", clock=clock, compaction_interval=None, keepalive_interval=None) as engine:
        engine.create_stream("in", partitions=1, ttl=1)
        engine.create_stream("out", partitions=1)
        b = StreamsBuilder()
        b.stream("in").to("out")
        app = App(engine, application_id="expiring", topology=b.build())
        try:
            send_records(engine, "in", [("k", 1, 1)])
            app.run()  # reads it and stores its offset
            assert _expired(app) == {}
            send_records(engine, "in", [("k", i, 2) for i in range(5)])  # the app falls behind...
            clock.advance(seconds=2)
            assert engine.compact()["transactions_removed"] == 2  # ...and the TTL deletes by age
            assert _expired(app) == {("in", "0"): 5.0}
            assert engine.backend.list_consumers("in")[0].expired_unread == {0: 5}
        finally:
            app.close()
