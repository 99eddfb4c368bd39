"""Writing results: JSON, a markdown table for the README, and one PNG bar chart per scenario."""

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


# --- peers ----------------------------------------------------------------------------------
def peers_markdown(report: dict[str, Any]) -> str:
    systems = report["systems"]
    ours_names = [n for n, s in systems.items() if s["ours"]]
    out = [
        f"Peer scoreboard: `python -m benchmarks{' --quick' if report['mode'] == 'quick' else ''}` "
        f"({report['mode']} run, {report['generated']}, {report['duration_s']:.0f} s). "
        f"Medians of {report['reps']} interleaved repetitions; spread = (max − min) / median, "
        f"**noisy** when above {report['noisy_threshold']:.0%}. Ratios are ours ÷ peer (higher is better "
        "for us). 100-byte items, durable settings. Peak RSS is the benchmark process plus the "
        "peer's server process.",
        "",
        f"Machine: {machine_line(report['machine'])}.",
        "",
    ]
    if report.get("skipped"):
        out += [f"Not run: {', '.join(f'`{k}` ({v})' for k, v in report['skipped'].items())}.", ""]
    for sc_id, sc in report["scenarios"].items():
        out += [f"#### {sc['title']}", "", sc["description"] + _params_note(sc), ""]
        ratio_cols = [f"{_short(o)} ÷ it" for o in ours_names]
        if sc_id == "many_streams":
            head = ["system", "streams/s", "spread", *ratio_cols, "time s", "disk/stream", "memory/stream",
                    "peak RSS MB"]  # fmt: skip
        else:
            head = ["system", sc["unit"], "spread", *ratio_cols, "p50 ms", "p99 ms", "peak RSS MB"]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name, r in sc["results"].items():
            label = systems[name]["label"]
            label = f"**{label}**" if systems[name]["ours"] else label
            ratios = [fmt_ratio(sc["ratios"].get(o, {}).get(name)) if o != name else "" for o in ours_names]
            sp = "—" if r.get("rate_median") is None else f"{r['spread']:.0%}" + (" **noisy**" if r["noisy"] else "")
            if not r.get("ok"):
                sp += " (FAILED)"
            row = [label, fmt_rate(r.get("rate_median")), sp, *ratios]
            if sc_id == "many_streams":
                row += [fmt_num(r.get("seconds"), 1), fmt_bytes(r.get("disk_bytes_per_stream")),
                        fmt_bytes(r.get("mem_bytes_per_stream")), fmt_num(r.get("peak_rss_mb"), 0)]  # fmt: skip
            else:
                row += [fmt_num(r.get("p50_ms"), 3), fmt_num(r.get("p99_ms"), 3), fmt_num(r.get("peak_rss_mb"), 0)]
            out.append("| " + " | ".join(row) + " |")
        if sc.get("latency_of"):
            out += ["", f"Latency is per {sc['latency_of']}."]
        if sc_id == "many_streams":
            out += ["", "Memory per stream is the growth of RSS (benchmark process + server) during the run "
                    "divided by N; disk per stream is the space allocated on disk after close divided by N."]
            for name, r in sc["results"].items():
                if r.get("redis_used_memory_per_stream"):
                    out.append(f"{systems[name]['label']} keeps every stream in RAM: Redis `used_memory` grew "
                               f"{fmt_bytes(r['redis_used_memory_per_stream'])} per stream.")
        out.append("")
    out += ["#### Goals (issue 5)", "", "| scenario | goal | measured | verdict |", "|---|---|---|---|"]
    for g in report["goals"]:
        verdict = {True: "met", False: "**missed**", None: "not measured"}[g["met"]]
        out.append(f"| {g['scenario']} | {g['goal']} | {fmt_ratio(g['ratio'])} | {verdict} |")
    out.append("")
    return "\n".join(out)


def _params_note(sc: dict[str, Any]) -> str:
    p = sc["params"]
    if "n_streams" in p:
        return f" N = {p['n_streams']:,} streams."
    if "threads" in p:
        return f" {p['threads']} threads × {p['per_thread']:,} transactions."
    return f" {p['n_items']:,} items per run."


def _short(name: str) -> str:
    return {"ours-embedded": "ours", "ours-zmq": "ours/zmq"}.get(name, name)


def wrap_label(text: str, width: int = 16) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def rate_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: fmt_rate(v) if v else "0")


def peers_plots(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """One bar chart per scenario: median rate per system, min–max whiskers, ratios labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    systems = report["systems"]
    for sc_id, sc in report["scenarios"].items():
        names = list(sc["results"])
        vals = [sc["results"][n].get("rate_median") or 0 for n in names]
        lo = [v - (sc["results"][n].get("rate_min") or v) for n, v in zip(names, vals, strict=True)]
        hi = [(sc["results"][n].get("rate_max") or v) - v for n, v in zip(names, vals, strict=True)]
        colors = ["#1f77b4" if systems[n]["ours"] else "#b0b0b0" for n in names]
        fig, ax = plt.subplots(figsize=(8.5, 4.6), dpi=110)
        bars = ax.bar(range(len(names)), vals, color=colors, yerr=[lo, hi], capsize=4, edgecolor="black")
        for bar, n in zip(bars, names, strict=True):
            r = sc["results"][n]
            if r.get("noisy"):
                bar.set_hatch("//")
            lines = [fmt_rate(r.get("rate_median"))]
            ratio = sc["ratios"].get("ours-embedded", {}).get(n)
            if ratio is not None:
                lines.append(f"ours {ratio:.2f}×")
            if r.get("noisy"):
                lines.append("noisy")
            top = bar.get_height() + hi[names.index(n)]
            ax.annotate("\n".join(lines), (bar.get_x() + bar.get_width() / 2, top),
                        xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=8)  # fmt: skip
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([wrap_label(systems[n]["label"]) for n in names], fontsize=7)
        ax.set_ylabel(sc["unit"])
        ax.yaxis.set_major_formatter(rate_formatter())
        ax.set_title(f"{sc['title']} ({report['mode']}, median of {report['reps']})", fontsize=10)
        ax.set_ylim(0, max(vals + [1]) * 1.3 + max(hi + [0]))
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = out_dir / f"peers_{sc_id}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def write_peers(report: dict[str, Any], out_dir: Path, plots: bool = True) -> list[Path]:
    """Write ``peers.json``, ``peers.md`` and (optionally) the PNGs; return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "peers.json", out_dir / "peers.md"]
    write_json(report, paths[0])
    paths[1].write_text(peers_markdown(report))
    if plots:
        paths += peers_plots(report, out_dir)
    return paths
