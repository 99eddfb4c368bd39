"""Two versions of the streams store cache side by side on issue 19's soak pipeline (item 21).

``python -m benchmarks.store_ab A_TREE B_TREE [--sizes 60000 480000] [--reps 3]`` runs, in a
fresh process per run with ``PYTHONPATH=TREE``, the soak's app (dedup by order id, TTL 30 s
-> group_by over 10k customers -> 10 s windowed count, suppressed; 2 partitions) over
``size`` orders written beforehand (untimed; 500 orders per second of event time), until
idle. Runs are interleaved (the order of the trees flips every repetition). Prints, per tree
and size, the median orders/s, the app's peak RSS, and the rate of the largest size over the
smallest: a cache whose work per record grows with what it has seen falls there.
Writes ``benchmarks/results/store-cache.{json,md}`` with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, random, resource, sys, time
import msgpack
import tstreams_embedded as ts
from tstreams_embedded.engine import ops as O
from tstreams_embedded.streams import App, StreamsBuilder, TimeWindows
from tstreams_embedded.streams.records import pack_envelope, partition_of

data, size = sys.argv[1], int(sys.argv[2])
b = StreamsBuilder()
(b.stream("orders", key_serde="str", value_serde="msgpack")
    .dedup(key=lambda k, v: v[0], ttl_ms=30_000, store="seen-orders")
    .group_by(lambda k, v: v[1], key_serde="str")
    .windowed_by(TimeWindows(size_ms=10_000, grace_ms=0))
    .count(store="per-customer").suppress_until_window_closes().to_stream().to("per-customer"))
rng = random.Random(19)
with ts.open(data, durability="async") as engine:
    engine.create_stream("orders", 2)
    for lo in range(0, size, 500):
        parts = {}
        for i in range(lo, min(lo + 500, size)):
            order = rng.randrange(max(1, i - 1000), i + 1) if rng.random() < 0.05 else i
            customer = f"c{rng.randrange(10_000)}"
            kb = customer.encode()
            parts.setdefault(partition_of(kb, 2), []).append(
                pack_envelope(kb, msgpack.packb([order, customer]), 1_000_000 + i * 2, None))
        engine.backend.submit([O.Instant("orders", p, O.pack_items(items)) for p, items in parts.items()])
    app = App(engine, application_id="ab", topology=b.build())
    started = time.perf_counter()
    app.run(until_idle=True)
    elapsed = time.perf_counter() - started
print(json.dumps({"rate": size / elapsed, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(tree: str, size: int, work: Path) -> dict[str, float]:
    data = tempfile.mkdtemp(dir=work)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    out = subprocess.run([sys.executable, "-c", CHILD, data, str(size)], env=env, cwd=work,
                         capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs=2, help="two source trees (baseline first)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[60_000, 480_000])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", action="store_true", help="write benchmarks/results/store-cache.{json,md}")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tstreams-store-ab-"))
    runs: dict[str, dict[int, list[dict[str, float]]]] = {t: {s: [] for s in a.sizes} for t in a.trees}
    for rep in range(a.reps):
        for size in a.sizes:
            for tree in (a.trees if rep % 2 == 0 else a.trees[::-1]):
                r = run(tree, size, work)
                runs[tree][size].append(r)
                print(f"rep {rep} {tree} {size}: {r['rate']:.0f} orders/s, peak RSS {r['peak_rss_mb']:.0f} MB",
                      flush=True)
    summary = {}
    for tree, by_size in runs.items():
        med = {s: statistics.median(r["rate"] for r in rs) for s, rs in by_size.items()}
        rss = {s: statistics.median(r["peak_rss_mb"] for r in rs) for s, rs in by_size.items()}
        spread = {s: (max(r["rate"] for r in rs) - min(r["rate"] for r in rs)) / med[s] for s, rs in by_size.items()}
        summary[tree] = {"rate": med, "peak_rss_mb": rss, "spread": spread,
                         "largest_over_smallest": med[max(a.sizes)] / med[min(a.sizes)]}
    print(json.dumps(summary, indent=1))
    if a.out:
        results = Path(__file__).parent / "results"
        (results / "store-cache.json").write_text(json.dumps({"trees": a.trees, "reps": a.reps, "summary": summary,
                                                              "runs": runs}, indent=1) + "\n")
        base, ours = a.trees
        rows = ["| orders | baseline orders/s | ours orders/s | ours ÷ baseline | baseline peak RSS MB "
                "| ours peak RSS MB | spread (baseline / ours) |", "|---|---|---|---|---|---|---|"]
        for s in a.sizes:
            b_, o_ = summary[base], summary[ours]
            rows.append(f"| {s:,} | {b_['rate'][s]:,.0f} | {o_['rate'][s]:,.0f} | {o_['rate'][s] / b_['rate'][s]:.2f}× "
                        f"| {b_['peak_rss_mb'][s]:.0f} | {o_['peak_rss_mb'][s]:.0f} "
                        f"| {b_['spread'][s]:.0%} / {o_['spread'][s]:.0%} |")
        (results / "store-cache.md").write_text(
            "# Streams store cache, A/B (issue 19, items 6 and 21)\n\n"
            f"`python -m benchmarks.store_ab {base} {ours} --out`: the soak pipeline (dedup by order id, TTL 30 s -> "
            "group_by over 10k customers -> 10 s windowed count, suppressed; 2 partitions, durability async) over "
            "N orders written beforehand, run until idle, a fresh process per run; medians of "
            f"{a.reps} interleaved repetitions. Baseline: `{base}`; ours: `{ours}`.\n\n" + "\n".join(rows) + "\n\n"
            f"Rate at {max(a.sizes):,} ÷ rate at {min(a.sizes):,} orders: baseline "
            f"{summary[base]['largest_over_smallest']:.2f}, ours {summary[ours]['largest_over_smallest']:.2f} "
            "(below 1: work per record grows with what the app has seen).\n")


if __name__ == "__main__":
    main()
