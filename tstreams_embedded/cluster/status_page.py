"""The status page of a cluster node (``/`` on ``--http``) and the JSON it polls.

``/`` serves ``static/status.html`` (with ``static/status.js`` and ``static/status.css``:
package data, no build step, nothing fetched from the internet). The page polls
``/overview`` every second and redraws:

* the cluster as ZooKeeper publishes it (each node's role, epoch, log position, commit and
  applied indexes, lag behind the leader's log), read through this node's own ZooKeeper
  session; on the leader, each follower's lag as the leader counts it (acknowledged entries);
* this node's streams with their partition heads and consumer lag, from its applied state
  (a bounded :func:`~tstreams_embedded.engine.operator.overview.stream_overview`);
* the stream-processing applications in that state: each one's group members (live or
  not), the tasks each holds, the tasks no live member holds, and its lag on every input
  partition (a bounded :func:`~tstreams_embedded.engine.operator.appgroups.app_overview`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

from tornado.ioloop import IOLoop
from tornado.web import RequestHandler, StaticFileHandler

from ..engine.operator.appgroups import AppLimits, app_overview
from ..engine.operator.overview import OverviewLimits, stream_overview
from .node import Node

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


def cluster_summary(node: Node) -> dict[str, Any]:
    """The cluster as ``node`` sees it (blocking: ZooKeeper reads): ``this`` (its
    :meth:`~.Node.info`), ``cluster`` (``tstreams cluster status``: each node's role, epoch,
    log position, commit and applied indexes, lag behind the leader; ``None`` with
    ``cluster_error`` when ZooKeeper cannot be read) and, on the leader, ``replication``:
    each follower's lag as the leader counts it (acknowledged entries). Also the web
    console's (its overview)."""
    out: dict[str, Any] = {"this": {**node.info(), "serving": node.serving(), "leader": node.leader_hint()}}
    try:
        out["cluster"] = node.coordinator.status()
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: the page says so
        out["cluster"] = None
        out["cluster_error"] = f"{type(exc).__name__}: {exc}"
    if node.leading:
        out["replication"] = {f: max(0, node.log.last_index - m) for f, m in sorted(dict(node.match).items())}
    return out


def overview(node: Node, limits: OverviewLimits = OverviewLimits(),
             app_limits: AppLimits = AppLimits()) -> dict[str, Any]:
    """What ``/overview`` answers (blocking: ZooKeeper and LMDB reads)."""
    out: dict[str, Any] = {"time": time.time(), **cluster_summary(node)}
    ov = stream_overview(node.core.store, limits)
    out["streams"] = [dataclasses.asdict(s) for s in ov.streams]
    out["truncated"] = ov.truncated
    out["limits"] = dataclasses.asdict(limits)
    now = node.core.now_ms()
    apps = app_overview(node.core.store, now, app_limits)
    out["applications"] = [dataclasses.asdict(a) for a in apps.apps]
    out["applications_truncated"] = apps.truncated
    out["engine_time"] = now  # epoch ms: what the members' lease deadlines are compared with
    return out


class OverviewHandler(RequestHandler):
    """``GET /overview``: :func:`overview` as JSON (computed off the event loop)."""

    def initialize(self, node: Node) -> None:
        self.node = node

    async def get(self) -> None:
        body = await IOLoop.current().run_in_executor(None, overview, self.node)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(body))


class PageHandler(RequestHandler):
    """``GET /``: the status page."""

    def get(self) -> None:
        with open(os.path.join(STATIC_DIR, "status.html"), "rb") as f:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.finish(f.read())


def page_routes(node: Node) -> list[tuple[str, type[RequestHandler], dict[str, Any]]]:
    """The Tornado routes of the page, its files and ``/overview``."""
    return [
        (r"/", PageHandler, {}),
        (r"/overview", OverviewHandler, {"node": node}),
        (r"/static/(.*)", StaticFileHandler, {"path": STATIC_DIR}),
    ]
