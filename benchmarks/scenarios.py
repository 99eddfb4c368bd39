"""Every benchmark suite as scenarios of variants, and the goals judged on them.

A :class:`Scenario` is one figure: its variants (:class:`Variant`: a system from
:mod:`benchmarks.systems` and the ``setup_<method>``/``run_<method>`` pair it runs) are
measured side by side in the same run, interleaved, with the sizes of the chosen mode
(``tiny`` for tests, ``quick``, ``full``). A :class:`Goal` is a verdict on the medians.

Suites:

* ``peers``: this project against Redis Streams, SQLite and raw py-lmdb (100-byte items, durable);
* ``engine``: the engine's own figures, each beside raw py-lmdb doing the same work;
* ``net``: ``tstreams serve`` against an echo server on the same loop, a Moebius-style loop and HAProxy;
* ``spark``: the Spark connector against Spark's own Parquet and file sources;
* ``streams``: ``tstreams_embedded.streams`` against Bytewax, Pathway and a plain-Python floor on
  one windowed-count job (every output checked exact), plus its latency and its recovery.
* ``cluster``: the replicated cluster against one node and a replicated Redis, failover, and
  catch-up; assembled from the modules in :data:`CLUSTER_PARTS` (see :mod:`benchmarks.cluster`).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Any

from benchmarks.systems import OURS, PEERS

MODES = ("tiny", "quick", "full")


@dataclass(frozen=True)
class Variant:
    """One row of a scenario: ``system`` (a registry name) running ``method`` with ``params``
    added to the scenario's sizes. ``name`` is the row label (the system name by default)."""

    system: str
    name: str = ""
    method: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.name or self.system


@dataclass(frozen=True)
class Scenario:
    """One figure: ``variants`` run ``method`` (unless a variant names its own) at ``sizes[mode]``.

    ``isolation`` is ``"process"`` (every run in a fresh worker process with a fresh data
    directory) or ``"shared"`` (each system opened once per suite run, e.g. servers or a Spark
    session, and every repetition run in this process). ``per_item`` reports time, disk and
    memory per item (per stream) instead of latency.
    """

    suite: str
    id: str
    title: str
    method: str
    description: str
    variants: tuple[Variant, ...]
    sizes: dict[str, dict[str, Any]]
    latency: str | None = None
    unit: str = "items/s"
    isolation: str = "process"
    per_item: bool = False
    warmup: bool = False
    timeouts: dict[str, float] | None = None
    """Per-mode worker timeout in seconds, when the harness's default is not enough."""

    def params(self, mode: str, variant: Variant | None = None) -> dict[str, Any]:
        return {**self.sizes[mode], **(variant.params if variant else {})}

    def method_of(self, variant: Variant) -> str:
        return variant.method or self.method


@dataclass(frozen=True)
class Goal:
    """A verdict on one scenario's medians.

    With ``vs``: the ratio ``of`` ÷ ``vs`` of ``metric`` (default the median rate). Without:
    the value of ``metric`` of ``of``, times ``scale``. Met when ``at_least`` <= value (strictly
    greater if ``strict``) and value <= ``at_most``; with neither bound it is informational.
    """

    scenario: str
    text: str
    of: str
    vs: str | None = None
    metric: str = "rate_median"
    at_least: float | None = None
    at_most: float | None = None
    strict: bool = False
    scale: float = 1.0
    unit: str = "x"
    difference: bool = False
    """With ``vs``: judge ``of`` − ``vs`` instead of the ratio (e.g. extra memory in MB)."""

    def evaluate(self, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
        mine = results.get(self.of, {})
        value = mine.get(self.metric)
        if self.vs is not None:
            base = results.get(self.vs, {}).get(self.metric)
            if self.difference:
                value = value - base if value is not None and base is not None else None
            else:
                value = value / base if value and base else None
        elif value is not None:
            value *= self.scale
        met: bool | None = None
        if value is not None and (self.at_least is not None or self.at_most is not None):
            met = True
            if self.at_least is not None:
                met = value > self.at_least if self.strict else value >= self.at_least
            if self.at_most is not None:
                met = met and value <= self.at_most
        required = self.at_least if self.at_least is not None else self.at_most
        return {"scenario": self.scenario, "goal": self.text, "of": self.of, "vs": self.vs, "value": value,
                "required": required, "unit": self.unit, "met": met}


def _v(*names: str) -> tuple[Variant, ...]:
    return tuple(Variant(n) for n in names)


# --- peers: 100-byte items, durable settings ----------------------------------------------------
#: every scenario also runs the fsync floor (same items per durable commit): ours ÷ it is
#: the fraction of the disk's physical limit at that commit size
_PEER_VARIANTS = _v(*OURS, *PEERS, "fsync-floor")
_ITEMS = {"tiny": {"n_items": 300, "batch": 100}, "quick": {"n_items": 30_000, "batch": 100},
          "full": {"n_items": 300_000, "batch": 100}}

PEER_SCENARIOS = (
    Scenario(
        "peers", "produce", "1. Produce, 100-item transactions", "produce",
        "One producer writes 100-byte items in durable transactions of 100 items.",
        _PEER_VARIANTS, _ITEMS, latency="commit of one 100-item transaction",
    ),
    Scenario(
        "peers", "concurrent", "2. Produce 1-item transactions, 8 threads", "concurrent",
        "8 threads write durable 1-item transactions to one partition (client/server systems: one "
        "connection per thread; embedded: one producer per thread).",
        _PEER_VARIANTS,
        {"tiny": {"threads": 8, "per_thread": 5}, "quick": {"threads": 8, "per_thread": 250},
         "full": {"threads": 8, "per_thread": 2000}},
        latency="one 1-item transaction",
    ),
    Scenario(
        "peers", "consume", "3. Consume, offset commit every 100 items", "consume",
        "A consumer reads a pre-loaded backlog 100 items at a time and durably commits its offset "
        "after each 100 items.",
        _PEER_VARIANTS, _ITEMS, latency="read 100 items + durable offset commit",
    ),
    Scenario(
        "peers", "exactly_once", "4. Exactly-once read-transform-write", "exactly_once",
        "Read 100 items, transform them, write them to an output stream and commit the input offset in "
        "one atomic durable write (Redis MULTI/EXEC with the offset in a key, SQLite one transaction, "
        "LMDB one write transaction, ours CheckpointGroup).",
        _PEER_VARIANTS,
        {"tiny": {"n_items": 300, "batch": 100}, "quick": {"n_items": 20_000, "batch": 100},
         "full": {"n_items": 200_000, "batch": 100}},
        latency="one read-transform-write batch of 100 items",
    ),
    Scenario(
        "peers", "many_streams", "5. Many streams, 1 transaction each", "many_streams",
        "Create N streams with one 1-item transaction each, 1000 streams per durable commit/pipeline. "
        "Reports time, disk bytes and memory per stream.",
        _PEER_VARIANTS,
        {"tiny": {"n_streams": 2_000, "batch": 1000}, "quick": {"n_streams": 100_000, "batch": 1000},
         "full": {"n_streams": 1_000_000, "batch": 1000}},
        unit="streams/s", per_item=True,
    ),
)

PEER_GOALS = (
    Goal("produce", "ours >= 3x Redis Streams (everysec, MULTI/EXEC)", "ours-embedded", "redis-everysec",
         at_least=3.0),
    Goal("produce", "ours >= 1.2x SQLite WAL FULL", "ours-embedded", "sqlite-wal-full", at_least=1.2),
    Goal("consume", "ours >= 5x Redis Streams", "ours-embedded", "redis-everysec", at_least=5.0),
    Goal("consume", "ours >= 2x SQLite", "ours-embedded", "sqlite-wal-full", at_least=2.0),
    Goal("exactly_once", "ours ahead of Redis (everysec)", "ours-embedded", "redis-everysec", at_least=1.0,
         strict=True),
    Goal("exactly_once", "ours ahead of Redis (always)", "ours-embedded", "redis-always", at_least=1.0,
         strict=True),
    Goal("exactly_once", "ours ahead of SQLite", "ours-embedded", "sqlite-wal-full", at_least=1.0, strict=True),
    Goal("produce", "ours vs the fsync floor at 100 items/commit (fraction of the disk's limit)", "ours-embedded",
         "fsync-floor"),
    Goal("concurrent", "ours vs the fsync floor at 1 item/commit (items per fsync-equivalent)", "ours-embedded",
         "fsync-floor"),
    Goal("consume", "ours >= 0.8x the fsync floor x 100 items (one offset commit per 100 items)", "ours-embedded",
         "fsync-floor", at_least=0.8),
    Goal("exactly_once", "ours vs the fsync floor at 100 items/commit", "ours-embedded", "fsync-floor"),
    Goal("many_streams", "ours completes every stream, disk per stream reported", "ours-embedded",
         metric="disk_bytes_per_item", at_least=0.0, strict=True, unit="B"),
)

# --- engine: each figure beside raw py-lmdb doing the same work ---------------------------------
_ENGINE_SIZES: dict[str, dict[str, int]] = {
    "tiny": {"durable": 1_000, "async": 5_000, "consume": 10_000, "single": 100, "per_thread": 20,
             "streams": 2_000, "api_streams": 500, "state_keys": 2_000},
    "quick": {"durable": 30_000, "async": 500_000, "consume": 1_000_000, "single": 1_000, "per_thread": 300,
              "streams": 100_000, "api_streams": 20_000, "state_keys": 100_000},
    "full": {"durable": 300_000, "async": 2_000_000, "consume": 3_000_000, "single": 3_000, "per_thread": 2_000,
             "streams": 1_000_000, "api_streams": 100_000, "state_keys": 500_000},
}
THREADS = 8
#: the disk's durable limit, beside every durable engine figure (same items per commit)
_FLOORS = (Variant("fsync-floor", "fsync floor, 1 page/commit"),
           Variant("fsync-floor-2", "fsync floor, 2 pages/commit"),
           Variant("fsync-floor-3", "fsync floor, 3 pages/commit"))


def _engine_sizes(**keys: str) -> dict[str, dict[str, Any]]:
    """Per mode, the scenario parameters named by ``keys`` (parameter -> key of ``_ENGINE_SIZES``)."""
    return {mode: {param: sz[key] for param, key in keys.items()} for mode, sz in _ENGINE_SIZES.items()}


ENGINE_SCENARIOS = (
    Scenario(
        "engine", "durable_produce", "Durable produce, 100-byte items in 100-item transactions", "produce",
        "instant(items) and new_transaction/send/checkpoint against raw putmulti with a durable commit "
        "per 100 items.",
        (Variant("lmdb-raw", "raw putmulti, durable commit"),
         Variant("ours-embedded", "ours instant()"),
         Variant("ours-embedded", "ours open/send/checkpoint", method="produce_txn"),
         *_FLOORS),
        {m: {"n_items": p["n_items"], "batch": 100} for m, p in _engine_sizes(n_items="durable").items()},
    ),
    Scenario(
        "engine", "async_produce", "Async produce, 100-byte items in 100-item transactions", "produce",
        'durability="async" against raw putmulti without sync.',
        (Variant("lmdb-raw-nosync", "raw putmulti, no sync"),
         Variant("ours-embedded-async", "ours instant(), async"),
         Variant("ours-embedded-async", "ours open/send/checkpoint, async", method="produce_txn")),
        {m: {"n_items": p["n_items"], "batch": 100} for m, p in _engine_sizes(n_items="async").items()},
    ),
    Scenario(
        "engine", "consume", "Consume with an offset checkpoint every 100 transactions", "scan",
        "A consumer reading every 100-item transaction, checkpoint() after every 100 transactions, against "
        "a raw cursor scan with a durable offset write every 10,000 items.",
        (Variant("lmdb-raw", "raw cursor scan + offset"), Variant("ours-embedded", "ours consumer + checkpoint"),
         Variant("ours-embedded-unsealed", "ours, chunks without checksum"),
         Variant("ours-embedded-values-unsealed", "ours, values without checksum")),
        {m: {"n_items": p["n_items"], "batch": 100, "commit_every": 100}
         for m, p in _engine_sizes(n_items="consume").items()},
    ),
    Scenario(
        "engine", "state_store", "State store: write, get and scan 100-byte values", "state_store",
        "N keys written 100 per (non-durable) StoreWrite, each read back by store_get, then scanned by "
        "store_range 1000 keys at a time; items = writes + gets + entries scanned. Every value is sealed "
        "with a checksum over key and value and verified on read; the same with value seals off is shown.",
        (Variant("lmdb-raw-nosync", "raw named DB, put/get/cursor"),
         Variant("ours-embedded", "ours state store"),
         Variant("ours-embedded-values-unsealed", "ours state store, values without checksum")),
        {m: {"n_keys": p["n_keys"], "batch": 100} for m, p in _engine_sizes(n_keys="state_keys").items()},
    ),
    Scenario(
        "engine", "group_commit", "Group commit: durable 1-item instant transactions", "group_commit",
        f"{THREADS} threads of durable 1-item instant transactions against the single-thread unbatched "
        "durable commit rate of raw LMDB; ours single-threaded is shown too.",
        (Variant("lmdb-raw", "raw 1 thread, 1 item/commit", method="single_commits"),
         Variant("ours-embedded", "ours 1 thread instant([item])", method="single_commits"),
         Variant("ours-embedded", f"ours {THREADS} threads instant([item])", params={"threads": THREADS}),
         *_FLOORS),
        {m: {"n_items": p["n_items"], "per_thread": p["per_thread"]}
         for m, p in _engine_sizes(n_items="single", per_thread="per_thread").items()},
    ),
    Scenario(
        "engine", "streams", "Streams with one instant transaction each", "many_streams",
        "N streams with one 1-item instant transaction each, 1000 streams per durable atomic write "
        "(engine.batch()); the public API one stream at a time (async) is shown too.",
        (Variant("lmdb-raw", "raw, 1000 streams/commit"),
         Variant("ours-embedded", "ours engine.batch(), 1000 streams/commit"),
         Variant("ours-embedded-async", "ours create_stream+instant, async", method="streams_api")),
        {m: {"n_streams": p["n_streams"], "api_streams": p["api_streams"], "batch": 1000}
         for m, p in _engine_sizes(n_streams="streams", api_streams="api_streams").items()},
        unit="streams/s", per_item=True,
    ),
)

ENGINE_GOALS = (
    Goal("durable_produce", "instant(): >= 0.8x raw durable putmulti", "ours instant()",
         "raw putmulti, durable commit", at_least=0.8),
    Goal("durable_produce", "open/send/checkpoint: >= 0.8x raw durable putmulti", "ours open/send/checkpoint",
         "raw putmulti, durable commit", at_least=0.8),
    Goal("async_produce", "instant(), async: >= 1,000,000 items/s", "ours instant(), async", at_least=1e6,
         unit="items/s"),
    Goal("async_produce", "instant(), async: >= 0.5x raw no-sync putmulti", "ours instant(), async",
         "raw putmulti, no sync", at_least=0.5),
    Goal("async_produce", "open/send/checkpoint, async: >= 1,000,000 items/s", "ours open/send/checkpoint, async",
         at_least=1e6, unit="items/s"),
    Goal("consume", ">= 3,000,000 items/s", "ours consumer + checkpoint", at_least=3e6, unit="items/s"),
    Goal("consume", ">= 0.5x raw cursor scan", "ours consumer + checkpoint", "raw cursor scan + offset",
         at_least=0.5),
    Goal("consume", "chunk checksums cost <= 10% (>= 0.9x the same chunks without checksum)",
         "ours consumer + checkpoint", "ours, chunks without checksum", at_least=0.9),
    Goal("consume", "value seals cost <= 10% (>= 0.9x the same values without checksum)",
         "ours consumer + checkpoint", "ours, values without checksum", at_least=0.9),
    Goal("state_store", "value seals cost <= 10% (>= 0.9x the same values without checksum)",
         "ours state store", "ours state store, values without checksum", at_least=0.9),
    Goal("durable_produce", "instant() vs the fsync floor, 1 page per 100 items (fraction of the limit)",
         "ours instant()", "fsync floor, 1 page/commit"),
    Goal("durable_produce", "instant() vs the fsync floor, 3 pages per 100 items", "ours instant()",
         "fsync floor, 3 pages/commit"),
    Goal("group_commit", f"{THREADS} threads >= 4x single-thread unbatched durable commits (raw LMDB)",
         f"ours {THREADS} threads instant([item])", "raw 1 thread, 1 item/commit", at_least=4.0),
    Goal("group_commit", f"{THREADS} threads: items per fsync-equivalent (vs the 1-page floor)",
         f"ours {THREADS} threads instant([item])", "fsync floor, 1 page/commit"),
    Goal("group_commit", "1 thread: fraction of the 1-page fsync floor", "ours 1 thread instant([item])",
         "fsync floor, 1 page/commit"),
    Goal("group_commit", f"{THREADS} threads vs ours single-thread (informational)",
         f"ours {THREADS} threads instant([item])", "ours 1 thread instant([item])"),
    Goal("streams", "time for 1,000,000 streams <= 60 s (projected from N)", "ours engine.batch(), 1000 streams/commit",
         metric="seconds_per_item", scale=1e6, at_most=60.0, unit="s"),
    Goal("streams", "disk < 1 KiB per stream", "ours engine.batch(), 1000 streams/commit",
         metric="disk_bytes_per_item", at_most=1024.0, unit="B"),
)

# --- net: the network layer, servers started once per run ---------------------------------------
_NET = {
    # seconds of warm-up / measurement per run, requests in flight per pipelined client
    "tiny": {"warmup": 0.05, "measure": 0.2, "window": 20, "settle": 0.2},
    "quick": {"warmup": 0.2, "measure": 0.8, "window": 100, "settle": 0.2},
    "full": {"warmup": 1.0, "measure": 4.0, "window": 100, "settle": 0.5},
}
CLIENTS, SYNC_CLIENTS = 4, 12


def _req(system: str, name: str, kind: str, clients: int, target: str = "") -> Variant:
    return Variant(system, name, params={"kind": kind, "clients": clients, "target": target})


NET_SCENARIOS = (
    Scenario(
        "net", "pipelined", "Pipelined 1-item instants", "requests",
        f"{CLIENTS} client processes, each with a window of requests in flight, send 1-item INSTANT "
        "transactions through one `tstreams serve` (async, and sync durability) against an echo server "
        "running the same Server loop and framing whose handlers do nothing. Wire protocol 2 (one frame per "
        "request and reply); the same load in protocol 1 (header, body and chunk frames; 2-frame replies), "
        "which the server still answers, shows what the framing saves.",
        (_req("echo-server", "echo (same loop, no engine)", "pipelined", CLIENTS),
         _req("ours-serve", "ours (async durability)", "pipelined", CLIENTS),
         _req("ours-serve-sync", "ours (sync durability)", "pipelined", CLIENTS),
         _req("ours-serve-before", "ours (async), before pieces (rcvhwm 64)", "pipelined", CLIENTS),
         _req("ours-serve", "ours (async), wire protocol 1 clients", "pipelined-v1", CLIENTS)),
        _NET, latency="request (send to reply, queueing in the window included)", unit="req/s", isolation="shared",
    ),
    Scenario(
        "net", "sync12", f"{SYNC_CLIENTS} synchronous clients", "requests",
        f"{SYNC_CLIENTS} client processes with one request in flight each, against a Moebius-style loop "
        "(zmq.Poller, one message per wakeup, JSON, linear handler scan, ROUTER_MANDATORY) answering a "
        "trivial JSON request. Ours answers now_ms (also sent in wire protocol 1), get_stream (an LMDB read) "
        "and 1-item instant writes.",
        (_req("moebius-server", "moebius-style (JSON echo)", "moebius", SYNC_CLIENTS),
         _req("ours-serve", "ours now_ms", "sync-now", SYNC_CLIENTS),
         _req("ours-serve", "ours now_ms, wire protocol 1 clients", "sync-now-v1", SYNC_CLIENTS),
         _req("ours-serve", "ours get_stream (LMDB read)", "sync-read", SYNC_CLIENTS),
         _req("ours-serve", "ours instant (async write)", "sync-write", SYNC_CLIENTS),
         _req("ours-serve", "ours now_ms via RemoteBackend", "remote-sync", SYNC_CLIENTS),
         _req("ours-serve-before", "ours instant (async write), before pieces (rcvhwm 64)", "sync-write",
              SYNC_CLIENTS)),
        _NET, latency="request", unit="req/s", isolation="shared",
    ),
    Scenario(
        "net", "haproxy", "HAProxy in front of 2 servers", "requests",
        "The pipelined and the synchronous read workloads through HAProxy (cluster/haproxy.cfg, TCP mode) "
        "in front of 2 server processes on one data directory, against 1 server direct.",
        (_req("ours-haproxy", "1 server direct, pipelined", "pipelined", CLIENTS, "direct"),
         _req("ours-haproxy", "2 servers + HAProxy, pipelined", "pipelined", CLIENTS, "proxy"),
         _req("ours-haproxy", f"1 server direct, sync{SYNC_CLIENTS} get_stream", "sync-read", SYNC_CLIENTS,
              "direct"),
         _req("ours-haproxy", f"2 servers + HAProxy, sync{SYNC_CLIENTS} get_stream", "sync-read", SYNC_CLIENTS,
              "proxy")),
        _NET, latency="request", unit="req/s", isolation="shared",
    ),
)

NET_GOALS = (
    Goal("pipelined", "ours >= 0.8x echo", "ours (async durability)", "echo (same loop, no engine)", at_least=0.8),
    Goal("pipelined", "sync server vs echo (informational)", "ours (sync durability)",
         "echo (same loop, no engine)"),
    Goal("pipelined", "pieces and rcvhwm 16 vs before (rcvhwm 64; report the ratio)", "ours (async durability)",
         "ours (async), before pieces (rcvhwm 64)"),
    Goal("sync12", "pieces and rcvhwm 16 vs before (rcvhwm 64; report the ratio)", "ours instant (async write)",
         "ours instant (async write), before pieces (rcvhwm 64)"),
    Goal("pipelined", "wire protocol 2 vs 1 (informational)", "ours (async durability)",
         "ours (async), wire protocol 1 clients"),
    Goal("sync12", "ours >= 1.5x moebius-style", "ours now_ms", "moebius-style (JSON echo)", at_least=1.5),
    Goal("sync12", "wire protocol 2 vs 1, now_ms (informational)", "ours now_ms",
         "ours now_ms, wire protocol 1 clients"),
    Goal("sync12", "LMDB reads vs moebius-style (informational)", "ours get_stream (LMDB read)",
         "moebius-style (JSON echo)"),
    Goal("sync12", "writes vs moebius-style (informational)", "ours instant (async write)",
         "moebius-style (JSON echo)"),
    Goal("sync12", "RemoteBackend client vs moebius-style (informational)", "ours now_ms via RemoteBackend",
         "moebius-style (JSON echo)"),
    Goal("haproxy", "pipelined through HAProxy vs direct (report the ratio)", "2 servers + HAProxy, pipelined",
         "1 server direct, pipelined"),
    Goal("haproxy", "sync reads through HAProxy vs direct (report the ratio)",
         f"2 servers + HAProxy, sync{SYNC_CLIENTS} get_stream", f"1 server direct, sync{SYNC_CLIENTS} get_stream"),
)

# --- spark: one local[2] session, data loaded once ----------------------------------------------
_SPARK = {
    "tiny": {"rows": 8_000, "events": 4_000},
    "quick": {"rows": 200_000, "events": 50_000},
    "full": {"rows": 1_000_000, "events": 200_000},
}

SPARK_SCENARIOS = (
    Scenario(
        "spark", "batch_count", "Batch read into count()", "count",
        "N rows (100-byte values in 1,000-item transactions over 4 partitions) read into a DataFrame "
        "count(), against Spark reading the same rows (same six columns) from local Parquet files, which "
        "answers count() from its footers. The ceiling is a Python data source yielding prebuilt Arrow "
        "batches of the same rows without storage: the cost of Spark's Python data source path alone, "
        "the most any Python data source can do here.",
        _v("spark-tstreams", "spark-parquet", "spark-python-floor"), _SPARK, unit="rows/s", isolation="shared",
        warmup=True,
    ),
    Scenario(
        "spark", "batch_scan", "Batch read, full scan", "scan",
        "The same rows aggregated with sum(length(value)), sum(seq), max(txn_id), which makes both read "
        "every row.",
        _v("spark-tstreams", "spark-parquet"), _SPARK, unit="rows/s", isolation="shared", warmup=True,
    ),
    Scenario(
        "spark", "streaming", "Streaming end to end", "streaming",
        "The demo pipeline (page-view JSON -> 5-minute windowed counts with a watermark -> exactly-once sink), "
        "availableNow with maxRowsPerTrigger 25,000, against the same query reading the same events from "
        "JSON-lines files into Spark's exactly-once Parquet file sink. Every run checks that all windows "
        "came out exactly once.",
        _v("spark-tstreams", "spark-files"), _SPARK, unit="rows/s", isolation="shared", warmup=True,
    ),
)

SPARK_GOALS = (
    # Issue 11: the Python data source API's own ceiling replaces the Parquet count() goal, which
    # no Python data source reaches here (Parquet answers count() from its footers).
    Goal("batch_count", "count(): >= 0.9x the Python data source ceiling (prebuilt Arrow batches, no storage)",
         "spark-tstreams", "spark-python-floor", at_least=0.9),
    Goal("batch_count", "count(): vs Parquet, footers only (informational)", "spark-tstreams", "spark-parquet"),
    Goal("batch_scan", "full scan: >= 0.5x Parquet", "spark-tstreams", "spark-parquet", at_least=0.5),
    Goal("streaming", "streaming vs files + Parquet sink (report the ratio)", "spark-tstreams", "spark-files"),
)

# --- streams: one windowed count job, every system in its own child process -------------------
_STREAMS_COUNT_VARIANTS = (
    Variant("ours-streams", "ours (embedded, exactly-once, durable)"),
    Variant("bytewax", "Bytewax 0.21, recovery, 1-s snapshots"),
    Variant("pathway", "Pathway, exactly_once_behavior, 1 thread", params={"threads": 1}),
    Variant("pathway", "Pathway, exactly_once_behavior, 2 threads", params={"threads": 2}),
    Variant("python-floor", "plain Python, stdlib json"),
    Variant("python-floor-orjson", "plain Python, orjson"),
    Variant("ours-streams-values-unsealed", "ours, values without checksum"),
    Variant("ours-streams-serve", "ours through one tstreams serve"),
    Variant("ours-streams-cluster", "ours through a 3-node cluster"),
)
_OURS_STREAMS = "ours (embedded, exactly-once, durable)"
_OURS_LATENCY_LOCAL = "ours, producer in the app's process"
_OURS_LATENCY_REMOTE = "ours, producer in another process"
_OURS_REBALANCE = "ours, 2 instances, one SIGKILLed"
_OURS_SCALE_1 = "ours, 1 process"
_OURS_SCALE_2 = "ours, 2 processes"
_OURS_JOIN = "ours stream–table join (embedded, exactly-once, durable)"
_BYTEWAX_JOIN = "Bytewax 0.21 join operator, recovery, 1-s snapshots"

STREAMS_SCENARIOS = (
    Scenario(
        "streams", "windowed_count", "Windowed count: 5-minute tumbling windows, final results only", "windowed_count",
        "N JSON page-view events (1,000 pages, Zipf-like; up to 5 s of disorder; 10 events late by minutes) "
        "counted per page in 5-minute tumbling event-time windows with 10 s grace, one final result per window, "
        "exactly-once and durable. Each system runs in its own child process: rate = N / wall time of that "
        "process (start-up included), peak RSS = its own. Every output is checked against a plain-Python "
        "reference (no missing, duplicated, wrong or extra window) or the run FAILS.",
        _STREAMS_COUNT_VARIANTS,
        {"tiny": {"n_events": 3_000, "seed": 12}, "quick": {"n_events": 30_000, "seed": 12},
         "full": {"n_events": 1_000_000, "seed": 12}},
        unit="events/s", timeouts={"tiny": 180, "quick": 300, "full": 1800},
    ),
    Scenario(
        "streams", "latency", "End-to-end latency, 1-record transactions", "latency",
        "A closed loop: write one event as a durable 1-record transaction, wait until the app (exactly-once, "
        "windowed count without suppression, commit_interval_ms=1) has committed its count update and the "
        "update is readable, then write the next. The loop runs in the app's process (embedded: the app's "
        "commits wake the reader at once) or in another process on the same engine directory (each side is "
        "woken by the other's commits through the engine's inotify waker, engine/storage/commit_waker.py).",
        (Variant("ours-streams", _OURS_LATENCY_LOCAL, params={"producer": "same-process"}),
         Variant("ours-streams", _OURS_LATENCY_REMOTE, params={"producer": "other-process"})),
        {"tiny": {"n_records": 30, "commit_interval_ms": 1}, "quick": {"n_records": 300, "commit_interval_ms": 1},
         "full": {"n_records": 3_000, "commit_interval_ms": 1}},
        latency="1-record transaction written -> its output update readable", unit="records/s",
    ),
    Scenario(
        "streams", "recovery", "Recovery after SIGKILL with large state", "recovery",
        "An app keeps the latest 1 KiB value per key (state_mb of state in its store), is SIGKILLed while "
        "processing more input, and is restarted: time from the restart (process start included) to its first "
        "new output. Afterwards every key's output must be there exactly once.",
        (Variant("ours-streams", _OURS_STREAMS),),
        {"tiny": {"state_mb": 2}, "quick": {"state_mb": 16}, "full": {"state_mb": 1024}},
        unit="restarts/s", timeouts={"tiny": 180, "quick": 300, "full": 7200},
    ),
    Scenario(
        "streams", "scale_out", "Scale-out: the windowed count in 2 processes vs 1", "scale_out",
        "The windowed count's N events keyed by page on 2 partitions (no repartition: 2 independent tasks), "
        "run until idle by 1 instance, or by 2 instances of the app in 2 processes that split the tasks through "
        "their leases. Rate = N / wall time from the first start to the last exit. Every output is checked "
        "against the reference computed per partition (a task's stream time is its partition's).",
        (Variant("ours-streams", _OURS_SCALE_1, params={"processes": 1}),
         Variant("ours-streams", _OURS_SCALE_2, params={"processes": 2})),
        {"tiny": {"n_events": 3_000, "seed": 12}, "quick": {"n_events": 30_000, "seed": 12},
         "full": {"n_events": 1_000_000, "seed": 12}},
        unit="events/s", timeouts={"tiny": 180, "quick": 300, "full": 1800},
    ),
    Scenario(
        "streams", "rebalance", "Rebalance after SIGKILL: first output from a moved task", "rebalance",
        "Two instances of one app (2 input partitions, one task each, in their own processes, leases of "
        "lease_ms) run; one is SIGKILLed and a probe record is written to its task's input partition at once: "
        "time from the kill to the probe's output through the survivor (it must see the dead member, take the "
        "expired lease, open the task at its last commit). Every record's output must be there exactly once.",
        (Variant("ours-streams", _OURS_REBALANCE),),
        {"tiny": {"lease_ms": 1_000}, "quick": {"lease_ms": 2_000}, "full": {"lease_ms": 5_000}},
        unit="rebalances/s", timeouts={"tiny": 180, "quick": 300, "full": 600},
    ),
    Scenario(
        "streams", "table_join", "Stream–table join, exactly-once", "table_join",
        "N events joined with a table of N/10 rows (all rows written first; ~9% of the events have no row "
        "and are dropped by the inner join), output [n, tier] per joined event, exactly-once and durable. "
        "Ours: b.table() + stream.join(); Bytewax: its join operator with state (insert last, emit running), "
        "recovery with 1-s snapshots. Each in its own child process (rate = N / wall time, start-up included); "
        "the output is checked against a plain-Python reference or the run FAILS.",
        (Variant("ours-streams-join", _OURS_JOIN), Variant("bytewax-join", _BYTEWAX_JOIN)),
        {"tiny": {"n_events": 3_000, "n_rows": 300}, "quick": {"n_events": 30_000, "n_rows": 3_000},
         "full": {"n_events": 1_000_000, "n_rows": 100_000}},
        unit="events/s", timeouts={"tiny": 180, "quick": 300, "full": 1800},
    ),
    Scenario(
        "streams", "sliding_windows", "Sliding windows: 60-s windows over 100, 1k and 10k keys", "sliding",
        "count over 60-s SlidingWindows per key (issue 21: 8,000 records over 100 keys took 255 s when a new "
        "window scanned the records of every key), against 60-s tumbling TimeWindows on the same input. "
        "N records in time order, every key getting one record every 10 s (so a sliding window holds up to 7 "
        "records whatever the number of keys; issue 21's case: 8,000 records over 100 keys, one every 100 ms, "
        "at every size), written before the timed run; rate = N / the time of "
        "App.run(until_idle=True), exactly-once, durable, every update to an output stream. Every window's "
        "count is checked against a brute-force reference or the run FAILS.",
        tuple(Variant("ours-streams-sliding", f"ours, {kind} windows, {keys:,} keys",
                      params={"keys": keys, "windows": kind})
              for keys in (100, 1_000, 10_000) for kind in ("sliding", "tumbling"))
        + tuple(Variant("ours-streams-sliding", f"ours, {kind} windows, issue 21's case (100 keys, 8,000 records)",
                        params={"keys": 100, "windows": kind, "n_records": 8_000})
                for kind in ("sliding", "tumbling")),
        {"tiny": {"n_records": 2_000}, "quick": {"n_records": 20_000}, "full": {"n_records": 100_000}},
        unit="records/s", timeouts={"tiny": 180, "quick": 300, "full": 1800},
    ),
)

STREAMS_GOALS = (
    Goal("windowed_count", ">= 3x Bytewax (recovery on)", _OURS_STREAMS, "Bytewax 0.21, recovery, 1-s snapshots",
         at_least=3.0),
    Goal("windowed_count", "through one tstreams serve >= 0.5x embedded", "ours through one tstreams serve",
         _OURS_STREAMS, at_least=0.5),
    Goal("windowed_count", "through a 3-node cluster >= 0.3x embedded", "ours through a 3-node cluster",
         _OURS_STREAMS, at_least=0.3),
    Goal("windowed_count", ">= 2x Pathway (1 thread)", _OURS_STREAMS, "Pathway, exactly_once_behavior, 1 thread",
         at_least=2.0),
    Goal("windowed_count", ">= 2x Pathway (2 threads)", _OURS_STREAMS, "Pathway, exactly_once_behavior, 2 threads",
         at_least=2.0),
    Goal("windowed_count", ">= 0.3x the plain-Python floor (orjson, the serde's parser)", _OURS_STREAMS,
         "plain Python, orjson", at_least=0.3),
    Goal("windowed_count", "vs the plain-Python floor with stdlib json (informational)", _OURS_STREAMS,
         "plain Python, stdlib json"),
    Goal("windowed_count", "peak RSS <= Bytewax + 30 MB", _OURS_STREAMS, "Bytewax 0.21, recovery, 1-s snapshots",
         metric="job_peak_rss_mb", difference=True, at_most=30.0, unit="MB"),
    Goal("windowed_count", ">= 50,000 events/s (kstream's claim)", _OURS_STREAMS, at_least=50_000,
         unit="items/s"),
    Goal("windowed_count", "value seals cost <= 10% (>= 0.9x the same values without checksum)", _OURS_STREAMS,
         "ours, values without checksum", at_least=0.9),
    Goal("latency", "p99 <= 2 ms, producer in the app's process", _OURS_LATENCY_LOCAL, metric="p99_ms",
         at_most=2.0, unit="ms"),
    Goal("latency", "p99 <= 5 ms, producer in another process", _OURS_LATENCY_REMOTE, metric="p99_ms",
         at_most=5.0, unit="ms"),
    Goal("recovery", "first output <= 1 s after restart (full size: 1 GiB of state)", _OURS_STREAMS,
         metric="seconds", at_most=1.0, unit="s"),
    Goal("scale_out", ">= 1.6x the 1-process run on 2 cores", _OURS_SCALE_2, _OURS_SCALE_1, at_least=1.6),
    Goal("rebalance", "first output from the moved task <= lease + 1 s", _OURS_REBALANCE,
         metric="over_lease_s", at_most=1.0, unit="s"),
    Goal("table_join", ">= 10x Bytewax's join (recovery on)", _OURS_JOIN, _BYTEWAX_JOIN, at_least=10.0),
    Goal("sliding_windows", "issue 21's case: 8,000 records over 100 keys under 1 s (>= 8,000 records/s)",
         "ours, sliding windows, issue 21's case (100 keys, 8,000 records)", at_least=8_000, unit="records/s"),
    Goal("sliding_windows", "10k keys >= 0.5x 100 keys (the cost per record does not grow with keys)",
         "ours, sliding windows, 10,000 keys", "ours, sliding windows, 100 keys", at_least=0.5),
    Goal("sliding_windows", "sliding vs tumbling, 10k keys (informational)",
         "ours, sliding windows, 10,000 keys", "ours, tumbling windows, 10,000 keys"),
)

# --- cluster catch-up: an empty node joins a leader holding N MiB (benchmarks/systems/cluster_catchup.py) ----
CATCHUP_SCENARIOS = (
    Scenario(
        "cluster-catchup", "catchup", "Catch-up of an empty node by snapshot", "catchup",
        "A new node with an empty data directory joins a leader holding N MiB and receives a streamed hot "
        "snapshot of its LMDB environment (transfer, fsync, swap; timed by the node), against LMDB's own "
        "env.copy(compact=True) of the same environment to local disk plus an fsync.",
        (Variant("cluster-catchup", "ours: empty node catch-up (snapshot)", method="catchup"),
         Variant("cluster-catchup", "LMDB env.copy to local disk", method="env_copy")),
        {"tiny": {"size_mib": 4}, "quick": {"size_mib": 20}, "full": {"size_mib": 1024}},
        unit="MiB/s", isolation="shared",
    ),
)

CATCHUP_GOALS = (
    Goal("catchup", "empty-node catch-up >= 0.6x LMDB env.copy to local disk",
         "ours: empty node catch-up (snapshot)", "LMDB env.copy to local disk", at_least=0.6),
)

# --- cluster: assembled from parts, one module per figure group ---------------------------------
#: Modules that add scenarios and goals to the ``cluster`` suite, each with a ``part()``
#: function returning ``(scenarios, goals)``; a module that does not exist (yet) is skipped.
CLUSTER_PARTS = ("benchmarks.cluster",)  # the catch-up figure is its own suite, ``cluster-catchup``


def _assemble(modules: tuple[str, ...]) -> tuple[tuple[Scenario, ...], tuple[Goal, ...]]:
    scenarios: list[Scenario] = []
    goals: list[Goal] = []
    for name in modules:
        if importlib.util.find_spec(name) is None:
            continue
        sc, gl = importlib.import_module(name).part()
        scenarios += sc
        goals += gl
    return tuple(scenarios), tuple(goals)


CLUSTER_SCENARIOS, CLUSTER_GOALS = _assemble(CLUSTER_PARTS)

SUITES: dict[str, tuple[tuple[Scenario, ...], tuple[Goal, ...]]] = {
    "peers": (PEER_SCENARIOS, PEER_GOALS),
    "engine": (ENGINE_SCENARIOS, ENGINE_GOALS),
    "net": (NET_SCENARIOS, NET_GOALS),
    "spark": (SPARK_SCENARIOS, SPARK_GOALS),
    "streams": (STREAMS_SCENARIOS, STREAMS_GOALS),
    "cluster-catchup": (CATCHUP_SCENARIOS, CATCHUP_GOALS),
    "cluster": (CLUSTER_SCENARIOS, CLUSTER_GOALS),
    "aio": _assemble(("benchmarks.aio",)),
    "queues": _assemble(("benchmarks.queues",)),
    "schedules": _assemble(("benchmarks.schedules",)),
}
SCENARIOS = PEER_SCENARIOS
BY_ID = {s.id: s for s in PEER_SCENARIOS}
