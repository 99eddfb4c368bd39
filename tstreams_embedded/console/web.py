"""The console's Tornado routes: ``/api/...`` (JSON) and the page at ``/console/``.

Every answer is JSON; bad input gets ``400 {"error": NAME, "message": ...}`` with the
exception of :mod:`tstreams_embedded.errors` that the check raised, an unknown stream or
consumer ``404``, an engine that cannot answer (closed) ``503``. The answers that scan what
the engine holds go through the console's :class:`~.budget.ReadBudget` (they carry
``as_of_ms``). With a token, every request
(page and API alike) must carry it: ``Authorization: Bearer TOKEN``, ``?token=TOKEN`` (which
also sets a cookie for the page's own files) or that cookie; otherwise ``401``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tornado.ioloop import IOLoop
from tornado.web import HTTPError, RequestHandler, StaticFileHandler

from .. import errors
from ..engine.storage.core import Core
from ..ids import MAX_SECONDS, txn_id_at
from . import views
from .budget import ReadBudget
from .params import MAX_ID, MAX_PAGE_TXNS, Query, message_format, path_name, path_partition
from .sampler import LagSampler

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
TOKEN_COOKIE = "tstreams_console_token"
_NAME = r"([^/]+)"


def status_of(exc: errors.TStreamsError) -> int:
    """The HTTP status of an engine error: 404 for what does not exist, 400 for bad input,
    503 for an engine that cannot answer now."""
    if isinstance(exc, (errors.StreamNotFound, errors.ConsumerNotFound, errors.WorkQueueNotFound)):
        return 404
    if isinstance(exc, ValueError):
        return 400
    return 503


def token_ok(handler: RequestHandler, token: str | None) -> bool:
    """Whether the request carries ``token`` (always true without one)."""
    if token is None:
        return True
    given = handler.request.headers.get("Authorization", "")
    candidates = [given[len("Bearer "):] if given.startswith("Bearer ") else "",
                  handler.get_query_argument("token", "") or "", handler.get_cookie(TOKEN_COOKIE) or ""]
    return any(c and hmac.compare_digest(c.encode(), token.encode()) for c in candidates)


class Context:
    """What the handlers read: the engine's core, the lag sampler, the read budget; ``token``
    if required; ``cluster``: the cluster as this node sees it (on a cluster node)."""

    def __init__(self, core: Core, sampler: LagSampler, budget: ReadBudget, token: str | None,
                 cluster: Callable[[], dict[str, Any]] | None = None) -> None:
        self.core = core
        self.sampler = sampler
        self.budget = budget
        self.token = token
        self.cluster = cluster
        #: the console's own reader threads: at most two of its reads at a time, whatever
        #: the number of open pages (its cost to the engine stays bounded)
        self.readers = ThreadPoolExecutor(2, thread_name_prefix="console-read")


class ApiHandler(RequestHandler):
    """A JSON endpoint: :meth:`answer` runs off the event loop (it reads the store); within
    the read budget when ``scans`` (its cost grows with what the engine holds)."""

    params: tuple[str, ...] = ()
    scans = False

    def initialize(self, ctx: Context) -> None:
        self.ctx = ctx

    def prepare(self) -> None:
        if not token_ok(self, self.ctx.token):
            self.reply(401, {"error": "Unauthorized", "message": "this console needs its token "
                                                                  "(Authorization: Bearer TOKEN or ?token=TOKEN)"})

    def reply(self, status: int, body: Any) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(body if isinstance(body, bytes) else json.dumps(body, default=str))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors Tornado answers itself (an unexpected one is logged) are JSON too."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        log.error("console: %s answered %d: %r", self.request.path, status_code, exc)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps({"error": type(exc).__name__ if exc is not None else "HTTPError",
                                "message": str(exc) if exc is not None else self._reason}))

    async def get(self, *args: str) -> None:
        try:
            query = Query({k: v for k, v in self.request.arguments.items() if k != "token"}, self.params)
            body = await IOLoop.current().run_in_executor(self.ctx.readers, self.budgeted, query, *args)
        except errors.TStreamsError as exc:
            self.reply(status_of(exc), {"error": type(exc).__name__, "message": str(exc)})
            return
        except asyncio.CancelledError:  # the server is stopping (its loop cancels what runs)
            self.reply(503, {"error": "EngineClosed", "message": "the server is stopping"})
            raise
        except Exception as exc:  # a bug: logged, and still answered in JSON
            log.exception("console: %s failed", self.request.path)
            self.reply(500, {"error": type(exc).__name__, "message": str(exc)})
            return
        self.reply(200, body)

    def budgeted(self, query: Query, *args: str) -> Any:
        if not self.scans:
            return self.answer(query, *args)
        key = (type(self).__name__, args, tuple(sorted(query.values.items())))
        return self.ctx.budget.answer(key, lambda: self.answer(query, *args))

    def answer(self, query: Query, *args: str) -> Any:
        raise NotImplementedError


class OverviewHandler(ApiHandler):
    def answer(self, query: Query, *args: str) -> Any:
        return {"node": views.node(self.ctx.core), **self.ctx.sampler.rates(),
                "sample_interval_s": self.ctx.sampler.interval,
                "cluster": self.ctx.cluster() if self.ctx.cluster is not None else None,
                "reads": {"fresh": self.ctx.budget.fresh_reads, "kept": self.ctx.budget.kept_answers,
                          "read_seconds": self.ctx.budget.read_seconds,
                          "sample_seconds": self.ctx.sampler.sample_seconds}}


class StreamsHandler(ApiHandler):
    scans = True

    def answer(self, query: Query, *args: str) -> Any:
        return views.streams(self.ctx.core)


class StreamHandler(ApiHandler):
    scans = True

    def answer(self, query: Query, *args: str) -> Any:
        (stream,) = args
        return views.stream(self.ctx.core, path_name(stream, "stream name"))


class MessagesHandler(ApiHandler):
    params = ("after", "since_ms", "limit", "format", "key_serde", "value_serde")

    def answer(self, query: Query, *args: str) -> Any:
        stream, partition = args
        name, p = path_name(stream, "stream name"), path_partition(partition)
        after = query.integer("after", 0, 0, MAX_ID)
        if "since_ms" in query.values:
            if "after" in query.values:
                raise errors.InvalidArgument("give query parameter 'after' or 'since_ms', not both")
            since = query.integer("since_ms", 0, 0, MAX_SECONDS * 1000)
            after = max(0, txn_id_at(since / 1000) - 1)  # transactions opened at or after since_ms
        limit = query.integer("limit", 20, 1, MAX_PAGE_TXNS)
        fmt, key_serde, value_serde = message_format(query)
        return views.messages(self.ctx.core, name, p, after, limit, fmt, key_serde, value_serde)


class ConsumersHandler(ApiHandler):
    params = ("stream",)
    scans = True

    def answer(self, query: Query, *args: str) -> Any:
        stream = query.values.get("stream")
        return views.consumers(self.ctx.core, path_name(stream, "stream name") if stream is not None else None)


class ConsumerHandler(ApiHandler):
    scans = True

    def answer(self, query: Query, *args: str) -> Any:
        stream, consumer = args
        return views.consumer(self.ctx.core, path_name(stream, "stream name"), path_name(consumer, "consumer name"))


class LagHandler(ApiHandler):
    def answer(self, query: Query, *args: str) -> Any:
        stream, consumer = args
        return self.ctx.sampler.history(path_name(stream, "stream name"), path_name(consumer, "consumer name"))


class QueueHandler(ApiHandler):
    scans = True

    def answer(self, query: Query, *args: str) -> Any:
        stream, group = args
        return views.queue(self.ctx.core, path_name(stream, "stream name"), path_name(group, "group name"))


class QueuesHandler(ApiHandler):
    params = ("stream",)
    scans = True

    def answer(self, query: Query, *args: str) -> Any:
        stream = query.values.get("stream")
        return views.queues(self.ctx.core, path_name(stream, "stream name") if stream is not None else None)


class SchedulesHandler(ApiHandler):
    params = ("stream",)
    scans = True

    def answer(self, query: Query, *args: str) -> Any:
        stream = query.values.get("stream")
        return views.schedules(self.ctx.core, path_name(stream, "stream name") if stream is not None else None)


class AppsHandler(ApiHandler):
    scans = True

    def answer(self, query: Query, *args: str) -> Any:
        return views.apps(self.ctx.core)


class NotFoundHandler(ApiHandler):
    async def get(self, *args: str) -> None:
        self.reply(404, {"error": "NotFound", "message": f"no such API endpoint: {self.request.path} "
                                                        "(see docs/CONSOLE.md)"})


class PageHandler(StaticFileHandler):
    """The page's static files, behind the token when there is one (:func:`page_handler`)."""

    token: str | None = None

    def prepare(self) -> None:
        if not token_ok(self, self.token):
            raise HTTPError(401, "this console needs its token (?token=TOKEN)")
        given = self.get_query_argument("token", None)
        if self.token is not None and given:
            self.set_cookie(TOKEN_COOKIE, given, httponly=True, samesite="Strict")


def page_handler(token: str | None) -> type[PageHandler]:
    """A :class:`PageHandler` class that requires ``token``."""
    return type("TokenPageHandler", (PageHandler,), {"token": token})


def console_routes(ctx: Context) -> list[tuple[str, type[RequestHandler], dict[str, Any]]]:
    """The routes of the console (API and page) over ``ctx``."""
    api: list[tuple[str, type[ApiHandler]]] = [
        (r"/api/overview", OverviewHandler),
        (r"/api/streams", StreamsHandler),
        (rf"/api/streams/{_NAME}", StreamHandler),
        (rf"/api/streams/{_NAME}/partitions/{_NAME}/messages", MessagesHandler),
        (r"/api/consumers", ConsumersHandler),
        (rf"/api/streams/{_NAME}/consumers/{_NAME}", ConsumerHandler),
        (rf"/api/streams/{_NAME}/consumers/{_NAME}/lag", LagHandler),
        (rf"/api/streams/{_NAME}/queues/{_NAME}", QueueHandler),
        (r"/api/queues", QueuesHandler),
        (r"/api/schedules", SchedulesHandler),
        (r"/api/apps", AppsHandler),
        (r"/api/(.*)", NotFoundHandler),
    ]
    routes: list[tuple[str, type[RequestHandler], dict[str, Any]]] = [(p, h, {"ctx": ctx}) for p, h in api]
    routes.append((r"/console/(.*)", page_handler(ctx.token),
                   {"path": str(STATIC_DIR), "default_filename": "index.html"}))
    return routes


def start_console(core: Core, token: str | None = None, interval: float = 10.0, keep: int = 360,
                  cluster: Callable[[], dict[str, Any]] | None = None,
                  ) -> tuple[list[tuple[str, type[RequestHandler], dict[str, Any]]], Callable[[], None]]:
    """The console's routes over ``core`` and a function that stops its sampler (started
    here). On a cluster node, ``cluster()`` answers the cluster as the node sees it (roles,
    epochs, positions, lag: what the status page shows), shown on the overview."""
    budget = ReadBudget()
    sampler = LagSampler(core, interval, keep)
    sampler.start()
    ctx = Context(core, sampler, budget, token, cluster)

    def stop() -> None:
        sampler.stop()
        ctx.readers.shutdown(wait=True, cancel_futures=True)

    return console_routes(ctx), stop
