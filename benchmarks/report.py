"""Writing a suite's report: ``<suite>.json``, ``<suite>.md`` and its charts.

The peers suite draws one PNG per scenario (``peers_<scenario>.png``); the engine and net
suites one grid of every scenario (``engine.png``, ``net.png``); the streams suite one row of
throughput, peak RSS, latency and recovery (``streams.png``); the Spark suite none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def fmt_rate(v: float | None) -> str:
    if v is None:
        return "—"
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    if v >= 1e4:
        return f"{v / 1e3:.0f}k"
    if v >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}"


def fmt_ratio(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def fmt_num(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def fmt_bytes(v: float | None) -> str:
    if v is None:
        return "—"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if v >= div:
            return f"{v / div:.1f} {unit}"
    return f"{v:.0f} B"


def write_json(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")


def machine_line(m: dict[str, Any]) -> str:
    pk = m.get("packages", {})
    sv = m.get("servers", {})
    load = m.get("loadavg_at_start", [None])[0]
    load_end = m.get("loadavg_at_end", [None])[0]
    return (
        f"{m.get('cores')} cores, {m.get('cpu_model')}, Python {m.get('python')}, "
        f"py-lmdb {pk.get('lmdb')} (LMDB {sv.get('lmdb (C library)')}), Redis {sv.get('redis-server')} "
        f"with redis-py {pk.get('redis')}, SQLite {sv.get('sqlite')}, libzmq {sv.get('libzmq')}; "
        f"load average {fmt_num(load)} at start, {fmt_num(load_end)} at end"
    )


# --- markdown -------------------------------------------------------------------------------
_INTRO = {
    "peers": "this project against Redis Streams, SQLite and raw py-lmdb (100-byte items, durable settings). "
             "Peak RSS is the benchmark process plus the peer's server process.",
    "engine": "the engine's own figures, each side by side with raw py-lmdb doing the same work.",
    "net": "the network layer: `tstreams serve` against an echo server on the same loop, a Moebius-style "
           "loop and HAProxy. Server CPU is per request, summed over the server processes.",
    "cluster": "the replicated cluster (real ZooKeeper, 3 node processes, quorum acks) against one node and "
               "Redis Streams with a replica, and failover after SIGKILL of the leader. Peak RSS is the benchmark "
               "process plus the servers (the nodes, or Redis primary + replica).",
    "spark": "the Spark connector against Spark's own Parquet and file sources (one local[2] session, "
             "one warm-up run of each variant).",
    "streams": "`tstreams_embedded.streams` against Bytewax, Pathway and a plain-Python floor on the same "
               "windowed-count job, each system in its own child process (peak RSS is that process's own, from "
               "`wait4`); every output is checked exact against a plain-Python reference.",
}


def command(report: dict[str, Any]) -> str:
    suite = "" if report["suite"] == "peers" else f" --suite {report['suite']}"
    return f"python -m benchmarks{suite}{' --quick' if report['mode'] == 'quick' else ''}"


def markdown(report: dict[str, Any]) -> str:
    """The suite's report as markdown: one table per scenario, then the goals."""
    systems = report["systems"]
    out = [
        f"`{command(report)}` ({report['mode']} run, {report['generated']}, {report['duration_s']:.0f} s): "
        f"{_INTRO.get(report['suite'], '')} Medians of {report['reps']} interleaved repetitions; spread = "
        f"(max − min) / median, **noisy** when above {report['noisy_threshold']:.0%}. Ratios are ours ÷ the "
        "row (higher is better for us).",
        "",
        f"Machine: {machine_line(report['machine'])}.",
        "",
    ]
    if report.get("skipped"):
        out += [f"Not run: {', '.join(f'`{k}` ({v})' for k, v in report['skipped'].items())}.", ""]
    for sc in report["scenarios"].values():
        out += _scenario_table(sc, systems)
    out += ["#### Goals", "", "| scenario | goal | measured | verdict |", "|---|---|---|---|"]
    for g in report["goals"]:
        verdict = {True: "met", False: "**missed**", None: "—"}[g["met"]]
        out.append(f"| {g['scenario']} | {g['goal']} | {fmt_goal(g)} | {verdict} |")
    out.append("")
    return "\n".join(out)


def _scenario_table(sc: dict[str, Any], systems: dict[str, Any]) -> list[str]:
    ours_names = list(sc["ratios"])
    out = [f"#### {sc['title']}", "", sc["description"] + _params_note(sc["params"]), ""]
    ratio_cols = [f"{_short(o)} ÷ it" for o in ours_names]
    if sc.get("per_item"):
        extra_cols = ["time s", "disk/item", "memory/item", "peak RSS MB"]
    else:
        extra_cols = ["p50 ms", "p99 ms", "peak RSS MB"]
    head = ["variant", sc["unit"], "spread", *ratio_cols, *extra_cols]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in sc["results"].items():
        label = systems[name]["label"]
        label = f"**{label}**" if systems[name]["ours"] else label
        ratios = [fmt_ratio(sc["ratios"][o].get(name)) if o != name else "" for o in ours_names]
        sp = "—" if r.get("rate_median") is None else f"{r['spread']:.0%}" + (" **noisy**" if r["noisy"] else "")
        if not r.get("ok"):
            sp += " (FAILED)"
        row = [label, fmt_rate(r.get("rate_median")), sp, *ratios]
        if sc.get("per_item"):
            row += [fmt_num(r.get("seconds"), 1), fmt_bytes(r.get("disk_bytes_per_item")),
                    fmt_bytes(r.get("mem_bytes_per_item")), fmt_num(r.get("peak_rss_mb"), 0)]
        else:
            rss = r.get("job_peak_rss_mb", r.get("peak_rss_mb"))
            row += [fmt_num(r.get("p50_ms"), 3), fmt_num(r.get("p99_ms"), 3), fmt_num(rss, 0)]
        out.append("| " + " | ".join(row) + " |")
    for name, r in sc["results"].items():
        if r.get("writes_per_commit"):
            out += ["", f"{systems[name]['label']}: {fmt_num(r['writes_per_commit'], 1)} writes per LMDB commit, "
                        f"{fmt_num(r.get('writes_per_fsync'), 1)} per fsync (group commit; medians)."]
    if sc.get("latency_of"):
        out += ["", f"Latency is per {sc['latency_of']}."]
    out += _details(sc, systems)
    for name, r in sc["results"].items():
        if r.get("failover_p50_s") is not None:
            out += ["", f"{systems[name]['label']}: kill → first acknowledged write p50 {r['failover_p50_s']:.2f} s, "
                    f"max {r['failover_max_s']:.2f} s (medians over repetitions), min {r['failover_min_s']:.2f} s; "
                    f"ZooKeeper session timeout {r['session_timeout_s']:g} s."]
    if sc.get("per_item"):
        out += ["", "Memory per item is the growth of RSS (benchmark process + server) during the run divided "
                "by N; disk per item is the space allocated on disk after close divided by N."]
        for name, r in sc["results"].items():
            if r.get("redis_used_memory_per_stream"):
                out.append(f"{systems[name]['label']} keeps every stream in RAM: Redis `used_memory` grew "
                           f"{fmt_bytes(r['redis_used_memory_per_stream'])} per stream.")
    out.append("")
    return out


_DETAILS = (
    # (extra figure, how it is shown)
    ("windows", "{:,.0f} windows checked exact"),
    ("late_dropped", "{:,.0f} late events dropped"),
    ("job_process_seconds", "{:.2f} s inside the job process (interpreter start excluded)"),
    ("job_cpu_seconds", "{:.2f} s CPU time of the job process (user + system, from wait4)"),
    ("cpu_seconds", "{:.2f} s CPU time of the timed run (user + system of its process)"),
    ("load_1m", "load average {:.1f} when the run ended"),
    ("start_seconds", "app started in {:.2f} s inside its process"),
    ("state_mb", "{:,.0f} MiB of state"),
    ("state_disk_mb", "{:,.0f} MiB on disk (input, state and output)"),
    ("recovery_s", "**first output {:.3f} s after the restart**"),
    ("restart_app_start_s", "of which {:.3f} s inside the restarted process (imports, engine open, start)"),
)


def _details(sc: dict[str, Any], systems: dict[str, Any]) -> list[str]:
    """One line per variant with the medians of the extra figures a suite reports (streams)."""
    lines = []
    for name, r in sc["results"].items():
        parts = [fmt.format(r[key]) for key, fmt in _DETAILS if r.get(key) is not None]
        if parts:
            lines.append(f"* {systems[name]['label']}: " + "; ".join(parts) + ".")
    return ["", *lines] if lines else []


def fmt_goal(g: dict[str, Any]) -> str:
    v = g["value"]
    if g["unit"] == "x":
        return fmt_ratio(v)
    if g["unit"] == "items/s":
        return f"{fmt_rate(v)} items/s"
    if g["unit"] == "B":
        return fmt_bytes(v)
    if g["unit"] == "MB" and v is not None:
        return f"{v:+.0f} MB"
    return f"{fmt_num(v, 1)} {g['unit']}"


def _params_note(p: dict[str, Any]) -> str:
    if "n_streams" in p:
        return f" N = {p['n_streams']:,} streams."
    if "threads" in p:
        return f" {p['threads']} threads × {p['per_thread']:,} transactions."
    if "n_items" in p:
        return f" {p['n_items']:,} items per run."
    if "rows" in p:
        return f" {p['rows']:,} rows, {p['events']:,} events."
    if "measure" in p:
        return f" {p['measure']} s measured after {p['warmup']} s of warm-up per run."
    return ""


def _short(name: str) -> str:
    return {"ours-embedded": "ours", "ours-zmq": "ours/zmq"}.get(name, name)


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The console summary: every variant's median and ratio, then the goal verdicts."""
    lines = []
    for sc in report["scenarios"].values():
        lines.append(f"\n{sc['title']}")
        first_ours = next(iter(sc["ratios"]), None)
        for name, r in sc["results"].items():
            ratio = sc["ratios"].get(first_ours, {}).get(name) if first_ours else None
            noisy = " NOISY" if r.get("noisy") else ""
            lines.append(
                f"  {name:40s} {fmt_rate(r.get('rate_median')):>8s} {sc['unit']:9s} spread {r['spread']:4.0%}{noisy}"
                + (f"  {_short(first_ours)}/it {fmt_ratio(ratio)}" if ratio is not None else "")
                + ("" if r["ok"] else "  FAILED")
            )
    lines.append("\nGoals:")
    for g in report["goals"]:
        verdict = {True: "met", False: "MISSED", None: "info"}[g["met"]]
        lines.append(f"  [{verdict}] {g['scenario']}: {g['goal']} -> {fmt_goal(g)}")
    return lines


# --- charts ---------------------------------------------------------------------------------
def wrap_label(text: str, width: int = 16) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def rate_formatter():  # noqa: ANN201
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: fmt_rate(v) if v else "0")


def _bars(ax, sc: dict[str, Any], systems: dict[str, Any], width: int) -> None:  # noqa: ANN001
    """One scenario's bars: median per variant, min–max whiskers, noisy hatched, ratios labelled."""
    names = list(sc["results"])
    res = sc["results"]
    vals = [res[n].get("rate_median") or 0 for n in names]
    lo = [v - (res[n].get("rate_min") or v) for n, v in zip(names, vals, strict=True)]
    hi = [(res[n].get("rate_max") or v) - v for n, v in zip(names, vals, strict=True)]
    colors = ["#1f77b4" if systems[n]["ours"] else "#b0b0b0" for n in names]
    bars = ax.bar(range(len(names)), vals, color=colors, yerr=[lo, hi], capsize=4, edgecolor="black")
    first_ours = next(iter(sc["ratios"]), None)
    for bar, n, h in zip(bars, names, hi, strict=True):
        r = res[n]
        if r.get("noisy"):
            bar.set_hatch("//")
        lines = [fmt_rate(r.get("rate_median"))]
        ratio = sc["ratios"].get(first_ours, {}).get(n) if first_ours else None
        if ratio is not None:
            lines.append(f"{_short(first_ours)} {ratio:.2f}×")
        if r.get("noisy"):
            lines.append("noisy")
        ax.annotate("\n".join(lines), (bar.get_x() + bar.get_width() / 2, bar.get_height() + h), xytext=(0, 3),
                    textcoords="offset points", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([wrap_label(systems[n]["label"], width) for n in names], fontsize=7)
    ax.set_ylabel(sc["unit"])
    ax.yaxis.set_major_formatter(rate_formatter())
    ax.set_ylim(0, max(vals + [1]) * 1.3 + max(hi + [0]))
    ax.grid(axis="y", alpha=0.3)


def plots(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """The suite's charts (see the module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suite, systems = report["suite"], report["systems"]
    title = f"({report['mode']}, median of {report['reps']})"
    paths = []
    if suite == "peers":
        for sc_id, sc in report["scenarios"].items():
            fig, ax = plt.subplots(figsize=(8.5, 4.6), dpi=110)
            _bars(ax, sc, systems, 16)
            ax.set_title(f"{sc['title']} {title}", fontsize=10)
            fig.tight_layout()
            paths.append(out_dir / f"peers_{sc_id}.png")
            fig.savefig(paths[-1])
            plt.close(fig)
    elif suite == "streams":
        paths.append(_streams_plot(report, out_dir, title))
    elif suite in ("engine", "net"):
        scs = list(report["scenarios"].values())
        cols = 3
        rows = (len(scs) + cols - 1) // cols
        fig, grid = plt.subplots(rows, cols, figsize=(5.0 * cols, 4.6 * rows), dpi=100, squeeze=False)
        axes = [ax for row in grid for ax in row]
        for ax in axes[len(scs):]:
            ax.axis("off")
        for ax, sc in zip(axes, scs, strict=False):
            _bars(ax, sc, systems, 18)
            ax.set_title(wrap_label(sc["title"], 48), fontsize=9)
        fig.suptitle(f"{suite} {title}", fontsize=10)
        fig.tight_layout()
        paths.append(out_dir / f"{suite}.png")
        fig.savefig(paths[-1])
        plt.close(fig)
    return paths


def _streams_plot(report: dict[str, Any], out_dir: Path, title: str) -> Path:
    """``streams.png``: throughput (with ratios), peak RSS, latency and recovery against their goals."""
    import matplotlib.pyplot as plt

    systems = report["systems"]
    scs = report["scenarios"]
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.8), dpi=100, gridspec_kw={"width_ratios": [3, 3, 2, 1.2]})
    for ax in axes:
        ax.axis("off")

    def short(name: str) -> str:
        label = systems[name]["label"].replace("exactly_once_behavior", "exactly-once")
        return "ours" if systems[name]["ours"] else wrap_label(label, 12)

    count = scs.get("windowed_count")
    if count and count["results"]:
        names = list(count["results"])
        res = count["results"]
        ours = next(iter(count["ratios"]), None)
        colors = ["#1f77b4" if systems[n]["ours"] else "#b0b0b0" for n in names]
        ax = axes[0]
        ax.axis("on")
        vals = [res[n].get("rate_median") or 0 for n in names]
        bars = ax.bar(range(len(names)), vals, color=colors, edgecolor="black")
        for bar, n, v in zip(bars, names, vals, strict=True):
            ratio = count["ratios"].get(ours, {}).get(n) if ours else None
            text = fmt_rate(v) + (f"\nours {ratio:.2f}×" if ratio else "") + ("\nnoisy" if res[n].get("noisy") else "")
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, v), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([short(n) for n in names], fontsize=6.5)
        ax.set_ylim(0, max(vals + [1]) * 1.35)
        ax.yaxis.set_major_formatter(rate_formatter())
        ax.set_ylabel("events/s")
        ax.set_title(wrap_label(count["title"], 50), fontsize=9)
        ax = axes[1]
        ax.axis("on")
        rss = [res[n].get("job_peak_rss_mb") or 0 for n in names]
        bars = ax.bar(range(len(names)), rss, color=colors, edgecolor="black")
        for bar, v in zip(bars, rss, strict=True):
            ax.annotate(f"{v:.0f}", (bar.get_x() + bar.get_width() / 2, v), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([short(n) for n in names], fontsize=6.5)
        ax.set_yscale("log")
        from matplotlib.ticker import ScalarFormatter

        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.tick_params(axis="y", which="minor", labelsize=6)
        ax.set_ylabel("peak RSS of the job process, MB (log)")
        ax.set_title("Peak RSS, same job", fontsize=9)
    for ax, sc_id, metrics, goal, unit in ((axes[2], "latency", ("p50_ms", "p99_ms"), 5.0, "ms"),
                                            (axes[3], "recovery", ("seconds",), 1.0, "s")):
        sc = scs.get(sc_id)
        if not sc or not sc["results"]:
            continue
        labels, vals = [], []
        for name, r in sc["results"].items():
            where = systems[name]["label"].replace("ours, producer in ", "").replace("the app's process", "same proc.")
            where = where.replace("another process", "other proc.")
            for m in metrics:
                labels.append(m.replace("_ms", "").replace("seconds", "first output")
                              + ("" if len(sc["results"]) == 1 else f"\n{where}"))
                vals.append(r.get(m) or 0)
        ax.axis("on")
        ax.bar(range(len(vals)), vals, color="#1f77b4", edgecolor="black")
        for i, v in enumerate(vals):
            ax.annotate(f"{v:.3g}", (i, v), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=7)
        ax.axhline(goal, color="red", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(vals)))
        ax.set_xticklabels(labels, fontsize=6.5)
        ax.set_ylabel(unit)
        ax.set_ylim(0, max(vals + [goal]) * 1.3)
        size = f", {sc['params']['state_mb']:,} MiB state" if "state_mb" in sc["params"] else ""
        ax.set_title(wrap_label(sc["title"], 24) + f"\n(goal {goal:g} {unit}, dashed{size})", fontsize=8)
    fig.suptitle(f"streams {title}", fontsize=10)
    fig.tight_layout()
    path = out_dir / "streams.png"
    fig.savefig(path)
    plt.close(fig)
    return path


#: ``<suite>-notes.md`` here is appended to every rendering of ``<suite>.md``
NOTES_DIR = Path(__file__).resolve().parent / "results"


def write(report: dict[str, Any], out_dir: Path, charts: bool = True) -> list[Path]:
    """Write ``<suite>.json``, ``<suite>.md`` and (optionally) the charts; return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    suite = report["suite"]
    paths = [out_dir / f"{suite}.json", out_dir / f"{suite}.md"]
    write_json(report, paths[0])
    text = markdown(report)
    notes = NOTES_DIR / f"{suite}-notes.md"  # hand-written analysis kept across reruns (profiles)
    if notes.exists():
        text += "\n" + notes.read_text()
    paths[1].write_text(text)
    if charts:
        paths += plots(report, out_dir)
    return paths
