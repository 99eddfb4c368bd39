"""Click commands of the network layer: ``serve`` and the ``keys`` group (``keys generate``).

They are commands of the ``tstreams`` program (:mod:`tstreams_embedded.cli`); running this
module (``python -m tstreams_embedded.net.cli``) offers them alone.
"""

from __future__ import annotations

import logging
import sys

import click

from ..tools.params import seconds
from .handlers import DEFAULT_PAGE_BYTES
from .server import (
    DEFAULT_MAX_CLIENT_BYTES,
    DEFAULT_MAX_MSG_SIZE,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_SERVER_BYTES,
    DEFAULT_MAX_WRITE_QUEUE_BYTES,
    ServerOptions,
)

_BYTES = click.IntRange(min=1)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@click.command("serve")
@click.option("--data", "data", required=True, type=click.Path(file_okay=False),
              help="Data directory (created if missing). Several servers may share one.")
@click.option("--bind", "binds", multiple=True, default=["tcp://127.0.0.1:7000"], show_default=True,
              help="ZeroMQ endpoint to bind (repeatable).")
@click.option("--durability", type=click.Choice(["sync", "strict", "async"]), default="sync", show_default=True)
@click.option("--curve-dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Enable CURVE: directory made by 'tstreams keys generate'.")
@click.option("--max-msg-size", type=int, default=None,
              help="Largest accepted ZeroMQ frame and message in bytes (ZMQ_MAXMSGSIZE; default: a piece, "
                   f"{DEFAULT_MAX_MSG_SIZE}; at least that, or -1): ZeroMQ refuses a larger frame at its header, "
                   "holding none of it, and disconnects the peer. Clients send larger requests in pieces.")
@click.option("--max-request-size", type=_BYTES, default=DEFAULT_MAX_REQUEST_BYTES, show_default=True,
              help="Largest request in bytes, all frames together; larger ones are answered RequestTooLarge.")
@click.option("--max-client-bytes", type=_BYTES, default=DEFAULT_MAX_CLIENT_BYTES, show_default=True,
              help="Per client: bytes of requests running plus replies not yet sent, beyond which its "
                   "further requests are held back (and past as much again answered ServerBusy).")
@click.option("--max-write-queue-bytes", type=_BYTES, default=DEFAULT_MAX_WRITE_QUEUE_BYTES, show_default=True,
              help="Bytes of writes queued for the writer, beyond which further writes are held back "
                   "(each client's in order) until it catches up.")
@click.option("--max-server-bytes", type=_BYTES, default=DEFAULT_MAX_SERVER_BYTES, show_default=True,
              help="All clients together: bytes of requests running or held back plus replies not yet sent, "
                   "beyond which requests are answered ServerBusy (not executed).")
@click.option("--rcvhwm", type=click.IntRange(min=1), default=ServerOptions.rcvhwm, show_default=True,
              help="Messages ZeroMQ queues per connection while the server is busy (ZMQ_RCVHWM; a count: each "
                   "connection can make ZeroMQ hold about (rcvhwm + 2) x --max-msg-size).")
@click.option("--piece-timeout", type=seconds(0, 3600, min_open=True), default=ServerOptions.piece_timeout,
              show_default=True,
              help="Seconds a request arriving in pieces may wait for its next piece; then it is dropped and "
                   "its buffers freed.")
@click.option("--max-reply-bytes", type=_BYTES, default=DEFAULT_PAGE_BYTES, show_default=True,
              help="Items per read reply, in bytes; larger results are paged (transparently for clients).")
@click.option("--http", default=None,
              help="host:port for HTTP: /metrics (Prometheus); a cluster node adds its health checks, "
                   "/status and the status page at / (see docs/CLUSTER.md).")
@click.option("--http-token", default=None, metavar="TOKEN", envvar="TSTREAMS_HTTP_TOKEN",
              help="Require this token on every console request (/console/, /api/; see docs/CONSOLE.md).")
@click.option("--console-sample-interval", type=seconds(0, 3600, min_open=True), default=10.0, show_default=True,
              metavar="SECONDS", help="Seconds between the console's lag samples (its charts keep 360).")
@click.option("--ready-file", type=click.Path(dir_okay=False), default=None,
              help="Write the bound endpoints to this file once serving.")
@click.option("--log-level", default="INFO", show_default=True, type=click.Choice(LOG_LEVELS, case_sensitive=False))
def serve(data: str, binds: tuple[str, ...], durability: str, curve_dir: str | None, max_msg_size: int | None,
          max_request_size: int, max_client_bytes: int, max_write_queue_bytes: int, max_server_bytes: int,
          rcvhwm: int, piece_timeout: float, max_reply_bytes: int, http: str | None, http_token: str | None,
          console_sample_interval: float, ready_file: str | None, log_level: str) -> None:
    """Serve the engine in DATA over ZeroMQ until SIGTERM (graceful: exit status 0)."""
    configure_logging(log_level)
    from .serve import serve as run

    sys.exit(run(data, list(binds), durability, curve_dir, max_msg_size, ready_file,
                 max_request_size=max_request_size, max_client_bytes=max_client_bytes,
                 max_write_queue_bytes=max_write_queue_bytes, max_reply_bytes=max_reply_bytes,
                 max_server_bytes=max_server_bytes, rcvhwm=rcvhwm, piece_timeout=piece_timeout, http=http,
                 http_token=http_token, console_sample_interval=console_sample_interval))


def configure_logging(level: str) -> None:
    """Log to stderr at ``level``, with the process id (servers run as child processes)."""
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")


@click.group("keys")
def keys() -> None:
    """CURVE key management."""


@keys.command("generate")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--client", "clients", multiple=True, default=["client"], show_default=True,
              help="Client keypair name to create and authorize (repeatable).")
def generate(directory: str, clients: tuple[str, ...]) -> None:
    """Create a server keypair and authorized client keypairs in DIRECTORY."""
    from .auth import generate_keys

    try:
        written = generate_keys(directory, tuple(clients))
    except OSError as exc:
        raise click.ClickException(f"cannot write keys in {directory!r}: {exc.strerror or exc}") from None
    for name, path in written.items():
        click.echo(f"{name}: {path}")


def main() -> None:  # pragma: no cover
    @click.group()
    def cli() -> None:
        pass

    cli.add_command(serve)
    cli.add_command(keys)
    cli()


if __name__ == "__main__":  # pragma: no cover
    main()
