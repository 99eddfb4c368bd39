"""The replication protocol's messages and the log's calls, as typed records.

Every message between nodes on the replication port is one record here (a
:class:`~typing.NamedTuple`, in the style of :mod:`tstreams_embedded.engine.protocol.ops`), and so is
every call a log entry carries. Nothing else builds or reads their wire form.

**Requests** (follower or candidate → a node's replication port):

=====================  =====================================================================
:class:`Hello`         a candidate of ``epoch`` asks for the node's log position
:class:`Fetch`         a follower asks the leader for entries from ``from_index`` (and so
                       acknowledges every entry before it)
:class:`SnapshotBegin` a follower asks the leader to start a snapshot transfer
:class:`SnapshotChunk` the next chunk of a transfer, at ``offset``
=====================  =====================================================================

**Replies** carry the request's ``rid`` and a :class:`ReplyStatus` (a :class:`HelloReply`
carries ``ok`` instead): :class:`FetchReply`, :class:`SnapshotHead`, :class:`SnapshotData`,
and :class:`ErrorReply` for a request the node could not read.

**Calls** (the contents of a log entry, :mod:`.log`): a client's batch
(:class:`ClientCall`), engine maintenance (:class:`MaintenanceCall`) or a membership change
(:class:`MembershipCall`).

Encoding: a message is a msgpack map (requests name their kind in ``op``); a call is a
msgpack array ``[client_id, seq, durable, rows]``, with a fifth field ``"maintenance"``, or
``"membership", size``. A malformed message raises
:class:`~tstreams_embedded.errors.ProtocolError` when decoded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any, NamedTuple, cast

import msgpack

from .. import errors

Wire = dict[str, Any]


def pack(value: Any) -> bytes:
    return cast(bytes, msgpack.packb(value, use_bin_type=True))


def unpack(raw: bytes | memoryview) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


class ReplyStatus(str, Enum):
    """What a reply says about its request (the wire value is the string)."""

    OK = "ok"
    NOT_LEADER = "not_leader"  # the node asked does not lead: ask the leader ZooKeeper names
    FENCED = "fenced"  # the follower knows a newer epoch than this leader's: it steps down
    SNAPSHOT = "snapshot"  # the leader's log starts after the follower's: catch up by snapshot
    TRUNCATE = "truncate"  # the follower's log diverges after ``to``: drop the entries after it
    BUSY = "busy"  # too many snapshot transfers run: ask again later
    GONE = "gone"  # no such snapshot transfer (or not at that offset): start again
    UNKNOWN = "unknown"  # a status this node does not know (a newer peer)

    @classmethod
    def parse(cls, value: Any) -> ReplyStatus:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


def _int(d: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.ProtocolError(f"replication message field {key!r} must be an integer, got {value!r}")
    return value


def _str(d: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = d.get(key, default)
    if not isinstance(value, str):
        raise errors.ProtocolError(f"replication message field {key!r} must be a string, got {value!r}")
    return value


# ---------------------------------------------------------------------------------- requests
class Hello(NamedTuple):
    """A candidate that bumped the epoch to ``epoch`` asks for the node's log position; a node
    that answers refuses every older epoch from then on."""

    epoch: int
    node: str
    rid: int = 0

    def to_wire(self) -> Wire:
        d: Wire = {"op": "hello", "epoch": self.epoch, "node": self.node}
        if self.rid:  # (hellos go on a fresh connection each: they need no request id)
            d["rid"] = self.rid
        return d

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> Hello:
        return cls(_int(d, "epoch"), _str(d, "node", ""), _int(d, "rid", 0))


class Fetch(NamedTuple):
    """A follower asks the leader for the entries from ``from_index``; ``last_epoch`` is the
    epoch of its entry ``from_index - 1`` (the log-matching check), ``known`` the newest epoch
    it knows, ``commit`` its commit index (a fetch with nothing new is parked until the
    leader has entries or a newer commit index)."""

    node: str
    known: int
    from_index: int
    last_epoch: int
    commit: int
    rid: int = 0
    #: the follower's ZooKeeper session: the leader counts the fetch only if it owns ``node``
    session: str = ""

    def to_wire(self) -> Wire:
        return {"op": "fetch", "rid": self.rid, "node": self.node, "known": self.known, "from": self.from_index,
                "last_epoch": self.last_epoch, "commit": self.commit, "session": self.session}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> Fetch:
        return cls(_str(d, "node", ""), _int(d, "known"), _int(d, "from"), _int(d, "last_epoch"),
                   _int(d, "commit", 0), _int(d, "rid", 0), _str(d, "session", ""))


class SnapshotBegin(NamedTuple):
    """A follower asks the leader to start sending a snapshot of its state."""

    node: str
    known: int
    rid: int = 0

    def to_wire(self) -> Wire:
        return {"op": "snapshot", "sid": None, "node": self.node, "known": self.known, "rid": self.rid}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> SnapshotBegin:
        return cls(_str(d, "node", ""), _int(d, "known", 0), _int(d, "rid", 0))


class SnapshotChunk(NamedTuple):
    """The next chunk of transfer ``sid``, starting at byte ``offset``."""

    sid: str
    offset: int
    node: str
    rid: int = 0

    def to_wire(self) -> Wire:
        return {"op": "snapshot", "sid": self.sid, "offset": self.offset, "node": self.node, "rid": self.rid}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> SnapshotChunk:
        offset = d.get("offset", -1)  # a bad offset is answered GONE, as a wrong one is
        if isinstance(offset, bool) or not isinstance(offset, int):
            offset = -1
        return cls(str(d.get("sid")), offset, _str(d, "node", ""), _int(d, "rid", 0))


Request = Hello | Fetch | SnapshotBegin | SnapshotChunk


def decode_request(raw: bytes | memoryview) -> Request:
    """The request in ``raw``, or :class:`~tstreams_embedded.errors.ProtocolError`."""
    try:
        d = unpack(raw)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several classes
        raise errors.ProtocolError(f"a replication request is not msgpack: {exc}") from None
    if not isinstance(d, dict):
        raise errors.ProtocolError("a replication request must be a map")
    op = d.get("op")
    if op == "hello":
        return Hello.from_wire(d)
    if op == "fetch":
        return Fetch.from_wire(d)
    if op == "snapshot":
        return SnapshotBegin.from_wire(d) if d.get("sid") is None else SnapshotChunk.from_wire(d)
    raise errors.ProtocolError(f"unknown replication operation {op!r}")


# ---------------------------------------------------------------------------------- replies
class HelloReply(NamedTuple):
    """``ok`` with the node's log position ``(last_epoch, last_index)``, or not ``ok`` with
    the newer epoch it already answered (``known``)."""

    ok: bool
    known: int = 0
    last_epoch: int = 0
    last_index: int = 0
    rid: int = 0

    @property
    def position(self) -> tuple[int, int]:
        return self.last_epoch, self.last_index

    def to_wire(self) -> Wire:
        d: Wire = ({"ok": True, "last_epoch": self.last_epoch, "last_index": self.last_index} if self.ok
                   else {"ok": False, "known": self.known})
        if self.rid:
            d["rid"] = self.rid
        return d

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> HelloReply:
        if d.get("ok") is True:
            return cls(True, 0, _int(d, "last_epoch"), _int(d, "last_index"), _int(d, "rid", 0))
        return cls(False, _int(d, "known", 0), rid=_int(d, "rid", 0))


class FetchReply(NamedTuple):
    """The leader's answer to a :class:`Fetch`: ``OK`` with ``entries`` (wire form,
    :meth:`.log.Entry.to_wire`) and its ``commit`` index; ``TRUNCATE`` to ``to``;
    ``SNAPSHOT`` when its log starts at ``first``; ``NOT_LEADER``; ``FENCED``."""

    rid: int
    status: ReplyStatus
    epoch: int = 0
    commit: int = 0
    entries: Sequence[Sequence[Any]] = ()
    to: int = 0
    first: int = 0

    def to_wire(self) -> Wire:
        d: Wire = {"rid": self.rid, "status": self.status.value, "epoch": self.epoch}
        if self.status is ReplyStatus.OK:
            d["commit"] = self.commit
            d["entries"] = list(self.entries)
        elif self.status is ReplyStatus.TRUNCATE:
            d["to"] = self.to
        elif self.status is ReplyStatus.SNAPSHOT:
            d["first"] = self.first
        return d

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> FetchReply:
        status = ReplyStatus.parse(d.get("status"))
        entries = d.get("entries", [])
        if not isinstance(entries, list):
            raise errors.ProtocolError("a fetch reply's entries must be a list")
        return cls(_int(d, "rid", 0), status, _int(d, "epoch", 0), _int(d, "commit", 0), tuple(entries),
                   _int(d, "to", 0), _int(d, "first", 0))


class SnapshotHead(NamedTuple):
    """The answer to :class:`SnapshotBegin`: ``OK`` with the transfer ``sid`` and the position
    ``(at_index, index_epoch, now_ms)`` the snapshot stops at; or ``BUSY``/``NOT_LEADER``."""

    rid: int
    status: ReplyStatus
    sid: str = ""
    epoch: int = 0
    at_index: int = 0
    index_epoch: int = 0
    now_ms: int = 0

    def to_wire(self) -> Wire:
        if self.status is not ReplyStatus.OK:
            return {"rid": self.rid, "status": self.status.value}
        return {"rid": self.rid, "status": self.status.value, "sid": self.sid, "epoch": self.epoch,
                "index": self.at_index, "index_epoch": self.index_epoch, "now_ms": self.now_ms}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> SnapshotHead:
        status = ReplyStatus.parse(d.get("status"))
        if status is not ReplyStatus.OK:
            return cls(_int(d, "rid", 0), status)
        return cls(_int(d, "rid", 0), status, _str(d, "sid"), _int(d, "epoch"), _int(d, "index"),
                   _int(d, "index_epoch"), _int(d, "now_ms"))


class SnapshotData(NamedTuple):
    """The answer to :class:`SnapshotChunk`: ``OK`` with ``data`` (``done`` on the last
    chunk), or ``GONE``."""

    rid: int
    status: ReplyStatus
    data: bytes = b""
    done: bool = False

    def to_wire(self) -> Wire:
        if self.status is not ReplyStatus.OK:
            return {"rid": self.rid, "status": self.status.value}
        return {"rid": self.rid, "status": self.status.value, "data": self.data, "done": self.done}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> SnapshotData:
        status = ReplyStatus.parse(d.get("status"))
        data = d.get("data", b"")
        if not isinstance(data, bytes):
            raise errors.ProtocolError("a snapshot chunk's data must be bytes")
        return cls(_int(d, "rid", 0), status, data, bool(d.get("done", False)))


class ErrorReply(NamedTuple):
    """The answer to a request the node could not read."""

    error: str
    rid: int = 0

    def to_wire(self) -> Wire:
        return {"error": self.error, "rid": self.rid}


Reply = HelloReply | FetchReply | SnapshotHead | SnapshotData | ErrorReply


def reply_rid(raw: Mapping[str, Any]) -> int | None:
    """The request id a raw reply answers (None if it has none)."""
    rid = raw.get("rid")
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else None


# ---------------------------------------------------------------------------------- calls
#: How many of a client's latest requests the replicated de-duplication window remembers
#: (the applier); a client keeps the sequence numbers of its unanswered requests within it.
DEDUP_WINDOW = 64
#: The fifth field of a call that marks engine maintenance.
MAINTENANCE = "maintenance"
#: The fifth field of a call that marks a membership change (the sixth holds the size).
MEMBERSHIP = "membership"


class ClientCall(NamedTuple):
    """A client's submit: ``rows`` are encoded operation records
    (:func:`tstreams_embedded.engine.protocol.ops.encode`); ``(client_id, seq)`` identify it for the
    replicated de-duplication window (``client_id`` None: not de-duplicated)."""

    client_id: str | None
    seq: int
    durable: bool
    rows: list[list[Any]]

    def to_wire(self) -> list[Any]:
        return [self.client_id, self.seq, self.durable, self.rows]


class MaintenanceCall(NamedTuple):
    """Engine maintenance (``Compact`` records) every node applies alike
    (:class:`~tstreams_embedded.engine.protocol.ops.MaintenanceBatch`)."""

    rows: list[list[Any]]

    def to_wire(self) -> list[Any]:
        return [None, 0, False, self.rows, MAINTENANCE]


class MembershipCall(NamedTuple):
    """Sets the size quorums are counted on (:mod:`.membership`)."""

    size: int

    def to_wire(self) -> list[Any]:
        return [None, 0, False, [], MEMBERSHIP, self.size]


Call = ClientCall | MaintenanceCall | MembershipCall


def decode_call(v: Sequence[Any]) -> Call:
    """The call in a log entry's wire form, or :class:`~tstreams_embedded.errors.ProtocolError`."""
    if not isinstance(v, (list, tuple)) or len(v) < 4:
        raise errors.ProtocolError(f"a log call must be [client_id, seq, durable, rows, ...], got {v!r}")
    kind = v[4] if len(v) > 4 else None
    if kind == MEMBERSHIP:
        if len(v) < 6 or isinstance(v[5], bool) or not isinstance(v[5], int):
            raise errors.ProtocolError(f"a membership call needs a size, got {v!r}")
        return MembershipCall(v[5])
    rows = v[3]
    if not isinstance(rows, list):
        raise errors.ProtocolError("a log call's rows must be a list")
    if kind == MAINTENANCE:
        return MaintenanceCall(rows)
    if kind is not None:
        raise errors.ProtocolError(f"unknown log call kind {kind!r}")
    cid, seq = v[0], v[1]
    if (cid is not None and not isinstance(cid, str)) or isinstance(seq, bool) or not isinstance(seq, int):
        raise errors.ProtocolError(f"a client call needs (client_id, seq), got {v[:2]!r}")
    return ClientCall(cid, seq, bool(v[2]), rows)
