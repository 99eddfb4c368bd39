"""Run a server process on a data directory (what ``tstreams serve`` does).

SIGTERM or SIGINT stops it gracefully: requests already received are finished and
answered, requests arriving meanwhile are answered ``NOT_EXECUTED`` (clients re-send them,
e.g. to another server behind HAProxy), the engine is synced and closed, and the process
exits with status 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

import zmq
from tornado.ioloop import IOLoop
from zmq.auth.thread import ThreadAuthenticator

from ..engine.protocol.validate import check_interval
from ..errors import InvalidArgument
from ..listening import exposed_binds, listen_http, parse_http
from . import framing
from .auth import PeerKeys, load_server_curve, start_authenticator
from .endpoints import check_endpoints
from .handlers import DEFAULT_PAGE_BYTES, backend_registry
from .registry import Registry
from .server import Server, ServerOptions

log = logging.getLogger(__name__)

def return_large_blocks(threshold: int = 64 * 1024) -> None:
    """glibc: serve blocks of ``threshold`` bytes or more with their own mappings, returned
    to the system when freed. By default glibc raises this threshold as large blocks are
    freed (up to 32 MiB), and the frames of large requests then stay in the heap after
    use: a server that handled a burst of 1 MiB writes kept its peak RSS for good. 64 KiB:
    the payload of every piece (wire protocol 3) is its own mapping, so the pieces held
    while a request is assembled never leave holes in ZeroMQ's arena when freed (with 256
    KiB, 16 clients of 16 MiB requests peaked at 450-460 MiB instead of 290-313 MiB)."""
    import ctypes
    import ctypes.util

    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, threshold)  # M_MMAP_THRESHOLD (fixed: no dynamic adjustment)


def metrics_app(core: Any, server: Server, extra_routes: Sequence[Any] = ()) -> Any:
    """The single-node ``--http`` application: ``/metrics`` (:mod:`.metrics`), then
    ``extra_routes`` (the console's, :mod:`tstreams_embedded.console`)."""
    try:
        from tornado.web import Application

        from .metrics import engine_registry, metrics_route
    except ImportError as exc:
        raise InvalidArgument(f"--http needs prometheus-client (pip install 'tstreams-embedded[metrics]'): {exc}"
                              ) from exc
    return Application([metrics_route(engine_registry(core, server.stats)), *extra_routes])


def run_until_signal(server: Server, stop_timeout: float, ready_file: str | None,
                     on_start: Callable[[], None] | None = None, on_stop: Callable[[], None] | None = None) -> None:
    """Run ``server`` on a new event loop until SIGTERM or SIGINT, then stop it gracefully.

    ``on_start`` runs once the server is started (other services on the same loop);
    ``on_stop`` runs first when a signal arrives. The bound endpoints are written to
    ``ready_file`` (atomically) once serving."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        server.start(IOLoop.current())
        if on_start is not None:
            try:
                on_start()
            except BaseException:
                server.stop(0)  # nothing in flight yet: closes the socket at once (no hang at exit)
                raise

        def on_signal() -> None:
            log.info("signal received: stopping")
            if on_stop is not None:
                on_stop()
            server.stop(stop_timeout, on_stopped=done.set)

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        if ready_file:
            tmp = ready_file + ".tmp"
            with open(tmp, "w") as f:
                f.write("\n".join(server.endpoints) + "\n")
            os.replace(tmp, ready_file)
        await done.wait()

    asyncio.run(main())


def server_options(durability: str = "sync", max_msg_size: int | None = None, *,
                   max_request_size: int | None = None, max_client_bytes: int | None = None,
                   max_write_queue_bytes: int | None = None,
                   max_reply_bytes: int | None = None, max_server_bytes: int | None = None,
                   rcvhwm: int | None = None, piece_timeout: float | None = None) -> ServerOptions:
    """The :class:`ServerOptions` of ``tstreams serve``'s byte budgets (single node and
    cluster node alike), or :class:`InvalidArgument`; budgets left ``None`` keep the
    defaults."""
    opts = ServerOptions(inline_writes=durability == "async")
    for name, value in (("max_msg_size", max_msg_size), ("max_request_bytes", max_request_size),
                        ("max_client_bytes", max_client_bytes), ("max_write_queue_bytes", max_write_queue_bytes),
                        ("max_reply_bytes", max_reply_bytes), ("max_server_bytes", max_server_bytes),
                        ("rcvhwm", rcvhwm)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < (-1 if name == "max_msg_size" else 1)):
            raise InvalidArgument(f"{name} must be a positive number of bytes, got {value!r}")
    if max_request_size is not None:
        opts.max_request_bytes = max_request_size
    if max_msg_size is not None:
        # ZeroMQ refuses, at its header, any frame larger (nothing of it is held); a piece
        # (wire protocol 3, what clients send requests over 64 KiB in) must fit
        if max_msg_size != -1 and max_msg_size < framing.MESSAGE_LIMIT:
            raise InvalidArgument(f"max_msg_size must be at least {framing.MESSAGE_LIMIT} bytes (a piece of a "
                                  f"request), or -1, got {max_msg_size}")
        opts.max_msg_size = int(max_msg_size)
    if piece_timeout is not None:
        check_interval(piece_timeout, "piece_timeout")
        opts.piece_timeout = float(piece_timeout)
    if max_client_bytes is not None:
        opts.max_client_bytes = max_client_bytes
    if max_write_queue_bytes is not None:
        opts.max_write_queue_bytes = max_write_queue_bytes
    if max_server_bytes is not None:
        opts.max_server_bytes = max_server_bytes
    if rcvhwm is not None:
        opts.rcvhwm = rcvhwm
    if opts.max_server_bytes < opts.max_request_bytes:  # such a request would be refused for ever
        raise InvalidArgument(f"max_server_bytes ({opts.max_server_bytes}) must be at least max_request_size "
                              f"({opts.max_request_bytes})")
    return opts


def start_security(context: zmq.Context[Any], curve_dir: str | os.PathLike[str] | None, binds: Sequence[str],
                   opts: ServerOptions, peers: PeerKeys | None = None) -> ThreadAuthenticator | None:
    """Enable CURVE on ``opts`` from ``curve_dir`` and start the ZAP authenticator on
    ``context`` (with ``peers``: a cluster node's replication port too, see :mod:`.auth`);
    return it, to be stopped after the server. Without ``curve_dir``, warn when a bind is
    reachable from other machines and return ``None``."""
    if curve_dir is None:
        if exposed_binds(binds):
            log.warning("serving %s without CURVE: any host that reaches it can read and write every "
                        "stream; use --curve-dir (see 'tstreams keys generate') or bind to 127.0.0.1",
                        ", ".join(exposed_binds(binds)))
        return None
    pub, sec, authorized = load_server_curve(curve_dir)
    opts.curve_public_key, opts.curve_secret_key = pub, sec
    return start_authenticator(context, authorized, peers)


def serve(
    data: str | os.PathLike[str],
    bind: str | Sequence[str] = "tcp://127.0.0.1:7000",
    durability: str = "sync",
    curve_dir: str | os.PathLike[str] | None = None,
    max_msg_size: int | None = None,
    ready_file: str | None = None,
    stop_timeout: float = 10.0,
    *,
    max_request_size: int | None = None,
    max_client_bytes: int | None = None,
    max_write_queue_bytes: int | None = None,
    max_reply_bytes: int = DEFAULT_PAGE_BYTES,
    max_server_bytes: int | None = None,
    rcvhwm: int | None = None,
    piece_timeout: float | None = None,
    http: str | None = None,
    http_token: str | None = None,
    console_sample_interval: float = 10.0,
    **core_options: Any,
) -> int:
    """Serve the engine in ``data`` until SIGTERM/SIGINT; return the exit status (0).
    Budgets left ``None`` keep :class:`ServerOptions`' defaults. ``http`` (``host:port``)
    also serves ``/metrics`` there (Prometheus; needs prometheus-client) and the console
    (``/console/``, ``/api/``; every request must carry ``http_token`` when given; its lag
    sampler reads every ``console_sample_interval`` seconds)."""
    # every argument is checked before anything is created (the data directory included)
    binds = check_endpoints(bind, bind=True)
    http_addr = parse_http(http) if http is not None else None
    from ..engine.storage.core import Core

    opts = server_options(durability, max_msg_size, max_request_size=max_request_size,
                          max_client_bytes=max_client_bytes, max_write_queue_bytes=max_write_queue_bytes,
                          max_reply_bytes=max_reply_bytes, max_server_bytes=max_server_bytes,
                          rcvhwm=rcvhwm, piece_timeout=piece_timeout)
    return_large_blocks()
    ctx = zmq.Context()
    auth = start_security(ctx, curve_dir, binds, opts)
    server = Server(Registry(), binds, opts, context=ctx)  # its registry once the engine is open
    try:
        server.bind()  # a taken or unknown address fails before the data directory is made
        core = Core(os.fspath(data), durability, **core_options)
    except BaseException:
        server.stop(0)
        if auth is not None:
            auth.stop()
        ctx.term()
        raise
    server.use_registry(backend_registry(core, {"data": os.path.abspath(os.fspath(data))}, max_reply_bytes),
                        core.wait_for_commit)

    stop_console: list[Callable[[], None]] = []

    def on_start() -> None:
        if http_addr is not None:
            from ..console.web import start_console

            routes, stop = start_console(core, http_token, console_sample_interval)
            stop_console.append(stop)
            listen_http(metrics_app(core, server, routes), http_addr[0], http_addr[1])

    try:
        run_until_signal(server, stop_timeout, ready_file, on_start=on_start)
    finally:
        for stop in stop_console:
            stop()
        core.close()  # syncs
        if auth is not None:
            auth.stop()
        ctx.term()
    return 0
