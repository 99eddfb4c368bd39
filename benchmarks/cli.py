"""Command line: ``python -m benchmarks`` (what ``make bench`` runs from the repository root)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from benchmarks.harness import RESULTS_DIR, run_suite
from benchmarks.report import summary_lines, write
from benchmarks.scenarios import SUITES
from benchmarks.systems import REGISTRY

ALL_SCENARIOS = sorted({sc.id for scenarios, _goals in SUITES.values() for sc in scenarios})


@click.command("bench")
@click.option("--suite", default="peers", show_default=True, type=click.Choice(list(SUITES)),
              help="peers: against Redis/SQLite/LMDB; engine: against raw py-lmdb; net: the network layer; "
                   "spark: the Spark connector; streams: stream processing against Bytewax/Pathway.")
@click.option("--quick", is_flag=True, help="Smaller sizes (peers: about 2 minutes instead of up to 15).")
@click.option("--reps", default=3, show_default=True, type=click.IntRange(1, 20), help="Interleaved repetitions.")
@click.option("--system", "systems", multiple=True, type=click.Choice(sorted(REGISTRY)),
              help="Only variants of these systems (repeatable). Default: all that can run here.")
@click.option("--scenario", "scenarios", multiple=True, type=click.Choice(ALL_SCENARIOS),
              help="Only these scenarios of the suite (repeatable). Default: all.")
@click.option("--out", "out_dir", default=str(RESULTS_DIR), show_default=True, type=click.Path(file_okay=False),
              help="Where SUITE.json, SUITE.md and the charts go.")
@click.option("--workdir", default=None, type=click.Path(file_okay=False),
              help="Scratch directory for data, created if missing (default: system temp dir; must be on a real disk).")
@click.option("--no-plots", is_flag=True, help="Skip the PNG charts.")
@click.option("--render-only", is_flag=True, help="Only re-render SUITE.md and the charts from OUT/SUITE.json.")
def bench(suite: str, quick: bool, reps: int, systems: tuple[str, ...], scenarios: tuple[str, ...], out_dir: str,
          workdir: str | None, no_plots: bool, render_only: bool) -> None:
    """Benchmark tstreams-embedded side by side with its baselines, in the same run.

    Runs each scenario of the suite REPS times interleaving the variants, and writes medians,
    spread, ratios and goal verdicts to SUITE.json / SUITE.md plus charts.
    """
    if render_only:
        report = json.loads((Path(out_dir) / f"{suite}.json").read_text())
        paths = write(report, Path(out_dir), charts=not no_plots)
        click.echo("wrote " + ", ".join(str(p) for p in paths))
        return
    if workdir is not None:
        try:
            os.makedirs(workdir, exist_ok=True)
        except OSError as exc:
            raise click.ClickException(f"cannot create --workdir {workdir!r}: {exc.strerror or exc}") from None
    report = run_suite(suite, mode="quick" if quick else "full", reps=reps, systems=systems or None,
                       scenarios=scenarios or None, workdir=workdir, progress=True)
    paths = write(report, Path(out_dir), charts=not no_plots)
    for line in summary_lines(report):
        click.echo(line)
    click.echo("wrote " + ", ".join(str(p) for p in paths))
    failed = [(s, n) for s, sc in report["scenarios"].items() for n, r in sc["results"].items() if not r["ok"]]
    if failed:
        click.echo(f"FAILED runs: {failed}", err=True)
        sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    bench.main(args=argv, prog_name="python -m benchmarks")
