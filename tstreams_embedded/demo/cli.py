"""Command line of the demo: ``python -m tstreams_embedded.demo`` and ``tstreams demo``."""

from __future__ import annotations

import sys

import click

from ..tools.params import MAX_TIMEOUT, FiniteFloat, seconds
from .pipeline import Config, Result, run

REMOTE_HELP = """\
To run the same pipeline against a remote engine (how Spark executors on other hosts reach
the data), start a server on the data host and point the demo at it:
    tstreams serve --data /srv/tstreams --bind tcp://0.0.0.0:7000
    python -m tstreams_embedded.demo --endpoint tcp://DATA-HOST:7000
"""


@click.command("demo", epilog=REMOTE_HELP.replace("\n    ", "\n\n    "))
@click.option("--events", default=200_000, show_default=True, type=click.IntRange(1000, 10_000_000),
              help="Page-view events to produce.")
@click.option("--endpoint", default=None, help="tcp://host:port of a `tstreams serve` (default: embedded).")
@click.option("--data", default=None, type=click.Path(file_okay=False),
              help="Embedded engine directory (default: a fresh temporary one).")
@click.option("--workdir", default=None, type=click.Path(file_okay=False),
              help="Where the Spark checkpoint and job log go (default: a temporary directory, removed).")
@click.option("--produce-seconds", default=30.0, show_default=True, type=seconds(0, MAX_TIMEOUT),
              metavar="SECONDS",
              help="Spread production over this many seconds (0: write everything first).")
@click.option("--kill/--no-kill", default=True, show_default=True, help="SIGKILL the Spark job halfway.")
@click.option("--kill-at", default=0.5, show_default=True, type=FiniteFloat(0.05, 0.95),
              help="Kill when this fraction of the windows has been emitted.")
@click.option("--max-rows", default=25_000, show_default=True, type=click.IntRange(1), help="maxRowsPerTrigger.")
@click.option("--seed", default=7, show_default=True, type=int)
@click.option("--keep", is_flag=True, help="Keep the temporary directory (data, checkpoint, log).")
@click.option("--no-progress", is_flag=True, help="Plain log lines instead of progress bars.")
def demo(events: int, endpoint: str | None, data: str | None, workdir: str | None, produce_seconds: float,
         kill: bool, kill_at: float, max_rows: int, seed: int, keep: bool, no_progress: bool) -> None:
    """Spark Structured Streaming on T-streams, killed halfway, proven exactly-once."""
    if endpoint and data:
        raise click.UsageError("give --endpoint or --data, not both")
    cfg = Config(events=events, endpoint=endpoint, data=data, workdir=workdir, produce_seconds=produce_seconds,
                 kill=kill, kill_at=kill_at, max_rows=max_rows, seed=seed, keep=keep,
                 progress=not no_progress and sys.stderr.isatty())
    click.echo(click.style("tstreams-embedded demo: page views -> Spark windowed counts -> exactly-once sink",
                           bold=True))
    click.echo(f"{events:,} events over one hour of event time, 4 partitions; 5-minute windows, 2-minute "
               "watermark, append mode; the job is " + ("SIGKILLed halfway and restarted." if kill else "not killed."))
    res = run(cfg, say=click.echo)
    _report(res, cfg)
    click.echo("")
    click.echo(REMOTE_HELP.rstrip())
    sys.exit(0 if res.ok else 1)


def _report(res: Result, cfg: Config) -> None:
    click.echo("")
    click.echo(f"{'window (UTC)':<26}{'views':>8}{'pages':>7}  top page")
    for w, views, pages, top, n in res.table:
        click.echo(f"{w:<26}{views:>8,}{pages:>7}  {top} ({n:,})")
    click.echo("")
    if res.kill:
        k = res.kill
        replay = ""
        if k.get("spark_last_planned") is not None and k.get("spark_last_planned") != k.get("spark_last_committed"):
            b = k["spark_last_planned"]
            if k.get("engine_marker") == b:
                why = "the engine had already committed it, so the sink's marker skipped the replay."
            else:
                why = "the engine had not committed it, so it was written once, by the replay."
            replay = f" Spark replayed batch {b} after the restart; {why}"
        click.echo(f"killed: SIGKILL to process groups {k['groups']} after {k['at_windows']} windows.{replay}")
    click.echo(f"exactly-once check against counts computed directly from the {res.events:,} input events:")
    click.echo(f"  (window, page) counts expected {res.expected_windows}, received {res.output_rows}")
    click.echo(f"  missing {res.missing}, duplicated {res.duplicated}, wrong counts {res.wrong_counts}, "
               f"unexpected {res.unexpected}; views in {res.views_in:,} / out {res.views_out:,}")
    secs = res.seconds
    if "job_start_to_all_windows" in secs:
        click.echo(f"  Spark job start -> last window: {secs['job_start_to_all_windows']:.1f} s "
                   f"(total {secs.get('total', 0):.1f} s)")
    click.echo(click.style("  PASS: exactly once" if res.ok else "  FAIL", fg="green" if res.ok else "red", bold=True))
    click.echo("  note: append mode emits a window once, when the watermark passes its end. The producer ends "
               "with one flush event\n  an hour past the data so the last windows close; its own window never "
               "closes, so it is never emitted.")
