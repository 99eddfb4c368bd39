"""Snapshot transfer: a consistent hot copy of a node's state environment, streamed over
the replication channel to a follower that the log can no longer bring up to date.
:class:`SnapshotServer` is the leader's side of the protocol, :func:`receive` the
follower's; :class:`~.node.Node` wires them to its replication loop and its state.

**Leader** (:class:`SnapshotSource`): one read transaction of the state environment pins a
consistent view; it holds the node's *applied position* (index, epoch and time of the last
applied entry, in the ``cluster`` named database: :func:`read_applied`), so the copy says
itself where the log continues. LMDB copies that view (``env.copyfd(fd, compact=True,
txn=…)``, in a thread of its own) into a pipe; a pump thread cuts the stream into chunks of
:data:`CHUNK_BYTES` and keeps at most :data:`READY_CHUNKS` ready. The replication loop
answers each chunk request with a ready chunk, never waiting for one (a request that finds
none is parked until the pump signals). The follower asks for the next chunk only after it
has written the previous one, so memory is bounded (pipe + ready chunks, about 4 MiB per
transfer, at most :data:`MAX_TRANSFERS` at once) and a slow follower slows the copy down
(the copy thread blocks on the full pipe). An idle transfer is closed after
:data:`TRANSFER_IDLE` seconds: the copy thread gets ``EPIPE`` and ends, and its read
transaction ends with it. While a copy runs, its read transaction holds the store's resize
gate: the leader's map cannot grow meanwhile.

**Follower** (:class:`SnapshotSink`, :func:`install`): chunks go to
``DATA/cluster-snapshot.tmp/data.mdb``; when the last one arrived the file is synced, opened
as an LMDB environment to check its applied position against the one announced, given this
directory's own id (``meta/directory_id``, see :mod:`tstreams_embedded.engine.storage.directory`)
and synced again. :func:`install` then swaps it in with :meth:`Core.reopen
<tstreams_embedded.engine.storage.core.Core.reopen>`: close, ``rename`` over ``DATA/data.mdb``
(atomic), fsync the directory, open. The caller restarts its log after the snapshot's
position (:meth:`ReplicatedLog.reset <.log.ReplicatedLog.reset>`).

Crash safety: before the rename, the old state and log are intact, and the partial copy is
deleted at the next start (:func:`discard_partial`); after it, the state's applied position
is not in the log, which the node notices at start and answers by resetting its log there
(the same reset the install does next).
"""

from __future__ import annotations

import fcntl
import logging
import os
import queue
import shutil
import struct
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import lmdb

from .. import errors
from ..engine.storage import directory
from ..engine.storage.core import Core
from ..engine.storage.store import Store
from .channel import Channel
from .messages import Reply, ReplyStatus, SnapshotBegin, SnapshotChunk, SnapshotData, SnapshotHead
from .transport import ReplicationServer

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20  # bytes per chunk reply (the last one is shorter)
READY_CHUNKS = 2  # chunks cut ahead of the follower's requests, per transfer
PIPE_BYTES = 1 << 20  # the pipe between the LMDB copy and the chunk pump
TRANSFER_IDLE = 30.0  # seconds without a chunk request before a transfer is closed
MAX_TRANSFERS = 2  # snapshot copies a leader runs at once
PARTIAL_DIR = "cluster-snapshot.tmp"
APPLIED_KEY = b"\x00applied"
_POSITION = struct.Struct(">QQQ")
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


@dataclass(frozen=True)
class Position:
    """Where a state stands in the log: the index, epoch and ``now_ms`` of its last applied entry."""

    index: int
    epoch: int
    now_ms: int


def encode_applied(p: Position) -> bytes:
    return _POSITION.pack(p.index, p.epoch, p.now_ms)


def read_applied(txn: lmdb.Transaction, cdb: Any) -> tuple[int, Position | None]:
    """The applied index in the ``cluster`` database, and the full position if it is stored
    (states applied before positions were kept hold the index only)."""
    raw = txn.get(APPLIED_KEY, db=cdb)
    if not raw:
        return 0, None
    raw = bytes(raw)
    if len(raw) == _POSITION.size:
        p = Position(*_POSITION.unpack(raw))
        return p.index, p
    return int.from_bytes(raw, "big"), None


# ------------------------------------------------------------------------------ leader side
class SnapshotSource:
    """One snapshot being sent (see the module docstring). Its chunks are read by the
    replication loop only; two threads of its own produce them: the LMDB copy (into a pipe)
    and a pump that cuts the pipe's stream into chunks of :data:`CHUNK_BYTES`, at most
    :data:`READY_CHUNKS` of them ready at a time. :meth:`fileno` becomes readable when a
    chunk is ready (the replication loop polls it)."""

    def __init__(self, sid: str, store: Store, cdb: Any, fallback_epoch: int | None = None,
                 fallback_now: int | None = None) -> None:
        self.sid = sid
        self._stack = ExitStack()
        txn = self._stack.enter_context(store.read())
        try:
            index, position = read_applied(txn, cdb)
            if position is None:
                position = Position(index, fallback_epoch or 0, fallback_now or 0)
            self.position = position
            r, w = os.pipe()
            try:
                fcntl.fcntl(w, _F_SETPIPE_SZ, PIPE_BYTES)
            except OSError:  # pipe-max-size lower than ours: the default size works too
                pass
            self._notify_r, self._notify_w = os.pipe()
            os.set_blocking(self._notify_r, False)
            os.set_blocking(self._notify_w, False)
        except BaseException:
            self._stack.close()
            raise
        self.sent = 0
        self.finished = False
        self.error: BaseException | None = None
        self.touched = time.monotonic()
        self.waiting: tuple[bytes, SnapshotChunk] | None = None  # a parked chunk request
        self._ready: queue.Queue[bytes] = queue.Queue(READY_CHUNKS)
        self._closing = threading.Event()
        self._copier = threading.Thread(target=self._copy, args=(store.env, txn, w), name=f"snapshot-copy-{sid}",
                                        daemon=True)
        self._pump = threading.Thread(target=self._cut, args=(r,), name=f"snapshot-pump-{sid}", daemon=True)
        self._copier.start()
        self._pump.start()

    def _copy(self, env: lmdb.Environment, txn: lmdb.Transaction, w: int) -> None:
        try:
            env.copyfd(w, compact=True, txn=txn)
        except BaseException as exc:  # noqa: BLE001 - reported to the follower as a failed transfer
            self.error = exc
        finally:
            os.close(w)

    def _offer(self, chunk: bytes) -> bool:
        while not self._closing.is_set():
            try:
                self._ready.put(chunk, timeout=0.2)
            except queue.Full:
                continue
            try:
                os.write(self._notify_w, b"x")
            except OSError:  # full: the loop has a wake-up pending already
                pass
            return True
        return False

    def _cut(self, r: int) -> None:
        try:
            while not self._closing.is_set():
                parts: list[bytes] = []
                size = 0
                while size < CHUNK_BYTES:
                    got = os.read(r, CHUNK_BYTES - size)
                    if not got:
                        break
                    parts.append(got)
                    size += len(got)
                if parts and not self._offer(b"".join(parts)):
                    return
                if size < CHUNK_BYTES:  # end of the copy
                    self._copier.join()
                    self._offer(b"")
                    return
        except OSError as exc:
            self.error = exc
            self._offer(b"")
        finally:
            os.close(r)  # a copy still running gets EPIPE and ends

    def fileno(self) -> int:
        """Readable when a chunk may be ready."""
        return self._notify_r

    def read_chunk(self) -> bytes | None:
        """The next chunk; ``b""`` at the end of the copy, ``None`` if none is ready yet.
        Raises :class:`ClusterUnavailable` if the copy failed."""
        self.touched = time.monotonic()
        try:
            while os.read(self._notify_r, 4096):
                pass
        except BlockingIOError:
            pass
        if self.finished:
            return b""
        try:
            chunk = self._ready.get_nowait()
        except queue.Empty:
            return None
        if not chunk:
            if self.error is not None:
                raise errors.ClusterUnavailable(f"the snapshot copy failed: {self.error}")
            self.finished = True
            return b""
        self.sent += len(chunk)
        return chunk

    def idle(self, now: float) -> bool:
        return now - self.touched > TRANSFER_IDLE

    def close(self) -> None:
        """End the transfer: the threads end (a copy still running gets EPIPE) and the read
        transaction with them."""
        self._closing.set()
        self._pump.join(30)
        self._copier.join(30)
        for fd in (self._notify_r, self._notify_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._stack.close()


class SnapshotServer:
    """The leader's side of the protocol: the transfers in flight, served by the replication
    loop (one thread), which polls their :meth:`SnapshotSource.fileno`.

    * ``snapshot(sid=None, node)`` (:meth:`begin`) starts a copy and answers its position
      ``{sid, index, index_epoch, now_ms}``; ``busy`` when :data:`MAX_TRANSFERS` run;
    * ``snapshot(sid, offset)`` (:meth:`chunk`) answers the next chunk ``{data, done}``, or
      parks the request until one is ready; ``gone`` for an unknown transfer or an offset
      that is not where the transfer stands (the follower starts again).

    It also remembers, per receiving node, the index its snapshot stops at until that node
    fetches again (:meth:`fetched`): :meth:`needed_from` tells the log trimming to keep the
    entries after it."""

    def __init__(self, send: Callable[[bytes, Reply], None]) -> None:
        self.send = send
        self.server: ReplicationServer | None = None
        self.transfers: dict[str, SnapshotSource] = {}
        self.installing: dict[str, tuple[int, float]] = {}  # node -> (snapshot index, sent at)
        self.started = 0  # transfers begun
        self.bytes_sent = 0  # bytes of snapshot chunks sent, all transfers

    def attach(self, server: ReplicationServer) -> None:
        """The replication endpoint whose poll the transfers' descriptors wake."""
        self.server = server

    def begin(self, ident: bytes, req: SnapshotBegin, epoch: int, store: Store, cdb: Any,
              fallback_epoch: int | None, fallback_now: int | None) -> None:
        rid = req.rid
        if len(self.transfers) >= MAX_TRANSFERS:
            self.send(ident, SnapshotHead(rid, ReplyStatus.BUSY))
            return
        self.started += 1
        sid = f"{epoch}-{self.started}"
        source = SnapshotSource(sid, store, cdb, fallback_epoch, fallback_now)
        self.transfers[sid] = source
        self.installing[req.node] = (source.position.index, time.monotonic())
        if self.server is not None:
            self.server.watch(source.fileno())
        p = source.position
        log.info("sending a snapshot at index %d to %s", p.index, req.node)
        self.send(ident, SnapshotHead(rid, ReplyStatus.OK, sid, epoch, p.index, p.epoch, p.now_ms))

    def chunk(self, ident: bytes, req: SnapshotChunk) -> None:
        running = self.transfers.get(req.sid)
        if running is None or req.offset != running.sent or running.waiting is not None:
            self.send(ident, SnapshotData(req.rid, ReplyStatus.GONE))
            return
        running.waiting = (ident, req)
        self._serve(running)

    def _serve(self, source: SnapshotSource) -> None:
        if source.waiting is None:
            return
        ident, req = source.waiting
        try:
            data = source.read_chunk()
        except errors.ClusterUnavailable as exc:
            log.warning("snapshot %s: %s", source.sid, exc)
            self.send(ident, SnapshotData(req.rid, ReplyStatus.GONE))
            self._end(source)
            return
        if data is None:
            return  # parked until the pump signals
        source.waiting = None
        self.bytes_sent += len(data)
        self.send(ident, SnapshotData(req.rid, ReplyStatus.OK, data, source.finished))
        if source.finished:
            self._end(source)

    def _end(self, source: SnapshotSource) -> None:
        if self.server is not None:
            self.server.unwatch(source.fileno())
        self.transfers.pop(source.sid, None)
        source.close()

    def serve(self) -> None:
        """Answer parked chunk requests that can be answered; close idle transfers."""
        now = time.monotonic()
        for source in list(self.transfers.values()):
            if source.idle(now):
                log.warning("snapshot %s: no request for %.0f s; closed", source.sid, TRANSFER_IDLE)
                self._end(source)
            else:
                self._serve(source)

    def fetched(self, node: str) -> None:
        """``node`` fetched from the log: it no longer depends on a snapshot's position."""
        self.installing.pop(node, None)

    def needed_from(self) -> list[int]:
        """First log indexes that transfers in flight, and snapshots sent but not followed by
        a fetch yet (for at most 2 × :data:`TRANSFER_IDLE`), still need."""
        now = time.monotonic()
        out = [t.position.index + 1 for t in list(self.transfers.values())]
        out += [i + 1 for i, at in list(self.installing.values()) if now - at < 2 * TRANSFER_IDLE]
        return out

    def reset(self) -> None:
        """A new leadership: forget who was installing what."""
        self.installing = {}

    def close(self) -> None:
        for source in list(self.transfers.values()):
            self._end(source)


# ------------------------------------------------------------------------------ follower side
def partial_dir(data: str) -> str:
    return os.path.join(data, PARTIAL_DIR)


def discard_partial(data: str) -> bool:
    """Delete an unfinished snapshot download (after a crash); True if there was one."""
    path = partial_dir(data)
    if not os.path.exists(path):
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True


class SnapshotSink:
    """One snapshot being received into ``DATA/cluster-snapshot.tmp/data.mdb``."""

    def __init__(self, data: str, position: Position) -> None:
        self.data = data
        self.position = position
        self.dir = partial_dir(data)
        discard_partial(data)
        os.makedirs(self.dir)
        self.file = os.path.join(self.dir, directory.DATA_FILE)
        self._fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self.received = 0
        self.started = time.monotonic()
        self.transferred = 0.0  # when the last chunk arrived

    def write(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self.received += len(chunk)

    def finish(self) -> None:
        """Sync the file, check it is an LMDB environment at the announced position, and make
        it this directory's own (its id), ready for :func:`install`."""
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        try:
            env = lmdb.open(self.dir, max_dbs=16, lock=True, sync=True,
                            map_size=os.path.getsize(self.file) + (64 << 20))
        except lmdb.Error as exc:
            raise errors.DataCorrupted(f"the received snapshot is not a valid LMDB environment: {exc}") from exc
        try:
            with env.begin(write=True) as txn:
                cdb = env.open_db(b"cluster", txn=txn)
                meta = env.open_db(b"meta", txn=txn)
                index, position = read_applied(txn, cdb)
                want = self.position
                if index != want.index or (position is not None and position != want):
                    raise errors.DataCorrupted(f"the received snapshot holds applied position {index} "
                                               f"({position}), not the announced {want}")
                txn.put(APPLIED_KEY, encode_applied(want), db=cdb)
                own = directory.read_marker(self.data)
                if own is not None:
                    txn.put(directory.ID_KEY, own.encode("ascii"), db=meta)
            env.sync(True)
        finally:
            env.close()

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        discard_partial(self.data)


def receive(channel: Channel, data: str, node_id: str, known_epoch: int) -> SnapshotSink | None:
    """The follower's side of the protocol (see :class:`SnapshotServer`): receive a snapshot
    into ``data``'s partial directory and :meth:`~SnapshotSink.finish` it; the sink (with
    its :attr:`~SnapshotSink.position`), or None if the transfer failed (the partial copy is
    then deleted; the caller starts again). The request for the next chunk goes out before
    the current one is written, so the leader cuts and sends it meanwhile."""
    started = time.monotonic()
    raw = channel.ask(SnapshotBegin(node_id, known_epoch), 2.0)
    head = SnapshotHead.from_wire(raw) if raw is not None else None
    if head is None or head.status is not ReplyStatus.OK or head.epoch < known_epoch:
        return None
    position = Position(head.at_index, head.index_epoch, head.now_ms)
    log.info("receiving a snapshot at index %d", position.index)
    sink = SnapshotSink(data, position)
    sink.started = started
    try:
        offset = 0
        pending = channel.send(SnapshotChunk(head.sid, offset, node_id))
        while True:
            got = channel.wait(pending, TRANSFER_IDLE / 2)
            rep = SnapshotData.from_wire(got) if got is not None else None
            if rep is None or rep.status is not ReplyStatus.OK:
                log.warning("snapshot transfer interrupted after %d bytes; starting again", sink.received)
                sink.abort()
                return None
            chunk = rep.data
            offset += len(chunk)
            if not rep.done:
                pending = channel.send(SnapshotChunk(head.sid, offset, node_id))
            sink.write(chunk)
            if rep.done:
                break
        sink.transferred = time.monotonic()
        sink.finish()
    except BaseException:
        sink.abort()
        raise
    return sink


def install(core: Core, sink: SnapshotSink) -> None:
    """Swap the finished snapshot in for ``core``'s data file (close, rename, fsync, open)."""

    def replace() -> None:
        os.replace(sink.file, os.path.join(core.path, directory.DATA_FILE))
        directory.sync_dir(core.path)

    core.reopen(replace)
    discard_partial(sink.data)
