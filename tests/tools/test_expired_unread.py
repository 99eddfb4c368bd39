"""Input that expires unread is counted (issue 19, item 23): when TTL compaction deletes
checkpointed transactions that a registered consumer had not read, the items are counted
per stream, consumer and partition, returned by ``list_consumers`` (embedded and served)
and shown by ``tstreams consumers describe``; a warning is logged."""

from __future__ import annotations

import logging

import pytest

from tstreams_embedded.testing import eventually

from .conftest import Site


def _compact_until_gone(site: Site, stream: str) -> None:
    """Compact until the stream's 1 s TTL has deleted everything in it."""
    def gone() -> bool:
        site.engine.compact()
        return all(p.checkpointed == 0 and p.expired == 0 for p in site.engine.backend.describe_partitions(stream))
    eventually(gone, timeout=30, interval=0.2)


def test_items_that_expire_unread_are_counted_and_shown(site: Site, caplog: pytest.LogCaptureFixture) -> None:
    site.engine.create_stream("s", partitions=2, ttl=1)
    producer = site.engine.producer("s")
    first = producer.instant([b"a", b"b"], partition=0)
    producer.instant([b"c", b"d", b"e"], partition=0)
    producer.instant([b"f"], partition=1)
    slow = site.engine.consumer("s", "slow")
    assert slow.get_transaction(0).id == first  # reads only the first transaction of partition 0
    slow.checkpoint()
    fast = site.engine.consumer("s", "fast")
    while fast.get_transaction() is not None:
        pass
    fast.checkpoint()
    with caplog.at_level(logging.WARNING, logger="tstreams_embedded.engine.storage.expiry"):
        _compact_until_gone(site, "s")
    unread = {c.name: c.expired_unread for c in site.engine.backend.list_consumers("s")}
    assert unread == {"fast": {}, "slow": {0: 3, 1: 1}}
    if site.kind == "embedded":  # the server logs it in its own process
        assert any("consumer 'slow' had not read" in r.getMessage() for r in caplog.records)
    rows = site.json("consumers", "describe", "s", "slow")
    assert [(r["partition"], r["expired_unread"]) for r in rows] == [(0, 3), (1, 1)]
    text = site.ok("consumers", "describe", "s", "slow").stdout
    assert "expired unread" in text and "4 items expired unread" in text
    assert "items expired unread" not in site.ok("consumers", "describe", "s", "fast").stdout
    # deleting the consumer drops its counts: a new consumer of that name starts from zero
    site.ok("consumers", "delete", "s", "slow")
    producer.instant([b"g"], partition=0)
    again = site.engine.consumer("s", "slow")
    assert again.get_transaction(0) is not None
    again.checkpoint()
    assert {c.name: c.expired_unread for c in site.engine.backend.list_consumers("s")}["slow"] == {}
