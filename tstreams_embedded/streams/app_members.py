"""Membership of an application's instances, and the task leases, kept in the engine.

Every instance of an application (same ``application_id``, any process, embedded, remote or
on a cluster) is a *member*. The group lives in the application's state store
``<application_id>/__group`` (layout defined in :mod:`tstreams_embedded.engine.operator.appgroups`,
which status pages read) and changes only through ``Lease`` records (engine-side
deadlines: one clock decides, the engine's) and ``StoreWrite``:

==============  ===========================================================
key             value
==============  ===========================================================
``m/<member>``  the member's lease ``[member, epoch, deadline]``
``i/<member>``  msgpack ``[host, port]``: where it answers queries (or nil)
``p/<member>``  msgpack ``[host key, pid, start time]``: its process (:mod:`.process_id`)
``t/<p>``       the lease of task ``p``: ``[member, epoch, deadline]``
``g/…``         the global-table lease (:mod:`.global_table`: the one updater)
==============  ===========================================================

A member with a ``static_id`` (like Kafka Streams' ``group.instance.id``) is succeeded at
once by its next incarnation: the restart takes the old incarnation's tasks with a forced
take (still a compare-and-set on the epoch, so the old one is fenced) instead of waiting for
its leases to expire. Two running instances must never share a static id (they would take
the tasks from each other; fencing keeps the output exact, but nothing progresses).

A member whose process is **provably dead** is succeeded the same way, static id or not:
every member records its process (``p/<member>``: host, PID, start time; see
:mod:`.process_id`), and an instance on the same host that finds a member whose PID no
longer runs (or runs another process: PID reuse) takes its tasks at once. A live member on
the same host (a slow or paused one) and any member on another host are never judged so:
they keep their tasks until their leases run out.

A member renews its member lease and all its task leases in ONE batch every
``lease_ms / 3``. A member is *live* while its lease's deadline has not passed. At each
:meth:`Membership.tick` a member reads the table, computes the assignment with the sticky
assignor (:mod:`.assignor`) over the live members, *takes* the free leases of the tasks
assigned to it (a new epoch), and marks for hand-over the tasks it holds that are now
assigned elsewhere (the app commits them, then :meth:`Membership.release` frees them).

Every commit of a task carries :meth:`Membership.fence` (a ``CheckLease`` of its epoch):
once another member took the lease, the old holder's commits fail with ``LeaseConflict``
and write nothing, so a task that was moved can never commit again (exactly-once through
every rebalance). A killed member's leases expire ``lease_ms`` after its last renewal, and
the survivors take its tasks at their next tick.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

import msgpack

from .. import errors
from ..engine.operator.appgroups import INFO, MEMBER, PROCESS, TASK, group_store, task_key
from ..engine.protocol import ops as O
from ..engine.protocol.backend import Backend
from ..engine.storage.state_stores import LeaseRecord, unpack_lease
from .assignor import assign
from .process_id import ProcessId
from .stores import pages

#: expired members are deleted from the table once they are this many leases old
FORGET_AFTER_LEASES = 10


STATIC = "static:"


def new_member_id(name: str, static_id: str | None = None) -> str:
    """A member id: unique per instance *incarnation* (a restarted instance is a new
    member); a static member's id also carries its static id."""
    if static_id is not None:
        return f"{STATIC}{static_id}#{uuid.uuid4().hex[:12]}"
    return f"{name}-{uuid.uuid4().hex[:12]}"


def static_of(member_id: str) -> str | None:
    """The static id of a member id (None for a dynamic member)."""
    if not member_id.startswith(STATIC) or "#" not in member_id:
        return None
    return member_id[len(STATIC):member_id.rindex("#")]


@dataclass(frozen=True)
class MemberInfo:
    """A live member of the group."""

    member_id: str
    host: str | None
    port: int | None
    deadline: int
    epoch: int = 1
    process: ProcessId | None = None  # None: not recorded (never judged dead)


@dataclass
class GroupView:
    """The lease table as read in one snapshot, at the engine time ``now``."""

    now: int
    members: dict[str, MemberInfo] = field(default_factory=dict)  # live ones
    expired: list[str] = field(default_factory=list)  # long-dead members, to forget
    tasks: dict[int, LeaseRecord] = field(default_factory=dict)  # partition -> its task lease

    def owner(self, partition: int) -> str | None:
        """The live holder of task ``partition``'s lease, or None."""
        lease = self.tasks.get(partition)
        if lease is None or not lease.owner or lease.owner not in self.members:
            return None
        return lease.owner

    def is_free(self, partition: int) -> bool:
        lease = self.tasks.get(partition)
        return lease is None or not lease.live_at(self.now)

    def epoch(self, partition: int) -> int:
        lease = self.tasks.get(partition)
        return 0 if lease is None else lease.epoch


def read_group(backend: Backend, application_id: str, lease_ms: int) -> GroupView:
    """The group table of ``application_id`` (``lease_ms``: to decide which members to forget)."""
    store = group_store(application_id)
    view = GroupView(backend.now_ms())
    infos: dict[str, tuple[str | None, int | None]] = {}
    processes: dict[str, ProcessId | None] = {}
    leases: dict[str, LeaseRecord] = {}
    for k, v in pages(backend, store, None, None):
        if k.startswith(TASK):
            lease = unpack_lease(v)
            assert lease is not None
            view.tasks[int(k[len(TASK):])] = lease
        elif k.startswith(MEMBER):
            lease = unpack_lease(v)
            assert lease is not None
            leases[k[len(MEMBER):].decode()] = lease
        elif k.startswith(INFO):
            host, port = msgpack.unpackb(v)
            infos[k[len(INFO):].decode()] = (host, port)
        elif k.startswith(PROCESS):
            processes[k[len(PROCESS):].decode()] = ProcessId.from_wire(msgpack.unpackb(v))
    for member, lease in leases.items():
        host, port = infos.get(member, (None, None))
        if lease.live_at(view.now):
            view.members[member] = MemberInfo(member, host, port, lease.deadline, lease.epoch, processes.get(member))
        elif lease.deadline <= view.now - FORGET_AFTER_LEASES * lease_ms:
            view.expired.append(member)
    return view


class Membership:
    """This instance's membership of its application's group (see the module docstring).

    Thread-safe: the app's heartbeat thread calls :meth:`tick`, its task threads call
    :meth:`fence`, :meth:`release` and :meth:`lost`."""

    def __init__(self, backend: Backend, application_id: str, partitions: int, *, lease_ms: int,
                 host: str | None = None, port: int | None = None, name: str = "instance",
                 static_id: str | None = None) -> None:
        self.backend = backend
        self.application_id = application_id
        self.store = group_store(application_id)
        self.partitions = partitions
        self.lease_ms = lease_ms
        self.host = host
        self.port = port
        self.name = name
        self.static_id = static_id
        self.member_id = new_member_id(name, static_id)
        self._lock = threading.Lock()
        self._member_epoch = 0
        self._held: dict[int, int] = {}  # partition -> epoch of our lease
        self._revoked: set[int] = set()  # held, assigned elsewhere: hand over
        self._last_renew = 0.0
        self.rebalances = 0
        #: tasks assigned to this member whose lease another (live, or dead but not yet
        #: expired) member still holds: they come within ``lease_ms``
        self.pending: set[int] = set()
        #: moves whenever the held or revoked tasks change (the app then reconciles its tasks)
        self.generation = 0
        self.view: GroupView | None = None

    # -- what the task threads use -------------------------------------------------------
    def held(self) -> dict[int, int]:
        """``{partition: epoch}`` of the task leases this member holds."""
        with self._lock:
            return dict(self._held)

    def revoked(self) -> set[int]:
        """Held tasks assigned to another member: commit them, then :meth:`release`."""
        with self._lock:
            return set(self._revoked)

    def fence(self, partition: int, epoch: int) -> O.CheckLease:
        """The record that fences a commit of task ``partition`` at ``epoch``."""
        return O.CheckLease(self.store, task_key(partition), self.member_id, epoch)

    def release(self, partition: int) -> None:
        """Free the lease of a task that was committed and closed (a hand-over)."""
        with self._lock:
            epoch = self._held.pop(partition, None)
            self._revoked.discard(partition)
            self.generation += 1
        if epoch is not None:
            try:
                self.backend.submit([O.Lease(self.store, task_key(partition), self.member_id, epoch, 0)])
            except errors.LeaseConflict:
                pass  # taken over meanwhile: nothing to free

    def lost(self, partition: int, epoch: int) -> None:
        """A commit of task ``partition`` was fenced: the lease is no longer ours."""
        with self._lock:
            if self._held.get(partition) == epoch:
                del self._held[partition]
                self.rebalances += 1
            self._revoked.discard(partition)
            self.generation += 1

    # -- membership ----------------------------------------------------------------------
    def advertise(self, host: str, port: int) -> None:
        """Where this instance answers queries (written now if it already joined)."""
        self.host, self.port = host, port
        if self._member_epoch:
            self.backend.submit([O.StoreWrite(self.store, [[INFO + self.member_id.encode(),
                                                            msgpack.packb([host, port])]])])

    def tick(self, force_renew: bool = False) -> GroupView:
        """Renew (when due), read the table, take assigned free tasks, mark tasks to hand
        over. Returns the view it acted on."""
        if self._member_epoch == 0:
            self._join()
        elif force_renew or time.monotonic() - self._last_renew >= self.lease_ms / 3000.0:
            self._renew()
        view = read_group(self.backend, self.application_id, self.lease_ms)
        with self._lock:
            held = dict(self._held)
        for p, epoch in held.items():  # leases we lost (taken while we were slow)
            lease = view.tasks.get(p)
            if lease is None or not lease.held_by(self.member_id, epoch):
                self.lost(p, epoch)
        # earlier incarnations of this static member, and members whose process is provably
        # dead, are gone: we succeed them at once
        predecessors = {m for m, info in view.members.items() if m != self.member_id and self._succeeds(info)}
        live = (set(view.members) - predecessors) | {self.member_id}
        current = {p: o for p in range(self.partitions) if (o := view.owner(p)) is not None}
        current = {p: self.member_id if o in predecessors else o for p, o in current.items()}
        with self._lock:
            for p in self._held:
                current[p] = self.member_id
        target = assign(range(self.partitions), live, current)
        mine = {p for p, m in target.items() if m == self.member_id}
        taken = []
        for p in sorted(mine):
            succeed = view.owner(p) in predecessors
            if p in self._held or not (view.is_free(p) or succeed):
                continue
            epoch = view.epoch(p) + 1
            try:
                self.backend.submit([O.Lease(self.store, task_key(p), self.member_id, epoch, self.lease_ms,
                                             force=succeed)])
            except errors.LeaseConflict:
                continue  # someone else was quicker; the next tick sees it
            taken.append(p)
            with self._lock:
                self._held[p] = epoch
                self.generation += 1
        with self._lock:
            self.pending = {p for p in mine if p not in self._held}
            revoked = {p for p in self._held if p not in mine}
            if revoked != self._revoked:
                self._revoked = revoked
                self.generation += 1
        if taken or revoked:
            self.rebalances += 1
        for m in predecessors:  # end the predecessor's membership: the others stop counting it as live
            key = MEMBER + m.encode()
            epoch = view.members[m].epoch + 1
            try:
                self.backend.submit([O.Lease(self.store, key, self.member_id, epoch, self.lease_ms, force=True),
                                     O.Lease(self.store, key, self.member_id, epoch, 0)])
            except errors.LeaseConflict:
                pass
        forget = [m for m in view.expired if m != self.member_id]
        if forget:
            self._forget(forget)
        self.view = view
        return view

    def _succeeds(self, member: MemberInfo) -> bool:
        """Whether this member takes ``member``'s place at once: an earlier incarnation of
        our static id, or a member whose process (on this host) is provably dead."""
        if self.static_id is not None and static_of(member.member_id) == self.static_id:
            return True
        return member.process is not None and member.process.is_dead_here()

    def _join(self) -> None:
        info = msgpack.packb([self.host, self.port])
        process = msgpack.packb(ProcessId.current().to_wire())
        self.backend.submit([O.Lease(self.store, MEMBER + self.member_id.encode(), self.member_id, 1, self.lease_ms),
                             O.StoreWrite(self.store, [[INFO + self.member_id.encode(), info],
                                                       [PROCESS + self.member_id.encode(), process]])])
        self._member_epoch = 1
        self._last_renew = time.monotonic()

    def _renew(self) -> None:
        for _ in range(3):
            with self._lock:
                held = dict(self._held)
            ops: list[O.Operation] = [O.Lease(self.store, MEMBER + self.member_id.encode(), self.member_id,
                                              self._member_epoch, self.lease_ms)]
            ops.extend(O.Lease(self.store, task_key(p), self.member_id, e, self.lease_ms) for p, e in held.items())
            try:
                self.backend.submit(ops, durable=False)
                self._last_renew = time.monotonic()
                return
            except errors.LeaseConflict:
                view = read_group(self.backend, self.application_id, self.lease_ms)
                for p, e in held.items():
                    lease = view.tasks.get(p)
                    if lease is None or not lease.held_by(self.member_id, e):
                        self.lost(p, e)
                lease = unpack_lease(self.backend.store_get(self.store, MEMBER + self.member_id.encode()))
                if lease is None or not lease.held_by(self.member_id, self._member_epoch):
                    for p, e in held.items():  # forgotten by the others while we were paused:
                        self.lost(p, e)  # our tasks are long gone; join again as a new member
                    self.member_id = new_member_id(self.name, self.static_id)
                    self._join()
                    return

    def _forget(self, members: list[str]) -> None:
        keys = [prefix + m.encode() for m in members for prefix in (MEMBER, INFO, PROCESS)]
        self.backend.submit([O.StoreWrite(self.store, [], keys)], durable=False)

    def leave(self) -> None:
        """Free every task lease and the member lease (after the app committed its tasks)."""
        with self._lock:
            held, self._held = self._held, {}
            self._revoked = set()
            self.generation += 1
        if self._member_epoch == 0:
            return
        ops: list[O.Operation] = [O.Lease(self.store, task_key(p), self.member_id, e, 0) for p, e in held.items()]
        ops.append(O.Lease(self.store, MEMBER + self.member_id.encode(), self.member_id, self._member_epoch, 0))
        ops.append(O.StoreWrite(self.store, [], [INFO + self.member_id.encode(), PROCESS + self.member_id.encode()]))
        try:
            self.backend.submit(ops)
        except errors.LeaseConflict:
            for op in ops[:-1]:  # some lease was taken over meanwhile: free the others one by one
                try:
                    self.backend.submit([op])
                except errors.LeaseConflict:
                    pass
        self._member_epoch = 0
        self.member_id = new_member_id(self.name, self.static_id)  # a later join is a new member
