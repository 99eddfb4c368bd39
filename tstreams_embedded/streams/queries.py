"""Interactive queries across instances: key discovery, and a small HTTP endpoint per app.

* :func:`query_metadata_for_key` says which instance runs the task that owns a key of a
  store (host and port of its HTTP endpoint, as Kafka Streams' ``queryMetadataForKey``):
  the key's task is ``crc32c(key bytes) % tasks``, its owner the holder of that task's
  lease (:mod:`.app_members`).
* :class:`QueryServer` (``App(..., http_port=0)``; Tornado, on its own thread and IO loop,
  store reads on a small thread pool) answers, in JSON:

  ========================================================  =================================
  ``GET /v1/stores/<store>/get?key=K[&start=S&end=E]``      one key (one window) — owned keys
  ``GET /v1/stores/<store>/range?from=K&to=K&limit=N``      this instance's tasks' entries
  ``GET /v1/stores/<store>/prefix?prefix=P&limit=N``        keys starting with ``P`` (str/bytes keys)
  ``GET /v1/stores/<store>/fetch?key=K&from=T&to=T``        windows of a key — owned keys
  ``GET /v1/metadata/<store>?key=K``                        key discovery
  ``GET /v1/members``                                       live instances and their tasks
  ``GET /metrics``                                          Prometheus text format
  ========================================================  =================================

  ``K`` is the key as JSON (``"ann"``, ``42``, ``["a", 1]``; numbers finite), turned into
  the store's key with its key serde. Answers are strict JSON: a stored non-finite float is
  answered as the string ``"inf"``, ``"-inf"`` or ``"nan"``. A ``get`` or ``fetch`` of a
  key whose task another instance runs is answered ``421`` with that instance's address
  (``{"owner": {...}}``); :class:`QueryClient` follows it. Ranges and prefixes return at
  most ``limit`` entries (1,000 by default, 10,000 at most; ``"truncated": true`` when
  there were more: continue from the last key). Keys nest at most :data:`MAX_KEY_DEPTH`
  (32) lists (or objects) deep. Errors are ``400`` (bad input, also a query or path that is not UTF-8),
  ``404`` (no such store, or an unknown path), ``405`` (a method other than ``GET``), each
  with the JSON body ``{"error": class, "message": ...}``, never an HTML page.

Consistency and staleness: every answer is committed state, read in ONE snapshot of the
engine (``Backend.store_snapshot``), whatever the number of tasks it covers: a commit is
in it wholly or not at all. It lags the processing by at most one commit
(``commit_interval_ms``, 100 ms by default); tasks commit independently, so each task's
part is its latest commit. An answer is at most 16 MiB (``QueryTooLarge`` beyond, ``400``).
Continuing a truncated range is a new query on a newer snapshot. Prefix queries need a
``str`` or ``bytes`` key serde (``400`` otherwise); ranges order keys by their serialized
bytes. A global table's store is answered by every instance. During a rebalance a key's
owner may change between the discovery call and the query: the old owner then answers
``421`` naming the new one.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import tornado.httpserver
import tornado.ioloop
import tornado.netutil
import tornado.web

from .. import errors
from ..engine.storage import state_stores as state
from .app_members import read_group
from .key_owners import QueriedApp, query_metadata_for_key
from .stores import ReadOnlyKeyValueStore, ReadOnlyWindowStore
from .windows import Windowed

#: entries a range or prefix query returns by default, and at most (``&limit=``)
DEFAULT_LIMIT = 1_000
MAX_LIMIT = 10_000
#: how deep a query's JSON key may nest lists (``[[["a"]]]`` is 3 deep)
MAX_KEY_DEPTH = 32
#: the ``error`` of an answer the handlers did not make (Tornado's own 4xx/5xx), by status
HTTP_ERROR_NAMES = {400: "InvalidArgument", 404: "NotFound", 405: "MethodNotAllowed"}


def _json_key(raw: str | None, what: str) -> Any:
    if raw is None:
        raise errors.InvalidArgument(f"the query needs ?{what}=<JSON>")
    try:
        parsed = json.loads(raw, parse_float=_finite, parse_constant=_no_constant)
    except _NotFinite:
        raise errors.InvalidArgument(f"{what} must be JSON with finite numbers, got {raw!r:.60}") from None
    except RecursionError:
        raise errors.InvalidArgument(f"{what} nests deeper than {MAX_KEY_DEPTH}, got {raw!r:.60}") from None
    except ValueError:
        raise errors.InvalidArgument(f"{what} must be JSON (a string needs quotes), got {raw!r:.60}") from None
    return _from_json(parsed, what, 0)


class _NotFinite(Exception):
    pass


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _no_constant(text: str) -> float:
    raise _NotFinite(text)


def _from_json(v: Any, what: str, depth: int) -> Any:
    """JSON lists as tuples (a key must be hashable); InvalidArgument if lists and objects
    nest deeper than MAX_KEY_DEPTH."""
    if isinstance(v, (list, dict)) and depth >= MAX_KEY_DEPTH:
        raise errors.InvalidArgument(f"{what} nests deeper than {MAX_KEY_DEPTH}")
    if isinstance(v, list):
        return tuple(_from_json(x, what, depth + 1) for x in v)
    if isinstance(v, dict):
        for x in v.values():
            _from_json(x, what, depth + 1)
    return v


def _to_json(v: Any) -> Any:
    if isinstance(v, Windowed):
        return {"key": _to_json(v.key), "start": v.start, "end": v.end}
    if isinstance(v, (list, tuple)):
        return [_to_json(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _to_json(x) for k, x in v.items()}
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # "inf", "-inf", "nan": strict JSON has no such numbers
    return v


def _int_arg(raw: str | None, what: str, default: int) -> int:
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise errors.InvalidArgument(f"{what} must be an integer, got {raw!r:.40}") from None


class _JsonErrors(tornado.web.RequestHandler):
    """Errors Tornado answers itself (a path or query that is not UTF-8, an unknown path or
    method, an unexpected failure) with the JSON error body, not an HTML page."""

    def initialize(self, server: QueryServer) -> None:
        self.server = server

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = exc.log_message if isinstance(exc, tornado.web.HTTPError) and exc.log_message else None
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": HTTP_ERROR_NAMES.get(status_code, "InternalError"),
                                "message": message or self._reason}))


class _NotFound(_JsonErrors):
    """Every path no other handler serves."""

    def prepare(self) -> None:
        raise tornado.web.HTTPError(404, f"no such path {self.request.path!r:.80}: /v1/stores/<store>/<query>, "
                                         f"/v1/metadata/<store>, /v1/members, /metrics")


class _Handler(_JsonErrors):
    """Runs a query on the server's thread pool and answers JSON."""

    async def get(self, *args: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            status, body = await loop.run_in_executor(self.server.pool, self.answer, *args)
        except errors.StoreNotFound as exc:
            status, body = 404, {"error": "StoreNotFound", "message": str(exc)}
        except errors.TStreamsError as exc:
            status, body = 400, {"error": type(exc).__name__, "message": str(exc)}
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def arg(self, name: str) -> str | None:
        try:
            return self.get_query_argument(name, None)
        except tornado.web.HTTPError:  # not UTF-8
            raise errors.InvalidArgument(f"?{name}= is not UTF-8 text (percent-encode the UTF-8 bytes)") from None

    def answer(self, *args: str) -> tuple[int, Any]:
        raise NotImplementedError


class _StoreHandler(_Handler):
    def answer(self, *args: str) -> tuple[int, Any]:
        store, op = args
        app = self.server.app
        spec = app.store_spec(store)
        if op not in ("get", "range", "prefix", "fetch"):
            return 404, {"error": "NotFound", "message": f"unknown store query {op!r}: get, range, prefix, fetch"}
        view = app.store(store)
        owned = sorted(t.partition for t in app.running_tasks())
        if op in ("get", "fetch"):
            key = _json_key(self.arg("key"), "key")
            partition: int | None = None
            if not view.replicated:  # a global table's store is whole on every instance
                meta = query_metadata_for_key(app, store, key)
                if meta.partition not in owned:
                    return 421, {"error": "NotOwner", "message": f"task {meta.partition} runs elsewhere",
                                 "owner": asdict(meta)}
                partition = meta.partition
                view = app.store(store, partitions=[partition])
            if op == "get":
                if isinstance(view, ReadOnlyWindowStore):
                    value = view.get(key, _int_arg(self.arg("start"), "start", 0), _int_arg(self.arg("end"), "end", 0))
                else:
                    value = view.get(key)
                return 200, {"key": _to_json(key), "value": _to_json(value), "partition": partition}
            if not isinstance(view, ReadOnlyWindowStore):
                raise errors.InvalidArgument(f"store {store!r} is not windowed: use get")
            windows = view.fetch(key, _int_arg(self.arg("from"), "from", state.MIN_TIME),
                                 _int_arg(self.arg("to"), "to", state.MAX_TIME))
            return 200, {"windows": [{**_to_json(w), "value": _to_json(v)} for w, v in windows],
                         "partition": partition}
        if not isinstance(view, ReadOnlyKeyValueStore):
            raise errors.InvalidArgument(f"store {store!r} is windowed: use fetch")
        limit = _int_arg(self.arg("limit"), "limit", DEFAULT_LIMIT)
        if not 1 <= limit <= MAX_LIMIT:
            raise errors.InvalidArgument(f"limit must be in [1, {MAX_LIMIT}], got {limit}")
        if not view.replicated:
            view = app.store(store, partitions=owned)
            assert isinstance(view, ReadOnlyKeyValueStore)
        ks = spec.key_serde
        if op == "range":
            lo_arg, hi_arg = self.arg("from"), self.arg("to")
            lo = None if lo_arg is None else ks.serialize(_json_key(lo_arg, "from"))
            hi = None if hi_arg is None else ks.serialize(_json_key(hi_arg, "to"))
        else:
            lo, hi = view.prefix_bounds(_json_key(self.arg("prefix"), "prefix"))
        raw = view.entries(lo, hi, limit + 1)  # one snapshot of every task's entries
        vs = spec.value_serde
        return 200, {"entries": [[_to_json(ks.deserialize(k)), _to_json(vs.deserialize(v))] for k, v in raw[:limit]],
                     "truncated": len(raw) > limit, "partitions": owned}


class _MetadataHandler(_Handler):
    def answer(self, *args: str) -> tuple[int, Any]:
        return 200, asdict(query_metadata_for_key(self.server.app, args[0], _json_key(self.arg("key"), "key")))


class _MembersHandler(_Handler):
    def answer(self, *args: str) -> tuple[int, Any]:
        app = self.server.app
        view = read_group(app.engine.backend, app.application_id, app.lease_ms)
        return 200, {"members": [{"member": m.member_id, "host": m.host, "port": m.port,
                                  "partitions": sorted(p for p in view.tasks if view.owner(p) == m.member_id)}
                                 for m in sorted(view.members.values(), key=lambda m: m.member_id)]}


class _MetricsHandler(_JsonErrors):
    async def get(self) -> None:
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(self.server.pool, self.server.app.prometheus.exposition)
        self.set_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.finish(body)


class QueryServer:
    """The HTTP endpoint of an app instance (see the module docstring); ``port`` is the
    bound port (``0`` asks the system for a free one)."""

    def __init__(self, app: QueriedApp, host: str, port: int) -> None:
        self.app = app
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"streams-http-{app.application_id}")
        sockets = tornado.netutil.bind_sockets(port, host)
        self.host = host
        self.port = sockets[0].getsockname()[1]
        self._ready = threading.Event()
        self._loop: tornado.ioloop.IOLoop | None = None
        self._thread = threading.Thread(target=self._serve, args=(sockets,), name="streams-http", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _serve(self, sockets: list[Any]) -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        self._loop = tornado.ioloop.IOLoop.current()
        kw = {"server": self}
        web = tornado.web.Application([
            (r"/v1/stores/([^/]+)/(get|range|prefix|fetch|[^/]+)", _StoreHandler, kw),
            (r"/v1/metadata/([^/]+)", _MetadataHandler, kw),
            (r"/v1/members", _MembersHandler, kw),
            (r"/metrics", _MetricsHandler, kw),
        ], default_handler_class=_NotFound, default_handler_args=kw)
        server = tornado.httpserver.HTTPServer(web, max_body_size=1 << 16)
        server.add_sockets(sockets)
        self._ready.set()
        self._loop.start()
        server.stop()
        self._loop.close(all_fds=True)

    def close(self) -> None:
        loop = self._loop
        if loop is not None:
            loop.add_callback(loop.stop)
            self._thread.join(timeout=10)
        self.pool.shutdown(wait=False)


class QueryClient:
    """Queries an application's stores over HTTP, through any of its instances, following
    the key discovery: ``QueryClient("127.0.0.1", port).get("counts", "ann")``."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.base = f"http://{host}:{port}"
        self.timeout = timeout

    def request(self, path: str, **params: Any) -> tuple[int, Any]:
        """``(status, JSON body)`` of ``GET path?params`` (values JSON-encoded if not str)."""
        return self._get(self.base, path, params)

    def _get(self, base: str, path: str, params: dict[str, Any]) -> tuple[int, Any]:
        query = urllib.parse.urlencode({k: json.dumps(v) for k, v in params.items() if v is not None})
        url = f"{base}{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as r:  # noqa: S310 - http only
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, json.loads(exc.read() or b"null")
            except ValueError:
                raise errors.RemoteError(f"{url}: answered {exc.code} without a JSON body") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise errors.RemoteError(f"cannot query {base}{path}: {reason}") from None
        except ValueError:
            raise errors.RemoteError(f"{url}: the answer is not JSON") from None

    def metadata(self, store: str, key: Any) -> dict[str, Any]:
        status, body = self.request(f"/v1/metadata/{store}", key=key)
        if status != 200:
            raise errors.RemoteError(f"metadata of {store!r}: {status} {body}")
        return dict(body)

    def get(self, store: str, key: Any, **window: int) -> Any:
        """The value of ``key`` (``start=``, ``end=`` for a window), asked of its owner."""
        return self._owned(store, "get", key, window)["value"]

    def fetch(self, store: str, key: Any, time_from: int | None = None, time_to: int | None = None) -> list[Any]:
        return list(self._owned(store, "fetch", key, {"from": time_from, "to": time_to})["windows"])

    def _owned(self, store: str, op: str, key: Any, extra: dict[str, Any]) -> dict[str, Any]:
        base = self.base
        for _ in range(5):
            status, body = self._get(base, f"/v1/stores/{store}/{op}", {"key": key, **extra})
            if status == 200:
                return dict(body)
            if status == 421 and body["owner"]["host"] is not None:
                base = f"http://{body['owner']['host']}:{body['owner']['port']}"
                continue
            raise errors.RemoteError(f"{op} {key!r} of {store!r}: {status} {body}")
        raise errors.RemoteError(f"{op} {key!r} of {store!r}: the owner kept moving")


