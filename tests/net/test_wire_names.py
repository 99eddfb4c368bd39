"""Issue 19 item 17: names on the wire are validated as everywhere else.

A ``KeepAlive`` naming a stream of 10,000 characters was accepted and written to the
commit log (an unknown stream is skipped, not refused); it is now ``InvalidArgument``,
embedded and served alike, and nothing is logged.
"""

from __future__ import annotations

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O


@pytest.mark.parametrize("name", ["s" * 10_000, "", "a\x00b", 7])
def test_keepalive_with_an_invalid_stream_name_is_refused(tstreams_engine: ts.Engine, name: object) -> None:
    e = tstreams_engine
    e.create_stream("k", partitions=1)
    txn = e.producer("k").new_transaction()
    txn.send(b"x")
    txn.flush()
    before = e.backend.stats()["log_seq"]
    with pytest.raises(errors.InvalidArgument, match="stream name"):
        e.backend.submit([O.KeepAlive([[name, 0, txn.id]], 10_000)], durable=False)
    assert e.backend.stats()["log_seq"] == before  # nothing written to the commit log
    # a valid unknown stream is still skipped (a transaction whose stream was deleted)
    assert e.backend.submit([O.KeepAlive([["gone", 0, txn.id], ["k", 0, txn.id]], 10_000)], durable=False) == [1]
    txn.checkpoint()
