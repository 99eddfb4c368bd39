"""The streams benchmark's job: its events, the reference result and the exact check.

Every system of the ``streams`` suite runs the same job on the same input file: count page
views per page in 5-minute tumbling event-time windows with 10 s of grace, final results
only. This module is stdlib-only (the Pathway job imports it from its own interpreter).

* :func:`generate` writes the events as JSON lines, deterministically from a seed: pages
  drawn with a Zipf-like skew, event times spread over ``span_s`` seconds with up to
  ``MAX_DISORDER_MS`` of disorder (within grace), a few events far behind stream time (late
  under every system's rule), and a last event far ahead that closes every earlier window.
* :func:`reference` computes the expected final windows in plain Python, with Kafka-Streams
  semantics (stream time = the largest event time seen; a window closes when stream time
  reaches end + grace; a record of a closed window is dropped as late). It also checks that
  per-record watermark rules (late when ts < largest ts - grace, over the whole input or,
  as Bytewax's per-key clocks do, per page) drop exactly the same records, so every system
  has one right answer.
* :func:`check` compares a system's output with the reference and raises
  :class:`ResultMismatch` (missing, duplicated, wrong or unexpected windows) instead of
  letting a wrong run report a number.
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

SIZE_MS = 300_000
"""Tumbling window size: 5 minutes."""
GRACE_MS = 10_000
"""Grace period: 10 seconds."""
MAX_DISORDER_MS = 5_000
"""How far behind the newest event an on-time event may be (within grace for every rule)."""
LATE_MIN_MS, LATE_MAX_MS = 400_000, 900_000
"""How far behind stream time a late event is: its window closed long before."""
BASE_MS = 1_793_491_200_000
"""Event time of the first event: 2026-11-01T00:00:00Z."""

WindowKey = tuple[str, int]
"""(page, window start in epoch ms)."""


class ResultMismatch(AssertionError):
    """A system's final windows differ from the reference: the run is wrong, not slow."""


@dataclass(frozen=True)
class EventSpec:
    """What to generate: ``n_events`` (the last one closes every earlier window) over
    ``span_s`` seconds of event time, ``pages`` distinct pages, ``n_late`` late events."""

    n_events: int
    seed: int = 12
    pages: int = 1000
    span_s: int = 3 * 3600
    n_late: int = 10


@dataclass
class Expected:
    """The reference result of one input file."""

    windows: dict[WindowKey, int]
    """Final count of every window closed by the end of the input."""
    open_at_end: set[WindowKey] = field(default_factory=set)
    """Windows still open when the input ends (a system may or may not flush them)."""
    late: int = 0
    """Events dropped as late."""
    events: int = 0
    stream_time_ms: int = 0


def page_name(i: int) -> str:
    return f"/page/{i}"


def generate(path: str | Path, spec: EventSpec) -> int:
    """Write ``spec.n_events`` events as JSON lines to ``path``; returns the number written.

    An event is ``{"page": "/page/17", "user": "u123", "ts": <epoch ms>}``.
    """
    if spec.n_events < 2:
        raise ValueError("n_events must be >= 2")
    rng = random.Random(spec.seed)
    weights = list(itertools.accumulate(1.0 / (i + 1) ** 0.8 for i in range(spec.pages)))
    pages = [page_name(i) for i in range(spec.pages)]
    n_real = spec.n_events - 1
    step = spec.span_s * 1000 / n_real
    # late events only once stream time is far enough past the first window
    first_late = int(n_real * 0.2)
    late_at = {first_late + (n_real - first_late) * (k + 1) // (spec.n_late + 1) for k in range(spec.n_late)}
    max_ts = BASE_MS
    page = pages[0]
    with open(path, "w", encoding="utf-8") as f:
        write = f.write
        for i in range(n_real):
            clock = BASE_MS + int(i * step)
            if i in late_at:
                # on the page just seen, so that a per-key watermark (Bytewax) drops it too
                ts = max_ts - rng.randint(LATE_MIN_MS, LATE_MAX_MS)
            else:
                page = pages[bisect.bisect_left(weights, rng.random() * weights[-1])]
                ts = max(BASE_MS, clock - rng.randint(0, MAX_DISORDER_MS)) if rng.random() < 0.3 else clock
            max_ts = max(max_ts, ts)
            write(f'{{"page": "{page}", "user": "u{rng.randrange(100_000)}", "ts": {ts}}}\n')
        # the last event closes every window of the events before it
        write(f'{{"page": "{pages[0]}", "user": "u0", "ts": {max_ts + SIZE_MS + GRACE_MS + 60_000}}}\n')
    return spec.n_events


def window_start(ts: int) -> int:
    return ts - ts % SIZE_MS


def reference(path: str | Path) -> Expected:
    """The expected final windows of the events in ``path`` (see the module docstring)."""
    counts: dict[WindowKey, int] = {}
    stream_time = -1
    page_time: dict[str, int] = {}
    late = late_by_watermark = late_by_key = n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            event = json.loads(line)
            ts, page = event["ts"], event["page"]
            n += 1
            if stream_time >= 0 and ts < stream_time - GRACE_MS:
                late_by_watermark += 1
            if ts < page_time.get(page, ts) - GRACE_MS:
                late_by_key += 1
            page_time[page] = max(page_time.get(page, ts), ts)
            stream_time = max(stream_time, ts)
            start = window_start(ts)
            if start + SIZE_MS + GRACE_MS <= stream_time:
                late += 1
                continue
            counts[(page, start)] = counts.get((page, start), 0) + 1
    if not late == late_by_watermark == late_by_key:
        raise ResultMismatch(f"generator bug: {late} events late by window close, {late_by_watermark} by "
                             f"watermark, {late_by_key} by per-key watermark; the systems would disagree")
    closed = {k: c for k, c in counts.items() if k[1] + SIZE_MS + GRACE_MS <= stream_time}
    return Expected(closed, set(counts) - set(closed), late, n, stream_time)


def check(expected: Expected, rows: Iterable[tuple[str, int, int]], system: str) -> int:
    """Compare ``rows`` (page, window start ms, count) with ``expected``; returns the number of
    closed windows checked, or raises :class:`ResultMismatch` describing what is wrong."""
    seen: dict[WindowKey, int] = {}
    duplicated: list[WindowKey] = []
    for page, start, count in rows:
        key = (str(page), int(start))
        if key in seen:
            duplicated.append(key)
        seen[key] = int(count)
    got = {k: c for k, c in seen.items() if k not in expected.open_at_end}
    missing = sorted(set(expected.windows) - set(got))
    extra = sorted(set(got) - set(expected.windows))
    wrong = sorted(k for k in set(got) & set(expected.windows) if got[k] != expected.windows[k])
    if missing or extra or wrong or duplicated:
        def sample(keys: list[WindowKey]) -> str:
            return ", ".join(f"{p}@{s}: got {got.get((p, s))}, want {expected.windows.get((p, s))}"
                             for p, s in keys[:3])

        raise ResultMismatch(
            f"{system}: output differs from the reference ({len(expected.windows)} windows): "
            f"{len(missing)} missing [{sample(missing)}], {len(extra)} unexpected [{sample(extra)}], "
            f"{len(wrong)} wrong [{sample(wrong)}], {len(duplicated)} duplicated {duplicated[:3]}")
    return len(expected.windows)
