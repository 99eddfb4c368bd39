"""``tstreams streams describe`` names the producer of each open transaction (``--json``:
``open[].producer``; the table: a "producer" column), ``null``/``-`` when not known, and no
longer lists the transaction once it is checkpointed. Embedded (``--data``) and served
(``--connect``) alike."""

from __future__ import annotations

from tstreams_embedded.engine.protocol import ops as O

from .conftest import Site


def test_describe_names_the_producer_of_an_open_transaction(site: Site) -> None:
    site.engine.create_stream("s", partitions=2)
    txn = site.engine.producer("s", partition=0, name="loader@batch-3").new_transaction()
    txn.send(b"x")
    txn.flush()
    [bare] = site.engine.backend.submit([O.Open("s", 1, 60_000)])  # as older versions wrote it: no name

    p0, p1 = site.json("streams", "describe", "s")
    assert [(t["id"], t["items"], t["producer"]) for t in p0["open"]] == [(txn.id, 1, "loader@batch-3")]
    assert [(t["id"], t["producer"]) for t in p1["open"]] == [(bare, None)]
    table = site.ok("streams", "describe", "s").stdout
    assert "producer" in table and "loader@batch-3" in table

    txn.checkpoint()
    p0, _ = site.json("streams", "describe", "s")
    assert p0["open"] == [] and "loader@batch-3" not in site.ok("streams", "describe", "s").stdout
