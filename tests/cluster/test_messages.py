"""The replication protocol's typed messages and the log's typed calls (cluster/messages.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstreams_embedded import errors
from tstreams_embedded.cluster.messages import (
    ClientCall,
    Fetch,
    FetchReply,
    Hello,
    HelloReply,
    MaintenanceCall,
    MembershipCall,
    ReplyStatus,
    SnapshotBegin,
    SnapshotChunk,
    SnapshotData,
    SnapshotHead,
    decode_call,
    decode_request,
    pack,
    unpack,
)

ints = st.integers(min_value=0, max_value=2**63 - 1)
names = st.text(min_size=1, max_size=20)

requests = st.one_of(
    st.builds(Hello, ints, names, ints),
    st.builds(Fetch, names, ints, ints, ints, ints, ints),
    st.builds(SnapshotBegin, names, ints, ints),
    st.builds(SnapshotChunk, names, ints, names, ints),
)


@given(requests)
def test_every_request_survives_the_wire(req: Any) -> None:
    assert decode_request(pack(req.to_wire())) == req


@given(st.one_of(
    st.builds(HelloReply, st.just(True), st.just(0), ints, ints, ints),
    st.builds(HelloReply, st.just(False), ints, st.just(0), st.just(0), ints),
))
def test_hello_replies_survive_the_wire(rep: HelloReply) -> None:
    assert HelloReply.from_wire(unpack(pack(rep.to_wire()))) == rep


def test_replies_survive_the_wire_per_status() -> None:
    for rep in (FetchReply(1, ReplyStatus.OK, 3, 7, ([5, 3, 9, []],)), FetchReply(2, ReplyStatus.TRUNCATE, 3, to=4),
                FetchReply(3, ReplyStatus.SNAPSHOT, 3, first=10), FetchReply(4, ReplyStatus.NOT_LEADER)):
        assert FetchReply.from_wire(unpack(pack(rep.to_wire()))) == rep
    head = SnapshotHead(5, ReplyStatus.OK, "2-1", 2, 100, 2, 12345)
    assert SnapshotHead.from_wire(unpack(pack(head.to_wire()))) == head
    data = SnapshotData(6, ReplyStatus.OK, b"abc", True)
    assert SnapshotData.from_wire(unpack(pack(data.to_wire()))) == data


def test_an_unknown_status_is_read_as_unknown_not_refused() -> None:
    assert FetchReply.from_wire({"rid": 1, "status": "from-the-future"}).status is ReplyStatus.UNKNOWN


@pytest.mark.parametrize("raw", [
    b"\xc1",  # not msgpack
    pack([1, 2]),  # not a map
    pack({"op": "nope"}),
    pack({"op": "fetch", "node": "n2", "known": "x", "from": 1, "last_epoch": 0}),
    pack({"op": "hello", "node": "n2"}),  # no epoch
    pack({"op": "hello", "epoch": True, "node": "n2"}),  # a boolean is not an epoch
])
def test_malformed_requests_raise_protocol_error(raw: bytes) -> None:
    with pytest.raises(errors.ProtocolError):
        decode_request(raw)


def test_calls_keep_the_log_format() -> None:
    client = ClientCall("c1", 7, True, [[1, "x"]])
    maintenance = MaintenanceCall([[11, "s", 0]])
    membership = MembershipCall(4)
    assert client.to_wire() == ["c1", 7, True, [[1, "x"]]]
    assert maintenance.to_wire() == [None, 0, False, [[11, "s", 0]], "maintenance"]
    assert membership.to_wire() == [None, 0, False, [], "membership", 4]
    for call in (client, maintenance, membership, ClientCall(None, 0, False, [])):
        assert decode_call(unpack(pack(call.to_wire()))) == call


@pytest.mark.parametrize("raw", [[None, 0], "x", [None, 0, False, [], "membership"], [None, 0, False, "rows"],
                                 [None, 0, False, [], "other"], [5, 0, False, []], [None, "s", False, []]])
def test_malformed_calls_raise_protocol_error(raw: Any) -> None:
    with pytest.raises(errors.ProtocolError):
        decode_call(raw)
