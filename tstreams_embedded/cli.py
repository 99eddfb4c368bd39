"""The ``tstreams`` command line: stream administration, operator tooling (describe, consume,
produce, consumers; :mod:`.tools`), the examples and the server.

Errors of the engine become a one-line ``Error: Class: message`` with exit status 1 (see
:class:`Main`), never a traceback."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

import tstreams_embedded as ts

from . import errors
from .commands.backups import archive, backup, restore
from .commands.queues import queues
from .commands.schedules import schedules
from .commands.streams import consume, consumers, produce, streams_describe
from .commands.target import Target, creating_target_options, target_options
from .quickstart import quickstart
from .tools.output import Output, ms_time


class OneLineError(click.ClickException):
    """An engine error shown as one line (``Error: …``), exit status 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class OneLineUsageError(OneLineError):
    """A bad option or argument shown as one line, without usage text, exit status 2."""

    exit_code = 2


class Main(click.Group):
    """The ``tstreams`` group: an engine error in any command becomes a one-line message
    (``Error: StreamNotFound: …``) with exit status 1, and a bad option or argument of a
    command a one-line message with exit status 2 (no usage text)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except errors.TStreamsError as exc:
            raise OneLineError(f"{type(exc).__name__}: {exc}") from None
        except click.UsageError as exc:
            raise OneLineUsageError(exc.format_message()) from None


@click.group(cls=Main)
@click.version_option(ts.__version__, prog_name="tstreams")
def main() -> None:
    """tstreams-embedded: transactional, partitioned, exactly-once queues on LMDB.

    Commands that read or change streams take --data DIR (the embedded engine on a data
    directory) or --connect URL (a 'tstreams serve' server, tcp://host:port, or a cluster,
    zk://host:port/path)."""


@main.group()
def streams() -> None:
    """Create, list, describe and delete streams."""


@streams.command("create")
@creating_target_options
@click.argument("name")
@click.option("--partitions", default=1, show_default=True, type=int)
@click.option("--ttl", default=86400, show_default=True, type=int, help="seconds")
@click.option("--description", default="")
@click.option("--json", "as_json", is_flag=True, help="Print the stream as a JSON line.")
def streams_create(target: Target, name: str, partitions: int, ttl: int, description: str, as_json: bool) -> None:
    """Create stream NAME."""
    with target.open() as engine:
        info = engine.create_stream(name, partitions=partitions, ttl=ttl, description=description)
    out = Output(as_json)
    if as_json:
        out.json(info.__dict__)
    out.text(f"created stream {info.name} (id {info.id}): {info.partitions} partition(s), TTL {info.ttl} s")


@streams.command("list")
@target_options
@click.option("--prefix", default="", help="Only streams whose name starts with it.")
@click.option("--limit", default=None, type=click.IntRange(min=0))
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
def streams_list(target: Target, prefix: str, limit: int | None, as_json: bool) -> None:
    """List streams."""
    with target.open() as engine:
        found = engine.list_streams(prefix, limit)
    rows = [dict(s.__dict__, created_time=ms_time(s.created)) for s in found]
    Output(as_json).table([s.__dict__ for s in found] if as_json else rows, [
        ("name", "stream"), ("id", "id"), ("partitions", "partitions"), ("ttl", "ttl (s)"),
        ("created_time", "created"), ("description", "description"),
    ])


@streams.command("delete")
@target_options
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print what was deleted as a JSON line.")
def streams_delete(target: Target, name: str, as_json: bool) -> None:
    """Delete stream NAME and all its data."""
    with target.open() as engine:
        info = engine.get_stream(name)
        engine.delete_stream(name)
    out = Output(as_json)
    if as_json:
        out.json({"deleted": info.name, "id": info.id, "partitions": info.partitions})
    out.text(f"deleted stream {name}")


streams.add_command(streams_describe)


@main.command()
@target_options
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as one JSON line.")
def stats(target: Target, as_json: bool) -> None:
    """Print engine statistics (counters of the engine that answers)."""
    with target.open() as engine:
        counters = engine.stats()
    if as_json:
        Output(True).json(counters)
    else:
        Output(False).table([{"name": k, "value": v} for k, v in counters.items()], [("name", "counter"),
                                                                                     ("value", "value")])


@main.command()
@click.option("--data", required=True, type=click.Path(file_okay=False, exists=True), help="data directory")
@click.option("--json", "as_json", is_flag=True, help="print the report as one JSON line")
def check(data: str, as_json: bool) -> None:
    """Verify every stored value's checksum (data chunks, transaction records, offsets, markers,
    state stores, leases, the commit log) and the key structure of a data directory (stop its
    writers first). Exit status: 0 if no problem was found, 1 otherwise."""
    from .engine.operator.check import check_directory
    from .engine.storage.directory import LOCK_FILE, MARKER, is_data_directory

    if not (is_data_directory(data) or any(os.path.exists(os.path.join(data, f)) for f in (MARKER, LOCK_FILE))):
        raise errors.DataDirectoryNotFound(f"{data!r} is not a tstreams data directory (no data.mdb with data in it)")
    report = check_directory(data)
    out = Output(as_json)
    if as_json:
        out.json(report.to_dict())
    else:
        out.text(report.text().rstrip("\n"))
    if not report.ok:
        sys.exit(1)


def _attach(module: str, names: list[str]) -> None:
    """Attach click commands that live in optional parts of the package."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return
    for name in names:
        cmd = getattr(mod, name, None)
        if isinstance(cmd, click.Command):
            main.add_command(cmd)


main.add_command(consume)
main.add_command(produce)
main.add_command(consumers)
main.add_command(backup)
main.add_command(restore)
main.add_command(archive)
main.add_command(queues)
main.add_command(schedules)
main.add_command(quickstart)
_attach("tstreams_embedded.net.cli", ["serve", "keys"])
_attach("tstreams_embedded.demo.cli", ["demo"])
_attach("tstreams_embedded.console.cli", ["console"])
_attach("tstreams_embedded.cluster.cli", ["cluster", "serve"])  # serve with the cluster options, when kazoo is there


def run() -> None:
    try:
        main()
    except errors.TStreamsError as exc:
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    run()
