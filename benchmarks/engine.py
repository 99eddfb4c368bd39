"""Engine figures (issue 2), each side by side with raw py-lmdb doing the same work.

    python -m benchmarks.engine [--quick] [--reps 3] [--out benchmarks/results]

Figures (100-byte items; every run in a fresh directory; systems interleaved per repetition):

1. durable produce in 100-item transactions: ``producer.instant(items)`` and the
   ``new_transaction / send / checkpoint`` path vs raw ``putmulti`` with a durable commit
   per 100 items (goal: ours >= 0.8x raw);
2. async produce, same items: ``durability="async"`` vs raw no-sync ``putmulti`` (goals:
   >= 1M items/s and >= 0.5x raw);
3. consume with an offset checkpoint every 100 transactions vs a raw cursor scan with a
   durable offset write every 10,000 items (goals: >= 3M items/s and >= 0.5x raw);
4. group commit: 8 threads of durable 1-item instant transactions vs the single-thread
   unbatched durable commit rate of raw LMDB (goal: >= 5x); ours single-threaded is shown too;
5. streams: N streams with one instant transaction each (N = 1,000,000 in the full run),
   time and disk bytes per stream (goals: <= 60 s and < 1 KiB per stream at 1M).

Writes ``engine.json``, ``engine.md`` and ``engine.png``; prints the same figures.
"""

from __future__ import annotations

import gc
import itertools
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from benchmarks.measure import NOISY_SPREAD, disk_bytes, machine_info, median, spread
from benchmarks.report import fmt_bytes, fmt_num, fmt_rate, fmt_ratio, machine_line, write_json
from benchmarks.systems.base import items_range, make_item, run_threads

RESULTS_DIR = Path(__file__).resolve().parent / "results"
KEY = struct.Struct(">IIQ")
BATCH = 100

SIZES: dict[str, dict[str, int]] = {
    "tiny": {"durable": 1_000, "async": 5_000, "consume": 10_000, "single": 100, "per_thread": 20, "streams": 2_000,
             "api_streams": 500},
    "quick": {"durable": 30_000, "async": 500_000, "consume": 1_000_000, "single": 1_000, "per_thread": 300,
              "streams": 100_000, "api_streams": 20_000},
    "full": {"durable": 300_000, "async": 2_000_000, "consume": 3_000_000, "single": 3_000, "per_thread": 2_000,
             "streams": 1_000_000, "api_streams": 100_000},
}  # fmt: skip


# --- raw py-lmdb ----------------------------------------------------------------------------
def _raw_env(path: Path, sync: bool):
    import lmdb

    env = lmdb.open(str(path), map_size=16 << 30, max_dbs=4, sync=sync, metasync=sync, readahead=False)
    return env, env.open_db(b"items"), env.open_db(b"offsets"), env.open_db(b"streams")


def _raw_append(txn, db, pairs: list) -> None:
    consumed, added = txn.cursor(db=db).putmulti(pairs, append=True)
    if (consumed, added) != (len(pairs), len(pairs)):
        raise RuntimeError(f"putmulti stored {added} of {len(pairs)} (consumed {consumed})")


def _raw_count(env, db) -> int:
    with env.begin() as txn:
        return txn.stat(db)["entries"]


def raw_produce(path: Path, n_items: int, sync: bool) -> dict:
    """Raw ``putmulti(append=True)`` of 100 items per write transaction."""
    env, items, _, _ = _raw_env(path, sync)
    batch, pack, seq = items_range(0, BATCH), KEY.pack, 0
    t0 = time.perf_counter()
    for _ in range(n_items // BATCH):
        with env.begin(write=True) as txn:
            _raw_append(txn, items, [(pack(1, 0, seq + j), v) for j, v in enumerate(batch)])
        seq += BATCH
    seconds = time.perf_counter() - t0
    stored = _raw_count(env, items)
    env.close()
    return {"items": n_items, "seconds": seconds, "stored": stored}


def raw_single_commits(path: Path, n: int) -> dict:
    """One 1-item durable write transaction at a time (the unbatched durable commit rate)."""
    env, items, _, _ = _raw_env(path, True)
    item, pack = make_item(0), KEY.pack
    t0 = time.perf_counter()
    for i in range(n):
        with env.begin(write=True, db=items) as txn:
            txn.put(pack(1, 0, i), item, append=True)
    seconds = time.perf_counter() - t0
    stored = _raw_count(env, items)
    env.close()
    return {"items": n, "seconds": seconds, "stored": stored}


def raw_consume_prepare(path: Path, n_items: int) -> None:
    env, items, _, _ = _raw_env(path, False)
    for start in range(0, n_items, 10_000):
        with env.begin(write=True) as txn:
            pairs = [(KEY.pack(1, 0, i), make_item(i)) for i in range(start, min(n_items, start + 10_000))]
            _raw_append(txn, items, pairs)
    env.sync(True)
    env.close()


def raw_consume(path: Path, n_items: int) -> dict:
    """Cursor scan of every item; a durable offset write after each 100 x 100 items."""
    env, items, offsets, _ = _raw_env(path, True)
    chunk = 100 * BATCH
    nxt, n, last = KEY.pack(1, 0, 0), 0, None
    t0 = time.perf_counter()
    while True:
        with env.begin(db=items) as txn:
            cur = txn.cursor()
            got = 0
            if cur.set_range(nxt):
                for k, v in itertools.islice(cur.iternext(), chunk):
                    v  # noqa: B018 - "process" the item
                    last = k
                    got += 1
        if not got:
            break
        n += got
        nxt = KEY.pack(1, 0, KEY.unpack(last)[2] + 1)
        with env.begin(write=True, db=offsets) as w:
            w.put(b"c", last)
    seconds = time.perf_counter() - t0
    env.close()
    return {"items": n, "seconds": seconds, "stored": n}


def raw_streams(path: Path, n_streams: int, batch: int = 1000) -> dict:
    """A metadata key and one item key per stream, ``batch`` streams per durable commit."""
    env, items, _, streams = _raw_env(path, True)
    item, pack = make_item(0), KEY.pack
    t0 = time.perf_counter()
    for start in range(0, n_streams, batch):
        ids = range(start, min(n_streams, start + batch))
        with env.begin(write=True) as txn:
            meta = txn.cursor(db=streams)
            for i in ids:
                meta.put(b"s%d" % i, pack(i, 1, 0))
            _raw_append(txn, items, [(pack(i, 0, 0), item) for i in ids])
    seconds = time.perf_counter() - t0
    stored = _raw_count(env, streams)
    env.close()
    return {"items": n_streams, "seconds": seconds, "stored": stored, "disk_bytes": disk_bytes(path)}


# --- ours -----------------------------------------------------------------------------------
def _ts():
    import tstreams_embedded as ts

    return ts


def _count(engine, stream: str, partition: int = 0) -> int:
    after, n = 0, 0
    while True:
        f = engine.backend.fetch(stream, partition, after, 1024)
        n += sum(len(t.items) for t in f.txns)
        if f.position <= after:
            return n
        after = f.position


def ours_instant(path: Path, n_items: int, durability: str) -> dict:
    """``producer.instant(100 items)`` per transaction."""
    with _ts().open(str(path), durability=durability) as engine:
        engine.create_stream("s", partitions=1)
        producer = engine.producer("s", partition=0)
        batch = items_range(0, BATCH)
        t0 = time.perf_counter()
        for _ in range(n_items // BATCH):
            producer.instant(batch, partition=0)
        seconds = time.perf_counter() - t0
        stored = _count(engine, "s")
    return {"items": n_items, "seconds": seconds, "stored": stored}


def ours_txn(path: Path, n_items: int, durability: str) -> dict:
    """``new_transaction(); send(item) x 100; checkpoint()`` per transaction."""
    with _ts().open(str(path), durability=durability) as engine:
        engine.create_stream("s", partitions=1)
        producer = engine.producer("s", partition=0)
        batch = items_range(0, BATCH)
        t0 = time.perf_counter()
        for _ in range(n_items // BATCH):
            txn = producer.new_transaction(partition=0)
            for item in batch:
                txn.send(item)
            txn.checkpoint()
        seconds = time.perf_counter() - t0
        stored = _count(engine, "s")
    return {"items": n_items, "seconds": seconds, "stored": stored}


def ours_consume_prepare(path: Path, n_items: int) -> None:
    with _ts().open(str(path), durability="async") as engine:
        engine.create_stream("s", partitions=1)
        producer = engine.producer("s", partition=0)
        for start in range(0, n_items, BATCH):
            producer.instant(items_range(start, BATCH), partition=0)


def ours_consume(path: Path, n_items: int) -> dict:
    """A consumer reading every transaction, ``checkpoint()`` after every 100 transactions."""
    with _ts().open(str(path), durability="sync") as engine:
        consumer = engine.consumer("s", name="c", start="oldest")
        n = txns = 0
        t0 = time.perf_counter()
        while True:
            txn = consumer.get_transaction(0)
            if txn is None:
                break
            for item in txn.items:
                item  # noqa: B018 - "process" the item
            n += len(txn.items)
            txns += 1
            if txns % 100 == 0:
                consumer.checkpoint()
        consumer.checkpoint()
        seconds = time.perf_counter() - t0
        ok = engine.backend.get_offsets("s", "c").get(0) == engine.backend.last_txn_id("s", 0)
    return {"items": n, "seconds": seconds, "stored": n if ok else -1}


def ours_group_commit(path: Path, threads: int, per_thread: int) -> dict:
    """``threads`` threads, each calling ``producer.instant([item])`` (durable) in a loop."""
    with _ts().open(str(path), durability="sync") as engine:
        engine.create_stream("s", partitions=1)
        item = [make_item(0)]
        before = engine.backend.stats()

        def factory(t: int):
            producer = engine.producer("s", partition=0)
            return lambda i: producer.instant(item, partition=0)

        seconds, _lat = run_threads(threads, per_thread, factory)
        after = engine.backend.stats()
        stored = _count(engine, "s")
    n = threads * per_thread
    extra = {}
    for k in ("fsyncs", "commits"):
        if k in after and k in before:
            extra[k] = after[k] - before[k]
    return {"items": n, "seconds": seconds, "stored": stored, **extra}


def ours_streams(path: Path, n_streams: int, batch: int = 1000) -> dict:
    """``engine.batch()``: ``batch`` x (create_stream + instant) per durable atomic write."""
    with _ts().open(str(path), durability="sync") as engine:
        item = [make_item(0)]
        t0 = time.perf_counter()
        for start in range(0, n_streams, batch):
            with engine.batch() as b:
                for i in range(start, min(n_streams, start + batch)):
                    b.create_stream(f"s{i}", partitions=1)
                    b.instant(f"s{i}", item, partition=0)
        seconds = time.perf_counter() - t0
        stored = len(engine.list_streams(prefix="s"))
        stats = engine.backend.stats()
    out = {"items": n_streams, "seconds": seconds, "stored": stored, "disk_bytes": disk_bytes(path)}
    for k in ("log_entries", "last_pgno"):
        if k in stats:
            out[k] = stats[k]
    return out


def ours_streams_api(path: Path, n_streams: int) -> dict:
    """The public API, one stream at a time: ``create_stream`` + ``producer(...).instant`` (async)."""
    with _ts().open(str(path), durability="async") as engine:
        item = [make_item(0)]
        t0 = time.perf_counter()
        for i in range(n_streams):
            name = f"s{i}"
            engine.create_stream(name, partitions=1)
            engine.producer(name, partition=0).instant(item, partition=0)
        seconds = time.perf_counter() - t0
        stored = len(engine.list_streams(prefix="s"))
    return {"items": n_streams, "seconds": seconds, "stored": stored, "disk_bytes": disk_bytes(path)}


# --- the harness ----------------------------------------------------------------------------
Runner = Callable[[Path], dict]


def _measure(base: Path, runners: dict[str, tuple[Runner, Runner | None]], reps: int, expected: dict[str, int],
             tick: Callable[[str], None]) -> dict[str, dict]:  # fmt: skip
    """Run every runner ``reps`` times, interleaved (order rotated per repetition)."""
    names = list(runners)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for rep in range(reps):
        for i in range(len(names)):
            name = names[(i + rep) % len(names)]
            run, prepare = runners[name]
            d = Path(tempfile.mkdtemp(prefix=f"run{i}-", dir=base))
            try:
                if prepare is not None:
                    prepare(d)
                gc.collect()
                r = run(d)
            except Exception as e:  # noqa: BLE001 - record and carry on
                r = {"error": f"{type(e).__name__}: {e}"}
            finally:
                shutil.rmtree(d, ignore_errors=True)
            r["ok"] = "error" not in r and r.get("stored") == expected[name]
            if "error" not in r and not r["ok"]:
                r["error"] = f"check failed: stored/read {r.get('stored')}, expected {expected[name]}"
            if r["ok"]:
                r["rate"] = r["items"] / r["seconds"]
            runs[name].append(r)
            tick(name)
    out = {}
    for name, rs in runs.items():
        rates = [r["rate"] for r in rs if r["ok"]]
        s = {"ok": all(r["ok"] for r in rs), "rate_median": median(rates), "rate_min": min(rates, default=None),
             "rate_max": max(rates, default=None), "spread": spread(rates), "runs": rs}  # fmt: skip
        s["noisy"] = s["spread"] > NOISY_SPREAD
        secs = [r["seconds"] for r in rs if r["ok"]]
        s["seconds"] = median(secs)
        disks = [r["disk_bytes"] for r in rs if r["ok"] and "disk_bytes" in r]
        if disks:
            s["disk_bytes"] = median(disks)
        errors = [r["error"] for r in rs if not r["ok"]]
        if errors:
            s["errors"] = errors
        out[name] = s
    return out


def _ratio(a: dict, b: dict) -> float | None:
    x, y = a.get("rate_median"), b.get("rate_median")
    return x / y if x and y else None


def run_engine(mode: str = "quick", reps: int = 3, workdir: str | None = None, progress: bool = True,
               with_api_streams: bool = True) -> dict[str, Any]:  # fmt: skip
    """Measure every figure; return the report written to ``engine.json``."""
    if mode not in SIZES:
        raise ValueError(f"mode must be one of {sorted(SIZES)}, not {mode!r}")
    if reps < 1:
        raise ValueError("reps must be >= 1")
    sz = SIZES[mode]
    threads = 8
    plan: list[tuple[str, dict[str, tuple[Runner, Runner | None]], dict[str, int]]] = [
        ("durable_produce", {
            "raw putmulti, durable commit": (lambda d: raw_produce(d, sz["durable"], True), None),
            "ours instant()": (lambda d: ours_instant(d, sz["durable"], "sync"), None),
            "ours open/send/checkpoint": (lambda d: ours_txn(d, sz["durable"], "sync"), None),
        }, dict.fromkeys(("raw putmulti, durable commit", "ours instant()", "ours open/send/checkpoint"),
                         sz["durable"])),
        ("async_produce", {
            "raw putmulti, no sync": (lambda d: raw_produce(d, sz["async"], False), None),
            "ours instant(), async": (lambda d: ours_instant(d, sz["async"], "async"), None),
            "ours open/send/checkpoint, async": (lambda d: ours_txn(d, sz["async"], "async"), None),
        }, dict.fromkeys(("raw putmulti, no sync", "ours instant(), async", "ours open/send/checkpoint, async"),
                         sz["async"])),
        ("consume", {
            "raw cursor scan + offset": (lambda d: raw_consume(d, sz["consume"]),
                                         lambda d: raw_consume_prepare(d, sz["consume"])),
            "ours consumer + checkpoint": (lambda d: ours_consume(d, sz["consume"]),
                                           lambda d: ours_consume_prepare(d, sz["consume"])),
        }, dict.fromkeys(("raw cursor scan + offset", "ours consumer + checkpoint"), sz["consume"])),
        ("group_commit", {
            "raw 1 thread, 1 item/commit": (lambda d: raw_single_commits(d, sz["single"]), None),
            "ours 1 thread instant([item])": (lambda d: ours_group_commit(d, 1, sz["single"]), None),
            f"ours {threads} threads instant([item])": (
                lambda d: ours_group_commit(d, threads, sz["per_thread"]), None),
        }, {"raw 1 thread, 1 item/commit": sz["single"], "ours 1 thread instant([item])": sz["single"],
            f"ours {threads} threads instant([item])": threads * sz["per_thread"]}),
        ("streams", {
            "raw, 1000 streams/commit": (lambda d: raw_streams(d, sz["streams"]), None),
            "ours engine.batch(), 1000 streams/commit": (lambda d: ours_streams(d, sz["streams"]), None),
        }, dict.fromkeys(("raw, 1000 streams/commit", "ours engine.batch(), 1000 streams/commit"), sz["streams"])),
    ]  # fmt: skip
    if with_api_streams:
        name = f"ours create_stream+instant, async ({sz['api_streams']:,})"
        plan[-1][1][name] = (lambda d: ours_streams_api(d, sz["api_streams"]), None)
        plan[-1][2][name] = sz["api_streams"]
    total = sum(len(p[1]) for p in plan) * reps
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="run", dynamic_ncols=True, file=sys.stderr)

    def tick(name: str) -> None:
        if bar is not None:
            bar.set_description(name)
            bar.update(1)

    machine = machine_info()
    started = time.time()
    base = Path(tempfile.mkdtemp(prefix="tstreams-engine-bench-", dir=workdir))
    figures: dict[str, Any] = {}
    try:
        for fid, runners, expected in plan:
            figures[fid] = {"rows": _measure(base, runners, reps, expected, tick)}
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if bar is not None:
            bar.close()
    machine["loadavg_at_end"] = list(__import__("os").getloadavg())
    _add_goals(figures, sz, threads)
    return {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mode": mode,
        "reps": reps,
        "duration_s": round(time.time() - started, 1),
        "noisy_threshold": NOISY_SPREAD,
        "sizes": sz,
        "machine": machine,
        "figures": figures,
    }


def _goal(text: str, value: float | None, required: float, unit: str = "") -> dict:
    return {"goal": text, "value": value, "required": required, "unit": unit,
            "met": None if value is None else value >= required}  # fmt: skip


def _goal_max(text: str, value: float | None, limit: float, unit: str = "") -> dict:
    return {"goal": text, "value": value, "required": limit, "unit": unit,
            "met": None if value is None else value <= limit}  # fmt: skip


def _add_goals(f: dict, sz: dict, threads: int) -> None:
    d = f["durable_produce"]["rows"]
    raw = d["raw putmulti, durable commit"]
    f["durable_produce"].update(title="Durable produce, 100-byte items in 100-item transactions", goals=[
        _goal("instant(): >= 0.8x raw durable putmulti", _ratio(d["ours instant()"], raw), 0.8, "x"),
        _goal("open/send/checkpoint: >= 0.8x raw durable putmulti", _ratio(d["ours open/send/checkpoint"], raw),
              0.8, "x"),
    ])  # fmt: skip
    a = f["async_produce"]["rows"]
    raw = a["raw putmulti, no sync"]
    ours = a["ours instant(), async"]
    f["async_produce"].update(title="Async produce, 100-byte items in 100-item transactions", goals=[
        _goal("instant(), async: >= 1,000,000 items/s", ours.get("rate_median"), 1e6, "items/s"),
        _goal("instant(), async: >= 0.5x raw no-sync putmulti", _ratio(ours, raw), 0.5, "x"),
        _goal("open/send/checkpoint, async: >= 1,000,000 items/s",
              a["ours open/send/checkpoint, async"].get("rate_median"), 1e6, "items/s"),
    ])  # fmt: skip
    c = f["consume"]["rows"]
    ours, raw = c["ours consumer + checkpoint"], c["raw cursor scan + offset"]
    f["consume"].update(title="Consume with an offset checkpoint every 100 transactions", goals=[
        _goal(">= 3,000,000 items/s", ours.get("rate_median"), 3e6, "items/s"),
        _goal(">= 0.5x raw cursor scan", _ratio(ours, raw), 0.5, "x"),
    ])  # fmt: skip
    g = f["group_commit"]["rows"]
    many = g[f"ours {threads} threads instant([item])"]
    f["group_commit"].update(title="Group commit: durable 1-item instant transactions", goals=[
        _goal(f"{threads} threads >= 5x single-thread unbatched durable commits (raw LMDB)",
              _ratio(many, g["raw 1 thread, 1 item/commit"]), 5.0, "x"),
        _goal(f"{threads} threads vs ours single-thread (informational)",
              _ratio(many, g["ours 1 thread instant([item])"]), 0.0, "x"),
    ])  # fmt: skip
    s = f["streams"]["rows"]
    ours = s["ours engine.batch(), 1000 streams/commit"]
    n = sz["streams"]
    secs = ours.get("seconds")
    per = ours["disk_bytes"] / n if ours.get("disk_bytes") is not None else None
    projected = secs * 1_000_000 / n if secs is not None else None
    f["streams"].update(title=f"{n:,} streams with one instant transaction each", goals=[
        _goal_max(f"time for 1,000,000 streams <= 60 s{' (projected from ' + f'{n:,})' if n != 1_000_000 else ''}",
                  projected, 60.0, "s"),
        _goal_max("disk < 1 KiB per stream", per, 1024.0, "B"),
    ])  # fmt: skip
    for row in s.values():
        good = [r for r in row["runs"] if r["ok"]]
        if row.get("disk_bytes") is not None and good:
            row["disk_bytes_per_stream"] = row["disk_bytes"] / good[0]["items"]


# --- output ---------------------------------------------------------------------------------
def engine_markdown(report: dict[str, Any]) -> str:
    out = [
        f"Engine figures: `python -m benchmarks.engine{' --quick' if report['mode'] == 'quick' else ''}` "
        f"({report['mode']} run, {report['generated']}, {report['duration_s']:.0f} s). Medians of "
        f"{report['reps']} interleaved repetitions, each side by side with raw py-lmdb doing the same work; "
        f"**noisy** when the spread exceeds {report['noisy_threshold']:.0%}.",
        "",
        f"Machine: {machine_line(report['machine'])}.",
        "",
    ]
    for fig in report["figures"].values():
        out += [f"#### {fig['title']}", "", "| run | rate | spread | time s | disk |", "|---|---|---|---|---|"]
        for name, r in fig["rows"].items():
            sp = f"{r['spread']:.0%}" + (" **noisy**" if r["noisy"] else "") + ("" if r["ok"] else " (FAILED)")
            disk = fmt_bytes(r.get("disk_bytes_per_stream")) + "/stream" if "disk_bytes_per_stream" in r else "—"
            out.append(f"| {name} | {fmt_rate(r.get('rate_median'))}/s | {sp} | {fmt_num(r.get('seconds'))} | {disk} |")
        out += [""]
        for g in fig["goals"]:
            verdict = {True: "met", False: "**missed**", None: "not measured"}[g["met"]]
            if g["required"] == 0.0:
                verdict = "—"
            out.append(f"- {g['goal']}: {_fmt_goal(g)} — {verdict}")
        out.append("")
    return "\n".join(out)


def _fmt_goal(g: dict) -> str:
    v = g["value"]
    if g["unit"] == "x":
        return fmt_ratio(v)
    if g["unit"] == "items/s":
        return f"{fmt_rate(v)} items/s"
    if g["unit"] == "B":
        return fmt_bytes(v)
    return f"{fmt_num(v, 1)} {g['unit']}"


def engine_plot(report: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.report import rate_formatter, wrap_label

    figs = list(report["figures"].items())
    cols = 3
    rows = (len(figs) + cols - 1) // cols
    fig, grid = plt.subplots(rows, cols, figsize=(5.0 * cols, 4.6 * rows), dpi=100, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[len(figs):]:
        ax.axis("off")
    for ax, (_fid, f) in zip(axes, figs, strict=False):
        names = list(f["rows"])
        vals = [f["rows"][n].get("rate_median") or 0 for n in names]
        base = vals[0]
        colors = ["#b0b0b0" if n.startswith("raw") else "#1f77b4" for n in names]
        bars = ax.bar(range(len(names)), vals, color=colors, edgecolor="black")
        for bar, n, v in zip(bars, names, vals, strict=True):
            r = f["rows"][n]
            if r.get("noisy"):
                bar.set_hatch("//")
            label = fmt_rate(v) + (f"\n{v / base:.2f}× raw" if base and not n.startswith("raw") else "")
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7)  # fmt: skip
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([wrap_label(n, 18) for n in names], fontsize=7)
        ax.set_title(wrap_label(f["title"], 48), fontsize=9)
        ax.yaxis.set_major_formatter(rate_formatter())
        ax.set_ylim(0, max(vals + [1]) * 1.3)
        ax.grid(axis="y", alpha=0.3)
    for ax in grid[:, 0]:
        ax.set_ylabel("items/s (streams/s for streams)")
    fig.suptitle(f"Engine vs raw py-lmdb ({report['mode']}, median of {report['reps']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_engine(report: dict[str, Any], out_dir: Path, plots: bool = True) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "engine.json", out_dir / "engine.md"]
    write_json(report, paths[0])
    paths[1].write_text(engine_markdown(report))
    if plots:
        paths.append(engine_plot(report, out_dir / "engine.png"))
    return paths


@click.command("engine-bench")
@click.option("--quick", is_flag=True, help="Small sizes (under a minute).")
@click.option("--reps", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option("--out", "out_dir", default=str(RESULTS_DIR), show_default=True, type=click.Path(file_okay=False))
@click.option("--workdir", default=None, type=click.Path(file_okay=False), help="Scratch directory (a real disk).")
@click.option("--no-plots", is_flag=True)
def main(quick: bool, reps: int, out_dir: str, workdir: str | None, no_plots: bool) -> None:
    """Engine figures of issue 2, side by side with raw py-lmdb."""
    report = run_engine("quick" if quick else "full", reps=reps, workdir=workdir)
    paths = write_engine(report, Path(out_dir), plots=not no_plots)
    click.echo(engine_markdown(report))
    click.echo("wrote " + ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
