"""Ours: ``tstreams_embedded.streams`` embedded, exactly-once (the default) and durable.

Written against the API of issue 12 (``StreamsBuilder``, ``App``, ``TimeWindows``,
``suppress_until_window_closes``; windowed keys are ``Windowed(key, start, end)``). Three
topologies over the engine directory ``data``:

* ``count``: the job. ``views`` (plain JSON items) -> ``group_by(page)`` -> 5-minute
  ``TimeWindows`` with 10 s grace -> ``count`` -> ``suppress_until_window_closes`` ->
  ``page-counts`` (JSON ``[page, start, count]``);
* ``updates``: the same without suppression (one output update per input record), for the
  latency scenario;
* ``keyed-count``: the ``count`` job on input keyed by page (envelopes; no repartition), for
  the scale-out scenario (each task independent);
* ``state``: ``blobs`` keyed by ``k`` -> ``reduce`` keeping the latest value per key (the
  large state of the recovery scenario) -> ``blob-acks`` (JSON ``[k, seq]`` per update).

``connect`` (a ``ts.connect`` URL) runs the app against a served engine or cluster instead
of the engine directory ``data``. ``mode`` ``run`` processes until idle and exits
(``app.run(until_idle=True)``); ``serve``
starts the app, prints ``READY`` and runs until it is killed (SIGTERM stops it cleanly);
``latency`` starts the app and runs the latency scenario's closed loop in this process
(:func:`benchmarks.streams.output.latency_loop`), then reports every round trip.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

from benchmarks.streams.events import GRACE_MS, SIZE_MS
from benchmarks.streams.jobs import report, spec_from_argv

APPLICATION_ID = {"count": "pageviews", "updates": "pageviews-latency", "state": "blob-state",
                  "keyed-count": "pageviews-keyed"}
STREAMS = {"count": ("views", "page-counts"), "updates": ("views", "page-counts"), "state": ("blobs", "blob-acks"),
           "keyed-count": ("views", "page-counts")}


def topology(kind: str) -> Any:
    from tstreams_embedded.streams import StreamsBuilder, TimeWindows

    b = StreamsBuilder()
    source, sink = STREAMS[kind]
    if kind == "state":
        latest = (b.stream(source, value_serde="json")
                  .group_by(lambda _k, v: v["k"])
                  .reduce(lambda _old, new: new, store="blobs"))
        latest.to_stream().map(lambda k, v: (k, [k, v["seq"]])).to(sink, value_serde="json")
        return b.build()
    if kind == "keyed-count":  # input keyed by page (no repartition): tasks are independent
        keyed = (b.stream(source, key_serde="str", value_serde="json", timestamp=lambda _k, v: v["ts"])
                 .group_by_key(key_serde="str")
                 .windowed_by(TimeWindows(size_ms=SIZE_MS, grace_ms=GRACE_MS))
                 .count(store="views-per-page")
                 .suppress_until_window_closes())
        keyed.to_stream().map(lambda wk, n: (wk.key, [wk.key, wk.start, n])).to(sink, key_serde="str",
                                                                               value_serde="json")
        return b.build()
    counts = (b.stream(source, value_serde="json", timestamp=lambda _k, v: v["ts"])
              .group_by(lambda _k, v: v["page"])
              .windowed_by(TimeWindows(size_ms=SIZE_MS, grace_ms=GRACE_MS))
              .count(store="views-per-page"))
    if kind == "count":
        counts = counts.suppress_until_window_closes()
    counts.to_stream().map(lambda wk, n: (wk.key, [wk.key, wk.start, n])).to(sink, value_serde="json")
    return b.build()


def app_options(spec: dict[str, Any]) -> dict[str, Any]:
    # a static member: a restart (the recovery scenario) succeeds its killed predecessor at
    # once instead of waiting for its task leases to expire
    options: dict[str, Any] = {"processing": spec.get("processing", "exactly_once"),
                               "static_id": str(spec.get("static_id", "bench-0"))}
    if spec.get("commit_interval_ms") is not None:
        options["commit_interval_ms"] = int(spec["commit_interval_ms"])
    if spec.get("num_threads") is not None:
        options["num_threads"] = int(spec["num_threads"])
    if spec.get("lease_ms") is not None:
        options["lease_ms"] = int(spec["lease_ms"])
    return options


def run(spec: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    import tstreams_embedded as ts
    from tstreams_embedded.streams import App

    if spec.get("values_unsealed"):  # the baseline of the value-seal cost (benchmarks/systems/ours.py)
        from benchmarks.systems.ours import switch_off_value_seals

        switch_off_value_seals()

    kind = spec.get("topology", "count")
    opened = ts.connect(spec["connect"], timeout=60) if spec.get("connect") else \
        ts.open(spec["data"], durability=spec.get("durability", "sync"))
    with opened as engine:
        app = App(engine, application_id=APPLICATION_ID[kind], topology=topology(kind), **app_options(spec))
        mode = spec.get("mode", "run")
        if mode == "run":
            app.run(until_idle=True)
            app.close()  # leave the group: another instance still running takes what is left at once
            report(process_seconds=time.perf_counter() - t0)
            return
        if mode == "latency":
            from benchmarks.streams.events import BASE_MS
            from benchmarks.streams.output import OutputReader, latency_loop

            app.start()
            started = time.perf_counter() - t0
            try:
                reader = OutputReader(engine, STREAMS[kind][1])
                seconds, latencies = latency_loop(engine.producer(STREAMS[kind][0], partition=0), reader,
                                                  int(spec["n_records"]), BASE_MS, SIZE_MS)
            finally:
                app.stop()
            report(seconds=seconds, latencies_ns=latencies, start_seconds=started)
            return
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        app.start()
        try:
            report(ready=True, start_seconds=time.perf_counter() - t0)
            sys.stdout.write("READY\n")
            sys.stdout.flush()
            stop.wait()
        finally:
            app.stop()


if __name__ == "__main__":
    run(spec_from_argv())
