"""The ZeroMQ replication endpoint: polled after it was closed, it raises EngineClosed (the
serving loop ends on that, and only on that)."""

from __future__ import annotations

import pytest

from tstreams_embedded import errors
from tstreams_embedded.cluster.transport import ZmqTransport


def test_polling_a_closed_replication_endpoint_raises_engine_closed() -> None:
    server = ZmqTransport().listen("tcp://127.0.0.1:*")
    assert server.poll(0.0) == []
    server.close()
    with pytest.raises(errors.EngineClosed, match="is closed"):
        server.poll(0.0)
