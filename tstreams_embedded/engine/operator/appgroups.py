"""Stream-processing applications as the engine stores them: the layout of an application's
group table, and a bounded overview of every application for status pages.

**Layout** (one definition: :mod:`tstreams_embedded.streams.app_members` writes it, the
cluster's status page reads it through :func:`app_overview`). An application
``application_id`` keeps its group in the state store ``<application_id>/__group``:

==============  ===========================================================
key             value
==============  ===========================================================
``m/<member>``  the member's lease ``[member, epoch, deadline]``
``i/<member>``  msgpack ``[host, port]``: where it answers queries (or nil)
``p/<member>``  msgpack ``[host key, pid, start time]``: its process (same-host liveness)
``t/<p>``       the lease of task ``p``: ``[member, epoch, deadline]``
==============  ===========================================================

Its input offsets are those of the consumer named ``application_id``.

**Overview.** :func:`app_overview` finds the applications in ONE read transaction of the
``state`` database by seeking, not scanning: store names are ``<application>/…``, so one seek
finds the next application's first store, one more its group table, and the next
application starts after ``<application>0`` (``0`` follows ``/``). Its cost is bounded by
:class:`AppLimits` whatever the stores hold: at most ``apps`` applications (first by name),
``group_entries`` entries of each group table, ``seeks`` cursor positionings in all (each
non-application store name costs one), ``streams`` streams looked up for each
application's offsets and ``partitions`` per stream; lags are counted as in
:mod:`.overview` (up to ``count_cap`` transactions per row, ``scan_budget`` cursor steps
in all, then ``None``). What is left out is flagged (``truncated``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import lmdb
import msgpack

from ...ids import ID_MULTIPLIER
from ..storage import keys
from ..storage.catalog import stream_of
from ..storage.state_stores import LeaseRecord, unpack_lease
from ..storage.store import Store, entries
from .overview import count_after

GROUP = "__group"
MEMBER = b"m/"
INFO = b"i/"
PROCESS = b"p/"
TASK = b"t/"
_AFTER_SLASH = b"0"  # the byte after "/": "<app>0" sorts after every "<app>/…"


def group_store(application_id: str) -> str:
    """The state store holding an application's membership and task leases."""
    return f"{application_id}/{GROUP}"


def task_key(partition: int) -> bytes:
    """The key of task ``partition``'s lease in the group table."""
    return TASK + b"%d" % partition


@dataclass(frozen=True)
class AppLimits:
    """Bounds of one :func:`app_overview` (see the module docstring)."""

    apps: int = 20
    group_entries: int = 1000
    seeks: int = 2000
    streams: int = 100
    partitions: int = 64
    count_cap: int = 1000
    scan_budget: int = 20_000


@dataclass
class AppMember:
    """A member of an application's group: live while its lease's deadline is ahead."""

    member_id: str
    host: str | None
    port: int | None
    deadline: int  # engine time, epoch ms
    live: bool
    tasks: list[int] = field(default_factory=list)  # the tasks whose lease it holds (unexpired)


@dataclass
class AppInputLag:
    """The application's position on one partition of a stream it reads."""

    stream: str
    partition: int
    offset: int
    lag_txns: int | None  # checkpointed transactions after the offset (capped; None: not counted)
    lag_seconds: float  # the partition head's time minus the offset's time


@dataclass
class AppOverview:
    application_id: str
    members: list[AppMember] = field(default_factory=list)
    unassigned: list[int] = field(default_factory=list)  # tasks in the table no live member holds
    lag: list[AppInputLag] = field(default_factory=list)
    truncated: bool = False


@dataclass
class AppsOverview:
    apps: list[AppOverview]
    truncated: bool  # applications, group entries, streams or partitions were left out
    scan_steps: int  # cursor steps spent counting lags


def app_overview(store: Store, now_ms: int, limits: AppLimits = AppLimits()) -> AppsOverview:
    """The applications of ``store`` (see the module docstring); ``now_ms``: the engine time
    that decides which leases are live."""
    out: list[AppOverview] = []
    budget = [limits.scan_budget]
    truncated = False
    if store.state is None:
        return AppsOverview(out, False, 0)
    with store.read() as txn:
        streams = _streams(txn, store, limits.streams + 1)
        if len(streams) > limits.streams:
            streams, truncated = streams[:limits.streams], True
        cur = txn.cursor(db=store.state)
        seeks = limits.seeks
        found = cur.first()
        while found:
            if seeks <= 0 or len(out) >= limits.apps:
                truncated = True
                break
            name = bytes(cur.key()).split(b"\x00", 1)[0]
            app, slash, _ = name.partition(b"/")
            if not slash:  # not an application's store: the next store name
                seeks -= 1
                found = cur.set_range(name + b"\x01")
                continue
            seeks -= 2
            group = app + b"/" + GROUP.encode() + b"\x00"
            if cur.set_range(group) and bytes(cur.key()).startswith(group):
                a = _group(store, cur, group, app.decode("utf-8", "replace"), now_ms, limits)
                seeks -= len(streams)
                _lag(txn, store, a, streams, limits, budget)
                truncated = truncated or a.truncated
                out.append(a)
            found = cur.set_range(app + _AFTER_SLASH)
    return AppsOverview(out, truncated, limits.scan_budget - budget[0])


def _streams(txn: lmdb.Transaction, store: Store, n: int) -> list[tuple[str, int, int]]:
    """``(name, id, partitions)`` of the first ``n`` streams by name."""
    out: list[tuple[str, int, int]] = []
    for k, v in entries(txn.cursor(db=store.streams).iternext()):
        if len(out) >= n:
            break
        info = stream_of(store, k, v)
        out.append((info.name, info.id, info.partitions))
    return out


def _group(store: Store, cur: lmdb.Cursor, group: bytes, app: str, now_ms: int, limits: AppLimits) -> AppOverview:
    """Read the group table the cursor is on (at most ``group_entries`` entries)."""
    a = AppOverview(app)
    leases: dict[str, LeaseRecord] = {}
    infos: dict[str, tuple[str | None, int | None]] = {}
    tasks: dict[int, LeaseRecord] = {}
    n = len(group)
    read = 0
    for k, v in entries(cur.iternext()):
        if not k.startswith(group):
            break
        if read >= limits.group_entries:
            a.truncated = True
            break
        read += 1
        key = k[n:]
        v = store.unseal("state", k, v)
        if key.startswith(TASK):
            lease = unpack_lease(v)
            if lease is not None:
                tasks[int(key[len(TASK):])] = lease
        elif key.startswith(MEMBER):
            lease = unpack_lease(v)
            if lease is not None:
                leases[key[len(MEMBER):].decode("utf-8", "replace")] = lease
        elif key.startswith(INFO):
            host, port = msgpack.unpackb(v)
            infos[key[len(INFO):].decode("utf-8", "replace")] = (host, port)
    members: dict[str, AppMember] = {}
    for member, lease in sorted(leases.items()):
        host, port = infos.get(member, (None, None))
        members[member] = AppMember(member, host, port, lease.deadline, lease.live_at(now_ms))
    a.members = list(members.values())
    for p, lease in sorted(tasks.items()):
        holder = members.get(lease.owner)
        if holder is not None and holder.live and lease.deadline > now_ms:
            holder.tasks.append(p)
        else:
            a.unassigned.append(p)
    return a


def _lag(txn: lmdb.Transaction, store: Store, a: AppOverview, streams: list[tuple[str, int, int]],
         limits: AppLimits, budget: list[int]) -> None:
    """The offsets of consumer ``a.application_id`` on ``streams``, with their lag."""
    cur = txn.cursor(db=store.offsets)
    for name, stream_id, partitions in streams:
        prefix = keys.offsets_prefix(stream_id, a.application_id)
        if not cur.set_range(prefix):
            continue
        for k, v in entries(cur.iternext()):
            if not k.startswith(prefix) or len(k) != len(prefix) + 4:
                break
            partition = keys.partition_of_offset_key(k)
            if partition >= min(partitions, limits.partitions):
                a.truncated = a.truncated or partition < partitions
                break
            raw = store.get(txn, "parts", keys.part_key(stream_id, partition))
            head = keys.U64.unpack(raw)[0] if raw else 0
            offset = keys.U64.unpack(store.unseal("offsets", k, v))[0]
            lag_s = max(0, head // ID_MULTIPLIER - offset // ID_MULTIPLIER) / 1000.0
            a.lag.append(AppInputLag(name, partition, offset, count_after(
                txn, store, stream_id, partition, offset, limits.count_cap, budget), lag_s))
