"""The ``tstreams`` command line: stream administration, the examples and the server."""

from __future__ import annotations

import importlib
import json
import sys

import click

import tstreams_embedded as ts

from . import errors
from .quickstart import quickstart


@click.group()
@click.version_option(ts.__version__, prog_name="tstreams")
def main() -> None:
    """tstreams-embedded: transactional, partitioned, exactly-once queues on LMDB."""


def _open(data: str) -> ts.Engine:
    return ts.open(data, compaction_interval=None)


@main.group()
def streams() -> None:
    """Create, list, inspect and delete streams in a data directory."""


@streams.command("create")
@click.option("--data", required=True, type=click.Path(file_okay=False), help="data directory")
@click.argument("name")
@click.option("--partitions", default=1, show_default=True, type=int)
@click.option("--ttl", default=86400, show_default=True, type=int, help="seconds")
@click.option("--description", default="")
def streams_create(data: str, name: str, partitions: int, ttl: int, description: str) -> None:
    """Create stream NAME."""
    with _open(data) as engine:
        info = engine.create_stream(name, partitions=partitions, ttl=ttl, description=description)
    click.echo(json.dumps(info.__dict__))


@streams.command("list")
@click.option("--data", required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--prefix", default="")
@click.option("--limit", default=None, type=int)
def streams_list(data: str, prefix: str, limit: int | None) -> None:
    """List streams (JSON lines)."""
    with _open(data) as engine:
        for info in engine.list_streams(prefix, limit):
            click.echo(json.dumps(info.__dict__))


@streams.command("delete")
@click.option("--data", required=True, type=click.Path(file_okay=False, exists=True))
@click.argument("name")
def streams_delete(data: str, name: str) -> None:
    """Delete stream NAME and all its data."""
    with _open(data) as engine:
        engine.delete_stream(name)


@main.command()
@click.option("--data", required=True, type=click.Path(file_okay=False, exists=True))
def stats(data: str) -> None:
    """Print engine statistics as JSON."""
    with _open(data) as engine:
        click.echo(json.dumps(engine.stats(), indent=2))


@main.command()
@click.option("--data", required=True, type=click.Path(file_okay=False, exists=True), help="data directory")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
def check(data: str, as_json: bool) -> None:
    """Verify every data chunk's checksum and the key structure of a data directory (stop its
    writers first). Exit status: 0 if no problem was found, 1 otherwise."""
    from .engine.check import check_directory

    report = check_directory(data)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.text())
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


main.add_command(quickstart)
_attach("tstreams_embedded.net.cli", ["serve", "keys"])
_attach("tstreams_embedded.demo.cli", ["demo"])
_attach("tstreams_embedded.cluster.cli", ["cluster", "serve"])  # serve with the cluster options, when kazoo is there


def run() -> None:
    try:
        main()
    except errors.TStreamsError as exc:
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    run()
