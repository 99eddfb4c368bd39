"""``tstreams backup``, ``tstreams restore`` and ``tstreams archive``: online backups, continuous
archiving of the commit log, and point-in-time restore (:mod:`tstreams_embedded.engine.operator.backup`)."""

from __future__ import annotations

import signal
import threading
from datetime import datetime, timezone

import click

from .. import errors
from ..engine.operator import backup as B
from ..tools.output import Output, ms_time
from .target import Target, target_options


def _until(value: str | None) -> int | None:
    """``--until``: an ISO-8601 time (UTC unless it says otherwise) or epoch milliseconds."""
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise errors.InvalidArgument(f"--until takes an ISO-8601 time or epoch milliseconds, got {value!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


@click.command("backup")
@target_options
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as one JSON line.")
def backup(target: Target, out: str, as_json: bool) -> None:
    """Write a consistent, compacted, checksummed copy of a data directory (--data; its
    writers may keep running) or of a server's or cluster's data (--connect: the copy is
    made on the server, or on the cluster's leader, and streamed here) into OUT (a new or
    empty directory). OUT holds data.mdb and backup.json (checksum, size, the newest
    commit-log entry it contains)."""
    if target.data is not None:
        manifest = B.backup(target.data, out)
    else:
        with target.open() as engine:
            manifest = B.backup_from(engine.backend, out, str(target.connect))
    o = Output(as_json)
    if as_json:
        o.json(manifest.to_json())
    else:
        at = "-" if manifest.log_time_ms is None else ms_time(manifest.log_time_ms)
        o.text(f"backup of {manifest.source} in {out}: {manifest.bytes} bytes, up to log entry {manifest.log_seq} "
               f"({at}), crc32c {manifest.crc32c:08x}")


@click.command("restore")
@click.argument("backup_dir", metavar="BACKUP", type=click.Path(file_okay=False, exists=True))
@click.option("--data", required=True, type=click.Path(file_okay=False),
              help="The new data directory to restore into (new or empty).")
@click.option("--archive", type=click.Path(file_okay=False, exists=True), default=None,
              help="Replay the commit-log segments archived by `tstreams archive` after the backup.")
@click.option("--until", "until", default=None, metavar="TIME",
              help="Replay only entries written at or before TIME (ISO-8601, UTC by default, or epoch ms).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON line.")
def restore(backup_dir: str, data: str, archive: str | None, until: str | None, as_json: bool) -> None:
    """Restore BACKUP into a new data directory, verifying its checksum; with --archive, replay
    the archived log after it (up to --until): point-in-time restore. Verify the result with
    `tstreams check --data DIR`."""
    report = B.restore(backup_dir, data, archive=archive, until_ms=_until(until))
    o = Output(as_json)
    if as_json:
        o.json({"target": report.target, "base_seq": report.base_seq, "replayed": report.replayed,
                "last_seq": report.last_seq, "last_time_ms": report.last_time_ms})
    else:
        at = "-" if report.last_time_ms is None else ms_time(report.last_time_ms)
        o.text(f"restored into {report.target}: backup up to log entry {report.base_seq}, {report.replayed} "
               f"archived entries replayed, now at entry {report.last_seq} ({at})")


@click.command("archive")
@click.option("--data", required=True, type=click.Path(file_okay=False, exists=True),
              help="The data directory whose commit log to archive (its application may keep running).")
@click.option("--to", "to", required=True, type=click.Path(file_okay=False), help="The archive directory.")
@click.option("--once", is_flag=True, help="Archive what is there now and exit (default: run until SIGTERM/SIGINT).")
def archive(data: str, to: str, once: bool) -> None:
    """Ship the commit log of a data directory into an archive directory as it is written, in
    sealed segments (continuous archiving). A log entry trimmed before it was archived
    (log_retention) stops it with ArchiveGap: keep the archiver running, or take a new base
    backup."""
    with B.Archiver(data, to) as archiver:
        if once:
            n = archiver.step()
            click.echo(f"archived {n} entries into {to}")
            return
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        archiver.run(stop)
