"""``tstreams serve --cluster zk://…``: a cluster node process.

The client port serves the same methods as a single-node server, guarded: only the leader
answers (others raise :class:`~tstreams_embedded.errors.NotLeader` naming the leader), and
``submit`` goes through the replicated log (:meth:`Node.submit_batch`). The ``--http``
port (Tornado, same loop) serves ``/health/leader`` (200 on the leader, 503 elsewhere: the
HAProxy check), ``/health/ready``, ``/status`` (this node, JSON), ``/state`` (the digest
of the applied state, for tests and operators), ``/metrics`` (Prometheus) and the status
page at ``/`` (with the JSON it polls, ``/overview``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Callable, Generator, Sequence
from typing import Any, cast

import zmq
from tornado.log import access_log
from tornado.web import Application, RequestHandler

from .. import errors
from ..engine.storage.core import Core
from ..listening import listen_http, parse_http
from ..net.auth import load_peer_keys
from ..net.handlers import DEFAULT_PAGE_BYTES, backend_registry
from ..net.metrics import metrics_route
from ..net.registry import STREAM, Handler, Registry
from ..net.serve import return_large_blocks, run_until_signal, server_options, start_security
from ..net.server import Server
from ..net.session import Session
from ..net.stats import ServerStats
from .clock import StateClock
from .compaction import ReplicatedCompaction
from .follower_reads import READ_METHODS, FollowerReads
from .metrics import node_registry
from .node import Node
from .schedules import ReplicatedSchedules
from .status_page import cluster_summary, page_routes

log = logging.getLogger(__name__)

#: Methods any node answers (the rest only on the leader).
OPEN_METHODS = frozenset({"ping", "server_info", "cancel", "server_stats", "cluster_info"})


def state_digest(core: Core, with_items: bool = False) -> dict[str, Any]:
    """A digest of the visible state: streams, checkpointed transactions with their items,
    consumer offsets and markers (internal cluster bookkeeping excluded)."""
    h = hashlib.sha256()
    items: list[str] = []
    txns = 0
    with core.store.read() as txn:
        offsets = sorted((bytes(k), bytes(v)) for k, v in txn.cursor(db=core.store.offsets))
        markers = sorted((bytes(k), bytes(v)) for k, v in txn.cursor(db=core.store.markers))
    for info in core.list_streams():
        h.update(json.dumps([info.name, info.partitions, info.ttl]).encode())
        for p in range(info.partitions):
            for t in core.transactions_range(info.name, p, 0, 2**63 - 1):
                txns += 1
                h.update(f"{info.name}/{p}/{t.id}:".encode())
                for item in t.items:
                    h.update(len(item).to_bytes(4, "big") + item)
                    if with_items:
                        items.append(item.decode("utf-8", "replace"))
    for k, v in offsets + markers:
        h.update(k + b"=" + v)
    out: dict[str, Any] = {"digest": h.hexdigest(), "transactions": txns,
                           "offsets": len(offsets), "markers": len(markers)}
    if with_items:
        out["items"] = sorted(items)
    return out


def cluster_registry(core: Core, node: Node, server_info: dict[str, Any],
                     compaction: ReplicatedCompaction | None = None,
                     max_reply_bytes: int = DEFAULT_PAGE_BYTES) -> Registry:
    """The single-node handlers, guarded by :meth:`Node.check_serving`, with ``submit``
    and ``compact`` replaced by the replicated paths (:mod:`.compaction`). Reads are also
    served by a follower to sessions that asked for it (:mod:`.follower_reads`)."""
    compaction = compaction or ReplicatedCompaction(node)
    base = backend_registry(core, server_info, max_reply_bytes)
    follower = FollowerReads(node)
    on_follower = backend_registry(cast(Any, follower.reader), server_info, max_reply_bytes)
    reg = Registry()
    for name in base.names():
        h = base.get(name)
        assert h is not None
        if name in OPEN_METHODS:
            reg.add(name, h.fn, h.kind, h.executor, h.batch)
        elif name in READ_METHODS:
            alt = on_follower.get(name)
            assert alt is not None
            reg.add(name, _guard(node, h, follower, alt), h.kind, h.executor, h.batch)
        else:
            reg.add(name, _guard(node, h), h.kind, h.executor, h.batch)
    reg.add("read_from_follower", follower.opt_in)

    def submit(session: Session, ops: Any, durable: bool = True, client_id: str | None = None,
               seq: int = 0) -> list[Any]:
        (ok, value), = node.submit_batch([(ops, durable, client_id, seq)])
        if not ok:
            raise value
        results: list[Any] = value
        return results

    reg.add("submit", submit, executor="write", batch=node.writes.submit_deferred)  # (pipelined: .writes)

    def compact(session: Session) -> dict[str, int]:
        return compaction.run_once()

    reg.add("compact", compact, executor="pool")
    reg.add("cluster_info", lambda session: {**node.info(), "leader": node.leader_hint()})
    return reg


def _guard(node: Node, h: Handler, follower: FollowerReads | None = None, alt: Handler | None = None) -> Any:
    """``h`` served by the leader only; with ``follower``, also ``alt`` (the same method on
    the follower's state reader) to the sessions that asked for follower reads."""
    inner = h.fn

    def pick(session: Session) -> Any:
        if node.serving():
            return inner
        if follower is None or alt is None or not follower.opted_in(session):
            node.check_serving()  # raises NotLeader
            return inner
        follower.check()
        return alt.fn

    if h.kind == STREAM:
        def stream(session: Session, *args: Any) -> Generator[Any, Any, Any]:
            fn = pick(session)
            return (yield from fn(session, *args))

        return stream
    # CALL (or NOTIFY): a plain function

    def call(session: Session, *args: Any) -> Any:
        return pick(session)(session, *args)

    return call


class _Health(RequestHandler):
    def initialize(self, node: Node, what: str) -> None:
        self.node = node
        self.what = what

    def get(self) -> None:
        node = self.node
        if self.what == "leader":
            ok = node.serving()
        else:  # ready: leader serving, or a follower in contact with its leader and caught up
            ok = node.ready()
        self.set_status(200 if ok else 503)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"ok": ok, **node.info()}))


class _Status(RequestHandler):
    def initialize(self, node: Node) -> None:
        self.node = node

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({**self.node.info(), "leader": self.node.leader_hint(),
                                "elections": self.node.elections, "known_epoch": self.node.known_epoch,
                                "parked_fetches": self.node.parked_fetches, "match": self.node.match}))


class _State(RequestHandler):
    def initialize(self, node: Node) -> None:
        self.node = node

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        try:
            out = state_digest(self.node.core, with_items=self.get_argument("items", "0") == "1")
        except errors.EngineClosed as exc:  # a follower swapping in a snapshot, for a moment
            self.set_status(503)
            self.finish(json.dumps({"error": str(exc), "node": self.node.node_id}))
            return
        self.finish(json.dumps({**out, "applied": self.node.applied, "node": self.node.node_id}))


#: Paths polled by load balancers (HAProxy checks every node a few times a second).
HEALTH_PATHS = ("/health/leader", "/health/ready")


def log_request(handler: RequestHandler) -> None:
    """Tornado's access log, except that health checks log at DEBUG whatever they answer:
    a follower answers every HAProxy check of ``/health/leader`` with 503, which Tornado
    would log at ERROR a few times a second. Other requests log as Tornado does (INFO below
    400, WARNING below 500, ERROR above)."""
    request = handler.request
    status = handler.get_status()
    if request.path in HEALTH_PATHS:
        level = logging.DEBUG
    elif status < 400:
        level = logging.INFO
    elif status < 500:
        level = logging.WARNING
    else:
        level = logging.ERROR
    access_log.log(level, "%d %s %s (%s) %.2fms", status, request.method, request.uri, request.remote_ip,
                   1000.0 * request.request_time())


def http_app(node: Node, server_stats: ServerStats | None = None, extra_routes: Sequence[Any] = ()) -> Application:
    """The ``--http`` endpoints: health checks, ``/status``, ``/state``, ``/metrics``
    (:mod:`.metrics`), the status page at ``/`` (:mod:`.status_page`), then ``extra_routes``
    (the web console's, :mod:`tstreams_embedded.console`: this node's own view). Requests are
    logged by :func:`log_request` (health checks at DEBUG)."""
    return Application([
        (r"/health/leader", _Health, {"node": node, "what": "leader"}),
        (r"/health/ready", _Health, {"node": node, "what": "ready"}),
        (r"/status", _Status, {"node": node}),
        (r"/state", _State, {"node": node}),
        metrics_route(node_registry(node, server_stats)),
        *page_routes(node),
        *extra_routes,
    ], log_function=log_request)


def serve_cluster(data: str | os.PathLike[str], bind: str | Sequence[str], cluster: str, node_id: str,
                  http: str | None = None, repl: str | None = None, acks: str | None = None,
                  durability: str = "sync", session_timeout: float = 4.0, ack_timeout: float = 10.0,
                  ready_file: str | None = None, stop_timeout: float = 10.0, *,
                  curve_dir: str | os.PathLike[str] | None = None, max_msg_size: int | None = None,
                  max_request_size: int | None = None, max_client_bytes: int | None = None,
                  max_write_queue_bytes: int | None = None, max_reply_bytes: int = DEFAULT_PAGE_BYTES,
                  max_server_bytes: int | None = None, rcvhwm: int | None = None,
                  piece_timeout: float | None = None,
                  http_token: str | None = None, console_sample_interval: float = 10.0,
                  **core_options: Any) -> int:
    """Run a cluster node until SIGTERM/SIGINT; return the exit status (0).

    The byte budgets and ``curve_dir`` mean what they mean for a single node
    (:func:`~tstreams_embedded.net.serve.serve`). With ``curve_dir``, the replication port
    is encrypted and authenticated too: every node of the cluster must be given a copy of
    the same keys directory (see :mod:`tstreams_embedded.net.auth`)."""
    binds = [bind] if isinstance(bind, str) else list(bind)
    if not binds:
        raise errors.InvalidArgument("a cluster node needs a --bind endpoint")
    http_host, http_port = parse_http(http) if http is not None else (None, 0)
    if repl is None:
        if not binds[0].startswith("tcp://"):
            raise errors.InvalidArgument(
                f"the first --bind {binds[0]!r} is not tcp://: give the replication endpoint with --repl "
                f"(e.g. --repl tcp://HOST:PORT)")
        host = binds[0].split("://", 1)[-1].rsplit(":", 1)[0]
        repl = f"tcp://{host}:*"
    opts = server_options(durability, max_msg_size, max_request_size=max_request_size,
                          max_client_bytes=max_client_bytes, max_write_queue_bytes=max_write_queue_bytes,
                          max_reply_bytes=max_reply_bytes, max_server_bytes=max_server_bytes, rcvhwm=rcvhwm,
                          piece_timeout=piece_timeout)
    peers = load_peer_keys(curve_dir) if curve_dir is not None else None
    return_large_blocks()  # (as tstreams serve: pieces and large frames returned when freed)
    ctx: zmq.Context[Any] = zmq.Context()
    auth = start_security(ctx, curve_dir, [*binds, repl], opts, peers)
    try:
        core_options.setdefault("compaction_interval", None)  # the leader replicates it (.compaction)
        core_options["fire_schedules"] = False  # the leader fires (.schedules)
        core = Core(os.fspath(data), durability, clock=StateClock(), **core_options)  # reads judge time as apply does
        try:
            node = Node(core, cluster, node_id, binds[0], repl, http=http, acks=acks, session_timeout=session_timeout,
                        ack_timeout=ack_timeout, context=ctx, peer_keys=peers)
        except BaseException:
            core.close()
            raise
    except BaseException:
        if auth is not None:
            auth.stop()
        ctx.term()
        raise
    compaction = ReplicatedCompaction(node)
    firing = ReplicatedSchedules(node)
    registry = cluster_registry(core, node, {"data": os.path.abspath(os.fspath(data)), "node": node_id,
                                                "cluster": node.coordinator.description}, compaction,
                                max_reply_bytes)
    server = Server(registry, binds, opts, commit_watch=core.wait_for_commit, context=ctx)

    stop_console: list[Callable[[], None]] = []

    def on_start() -> None:
        if http_host is not None:
            from ..console.web import start_console

            routes, stop = start_console(core, http_token, console_sample_interval,
                                         cluster=functools.partial(cluster_summary, node))
            stop_console.append(stop)
            listen_http(http_app(node, server.stats, routes), http_host, http_port)
        node.start()
        compaction.start()
        firing.start()

    def on_stop() -> None:
        firing.stop()
        compaction.stop()
        node.stop()

    try:
        run_until_signal(server, stop_timeout, ready_file, on_start=on_start, on_stop=on_stop)
    finally:
        on_stop()  # (already stopped after a signal; not yet after a failed start)
        for stop in stop_console:
            stop()
        core.close()
        if auth is not None:
            auth.stop()
        ctx.term()
    return 0
