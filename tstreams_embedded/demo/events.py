"""Page-view events for the demo: realistic enough to aggregate, deterministic per seed.

Events are JSON objects ``{"user", "page", "event_time", "referrer", "device"}`` with
``event_time`` an ISO-8601 UTC timestamp. They cover ``span`` seconds of event time and are
produced in event-time order with a bounded jitter (events arrive up to ``max_lateness``
seconds late, less than the job's watermark delay, so none are dropped as too late).
Popularity follows a Zipf-like law over pages and users.
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import json
import random
from collections import Counter
from collections.abc import Iterable, Iterator

PAGES = (
    ["/", "/search", "/cart", "/checkout", "/login", "/account", "/help", "/about"]
    + [f"/products/{i}" for i in range(1, 25)]
    + [f"/blog/{slug}" for slug in ("launch", "lmdb-internals", "exactly-once", "spark-streaming",
                                    "watermarks", "t-streams", "benchmarks", "roadmap")]
)
REFERRERS = ["direct", "google", "newsletter", "twitter", "partner", "ads"]
DEVICES = ["desktop", "mobile", "tablet"]
FLUSH_PAGE = "__flush__"
WINDOW_SECONDS = 300


def _zipf_cdf(n: int, s: float) -> list[float]:
    weights = list(itertools.accumulate(1.0 / (k ** s) for k in range(1, n + 1)))
    return [w / weights[-1] for w in weights]


def generate(n: int, start: dt.datetime, span: float = 3600.0, users: int = 5000, seed: int = 7,
             max_lateness: float = 45.0) -> Iterator[dict]:
    """``n`` page-view events in arrival order (see the module docstring)."""
    rng = random.Random(seed)
    page_cdf = _zipf_cdf(len(PAGES), 1.1)
    user_cdf = _zipf_cdf(users, 0.8)
    base = start.timestamp()
    for i in range(n):
        arrival = base + span * i / n
        when = max(base, arrival - rng.random() * max_lateness)
        page = PAGES[bisect.bisect_left(page_cdf, rng.random())]
        user = bisect.bisect_left(user_cdf, rng.random())
        yield {
            "user": f"u{user:05d}",
            "page": page,
            "event_time": _iso(when),
            "referrer": REFERRERS[rng.randrange(len(REFERRERS))],
            "device": DEVICES[min(2, int(rng.random() ** 2 * 3))],
        }


def flush_event(after: dt.datetime) -> dict:
    """A marker event far past the data: it moves the watermark beyond every real window so
    Spark emits the final windows (append mode emits a window only once it is closed)."""
    return {"user": "-", "page": FLUSH_PAGE, "event_time": _iso(after.timestamp()), "referrer": "-", "device": "-"}


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def encode(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def window_of(event_time: str) -> str:
    """The start (ISO, UTC) of the 5-minute tumbling window holding ``event_time``."""
    t = dt.datetime.fromisoformat(event_time.replace("Z", "+00:00")).timestamp()
    start = int(t // WINDOW_SECONDS) * WINDOW_SECONDS
    return _iso(start)


def true_counts(raw_events: Iterable[bytes]) -> Counter:
    """``(window_start, page) -> views`` computed directly from raw input items."""
    counts: Counter = Counter()
    for raw in raw_events:
        ev = json.loads(raw)
        if ev["page"] == FLUSH_PAGE:
            continue
        counts[window_of(ev["event_time"]), ev["page"]] += 1
    return counts
