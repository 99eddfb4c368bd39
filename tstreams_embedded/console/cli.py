"""``tstreams console``: the web console over an embedded data directory.

It opens the directory beside a running application (as the CLI's ``--data`` commands do),
serves the console and its API on ``--http`` (127.0.0.1:8080 by default) and stops on
SIGTERM or SIGINT. Bound to anything but loopback it needs ``--http-token``.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import click

from ..engine.embedded import open_engine
from ..engine.storage.core import Core
from ..listening import exposed_binds, listen_http, parse_http
from ..tools.params import seconds

DEFAULT_HTTP = "127.0.0.1:8080"


@click.command("console")
@click.option("--data", required=True, type=click.Path(file_okay=False, exists=True),
              help="Data directory (embedded engine; it must exist).")
@click.option("--http", default=DEFAULT_HTTP, show_default=True, metavar="HOST:PORT",
              help="Where to serve the console (/console/) and its API (/api/).")
@click.option("--http-token", default=None, metavar="TOKEN", envvar="TSTREAMS_HTTP_TOKEN",
              help="Require this token on every request; needed when --http is not a loopback address.")
@click.option("--sample-interval", type=seconds(0, 3600, min_open=True), default=10.0, show_default=True,
              metavar="SECONDS", help="Seconds between lag samples (the charts keep 360 samples).")
def console(data: str, http: str, http_token: str | None, sample_interval: float) -> None:
    """Serve the read-only web console of the engine in DATA until SIGTERM or SIGINT."""
    from tornado.web import Application

    host, port = parse_http(http)
    if http_token is None and exposed_binds([f"tcp://{host}:{port}"]):
        raise click.UsageError(f"--http {http} is reachable from other machines: give --http-token "
                               "(or bind to 127.0.0.1)")
    if http_token is not None and not http_token:
        raise click.BadParameter("the token must not be empty", param_hint="'--http-token'")
    from .web import start_console

    # it only reads: it neither compacts nor fires due schedules (the application does)
    with open_engine(data, compaction_interval=None, create=False, fire_schedules=False) as engine:
        core = engine.backend
        assert isinstance(core, Core)  # an embedded engine's backend
        routes, stop = start_console(core, http_token, sample_interval)
        try:
            asyncio.run(_serve(Application(routes), host, port))
        finally:
            stop()


async def _serve(app: Any, host: str, port: int) -> None:
    listen_http(app, host, port)
    click.echo(f"console on http://{host}:{port}/console/", err=True)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    await done.wait()
