"""Command line: ``python -m benchmarks`` and ``tstreams bench`` (the click command :data:`bench`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from benchmarks.peers import RESULTS_DIR, run_peers
from benchmarks.report import fmt_ratio, write_peers
from benchmarks.scenarios import BY_ID
from benchmarks.systems import REGISTRY


@click.command("bench")
@click.option("--quick", is_flag=True, help="Smaller sizes: about 2 minutes instead of up to 15.")
@click.option("--reps", default=3, show_default=True, type=click.IntRange(1, 20), help="Interleaved repetitions.")
@click.option("--system", "systems", multiple=True, type=click.Choice(sorted(REGISTRY)),
              help="Only these systems (repeatable). Default: all that can run here.")  # fmt: skip
@click.option("--scenario", "scenarios", multiple=True, type=click.Choice(list(BY_ID)),
              help="Only these scenarios (repeatable). Default: all.")  # fmt: skip
@click.option("--out", "out_dir", default=str(RESULTS_DIR), show_default=True, type=click.Path(file_okay=False),
              help="Where peers.json, peers.md and the PNGs go.")  # fmt: skip
@click.option("--workdir", default=None, type=click.Path(file_okay=False),
              help="Scratch directory for data (default: system temp dir; must be on a real disk).")  # fmt: skip
@click.option("--engine", "with_engine", is_flag=True, help="Also run the engine figures (benchmarks.engine).")
@click.option("--no-plots", is_flag=True, help="Skip the PNG charts.")
@click.option("--render-only", is_flag=True, help="Only re-render peers.md and the PNGs from OUT/peers.json.")
def bench(quick: bool, reps: int, systems: tuple[str, ...], scenarios: tuple[str, ...], out_dir: str,
          workdir: str | None, with_engine: bool, no_plots: bool, render_only: bool) -> None:  # fmt: skip
    """Benchmark tstreams-embedded against Redis Streams, SQLite and raw LMDB, side by side.

    Starts every peer itself on 127.0.0.1, runs each scenario REPS times interleaving the
    systems, and writes medians, spread and ratios to peers.json / peers.md plus a chart
    per scenario.
    """
    if render_only:
        report = json.loads((Path(out_dir) / "peers.json").read_text())
        paths = write_peers(report, Path(out_dir), plots=not no_plots)
        click.echo("wrote " + ", ".join(str(p) for p in paths))
        return
    mode = "quick" if quick else "full"
    report = run_peers(mode=mode, reps=reps, systems=systems or None, scenarios=scenarios or None,
                       workdir=workdir, progress=True)  # fmt: skip
    paths = write_peers(report, Path(out_dir), plots=not no_plots)
    _print_summary(report)
    click.echo("wrote " + ", ".join(str(p) for p in paths))
    if with_engine:
        from benchmarks.engine import main as engine_main

        engine_main(["--quick"] if quick else [], standalone_mode=False)
    failed = [(s, n) for s, sc in report["scenarios"].items() for n, r in sc["results"].items() if not r["ok"]]
    if failed:
        click.echo(f"FAILED runs: {failed}", err=True)
        sys.exit(1)


def _print_summary(report: dict) -> None:
    from benchmarks.report import fmt_rate

    for sc in report["scenarios"].values():
        click.echo(f"\n{sc['title']}")
        for name, r in sc["results"].items():
            ratio = sc["ratios"].get("ours-embedded", {}).get(name)
            noisy = " NOISY" if r.get("noisy") else ""
            click.echo(
                f"  {name:16s} {fmt_rate(r.get('rate_median')):>8s} {sc['unit']:9s} spread {r['spread']:4.0%}{noisy}"
                + (f"  ours/it {fmt_ratio(ratio)}" if ratio is not None else "")
                + ("" if r["ok"] else "  FAILED")
            )
    click.echo("\nGoals:")
    for g in report["goals"]:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[g["met"]]
        click.echo(f"  [{verdict}] {g['scenario']}: {g['goal']} -> {fmt_ratio(g['ratio'])}")


def main(argv: list[str] | None = None) -> None:
    bench.main(args=argv, prog_name="python -m benchmarks")
