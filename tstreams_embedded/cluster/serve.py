"""``tstreams serve --cluster zk://…``: a cluster node process.

The client port serves the same methods as a single-node server, guarded: only the leader
answers (others raise :class:`~tstreams_embedded.errors.NotLeader` naming the leader), and
``submit`` goes through the replicated log (:meth:`Node.submit_batch`). The ``--http``
port (Tornado, same loop) serves ``/health/leader`` (200 on the leader, 503 elsewhere: the
HAProxy check), ``/health/ready``, ``/status`` (this node, JSON) and ``/state`` (the digest
of the applied state, for tests and operators).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Generator, Sequence
from typing import Any

import zmq
from tornado.web import Application, RequestHandler

from .. import errors
from ..engine.core import Core
from ..net.handlers import backend_registry
from ..net.registry import CALL, STREAM, Handler, Registry
from ..net.serve import run_until_signal
from ..net.server import Server, ServerOptions
from ..net.session import Session
from .clock import StateClock
from .node import Node

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


def cluster_registry(core: Core, node: Node, server_info: dict[str, Any]) -> Registry:
    """The single-node handlers, guarded by :meth:`Node.check_serving`, with ``submit``
    replaced by the replicated path and ``compact`` refused (not replicated yet)."""
    base = backend_registry(core, server_info)
    reg = Registry()
    for name in base.names():
        h = base.get(name)
        assert h is not None
        if name in OPEN_METHODS:
            reg.add(name, h.fn, h.kind, h.executor, h.batch)
        else:
            reg.add(name, _guard(node, h), h.kind, h.executor, h.batch)

    def submit(session: Session, ops: Any, durable: bool = True, client_id: str | None = None,
               seq: int = 0) -> list[Any]:
        (ok, value), = node.submit_batch([(ops, durable, client_id, seq)])
        if not ok:
            raise value
        results: list[Any] = value
        return results

    reg.add("submit", submit, executor="write", batch=node.submit_batch)

    def compact(session: Session) -> dict[str, int]:
        raise errors.InvalidArgument("compaction is not replicated yet: it is disabled in cluster mode")

    reg.add("compact", compact)
    reg.add("cluster_info", lambda session: {**node.info(), "leader": node.leader_hint()})
    return reg


def _guard(node: Node, h: Handler) -> Any:
    inner = h.fn
    if h.kind == STREAM:
        def stream(session: Session, *args: Any) -> Generator[Any, Any, Any]:
            node.check_serving()
            return (yield from inner(session, *args))

        return stream
    assert h.kind == CALL or True

    def call(session: Session, *args: Any) -> Any:
        node.check_serving()
        return inner(session, *args)

    return call


class _Health(RequestHandler):
    def initialize(self, node: Node, what: str) -> None:
        self.node = node
        self.what = what

    def get(self) -> None:
        node = self.node
        if self.what == "leader":
            ok = node.serving()
        else:  # ready: leader serving, or a follower that follows and is not far behind
            ok = node.serving() or (not node.diverged and bool(node.leader_info) and node.role == "follower"
                                    and node.log.commit_index - node.applied < 1000)
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
                                "parked_fetches": len(self.node._parked), "match": self.node.match}))


class _State(RequestHandler):
    def initialize(self, node: Node) -> None:
        self.node = node

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        out = state_digest(self.node.core, with_items=self.get_argument("items", "0") == "1")
        self.finish(json.dumps({**out, "applied": self.node.applied, "node": self.node.node_id}))


def http_app(node: Node) -> Application:
    return Application([
        (r"/health/leader", _Health, {"node": node, "what": "leader"}),
        (r"/health/ready", _Health, {"node": node, "what": "ready"}),
        (r"/status", _Status, {"node": node}),
        (r"/state", _State, {"node": node}),
    ])


def serve_cluster(data: str | os.PathLike[str], bind: str | Sequence[str], cluster: str, node_id: str,
                  http: str | None = None, repl: str | None = None, acks: str | None = None,
                  durability: str = "sync", session_timeout: float = 4.0, ack_timeout: float = 10.0,
                  ready_file: str | None = None, stop_timeout: float = 10.0, **core_options: Any) -> int:
    """Run a cluster node until SIGTERM/SIGINT; return the exit status (0)."""
    binds = [bind] if isinstance(bind, str) else list(bind)
    if not binds:
        raise errors.InvalidArgument("a cluster node needs a --bind endpoint")
    http_host, http_port = None, 0
    if http is not None:
        http_host, _, port = http.rpartition(":")
        if not http_host or not port.isdigit():
            raise errors.InvalidArgument(f"--http takes host:port, got {http!r}")
        http_port = int(port)
    if repl is None:
        host = binds[0].split("://", 1)[-1].rsplit(":", 1)[0]
        repl = f"tcp://{host}:*"
    ctx: zmq.Context[Any] = zmq.Context()
    core_options.setdefault("compaction_interval", None)  # compaction is not replicated yet
    core = Core(os.fspath(data), durability, clock=StateClock(), **core_options)  # reads judge time as apply does
    node = Node(core, cluster, node_id, binds[0], repl, http=http, acks=acks, session_timeout=session_timeout,
                ack_timeout=ack_timeout, context=ctx)
    registry = cluster_registry(core, node, {"data": os.path.abspath(os.fspath(data)), "node": node_id})
    server = Server(registry, binds, ServerOptions(), commit_watch=core.wait_for_commit, context=ctx)

    def on_start() -> None:
        if http_host is not None:
            http_app(node).listen(http_port, http_host)
        node.start()

    try:
        run_until_signal(server, stop_timeout, ready_file, on_start=on_start, on_stop=node.stop)
    finally:
        core.close()
        ctx.term()
    return 0
