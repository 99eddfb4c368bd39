"""The stream–table join benchmark's input, reference and exact check (stdlib only).

``n_rows`` table rows ``{"user": "u<i>", "tier": "gold" | "silver" | …}`` (user ``u<i>`` for
``i < n_rows``), then ``n_events`` events ``{"n": <seq>, "user": "u<j>", "amount": …}`` whose
users are drawn uniformly from ``1.1 × n_rows`` ids, so about 9% have no row (an inner join
drops them). Every row is written before the first event, so under stream–table semantics
every event sees its row's final value: the expected output is ``[n, tier]`` for each event
whose user has a row.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TIERS = ("bronze", "silver", "gold", "platinum")


class JoinMismatch(AssertionError):
    """A system's join output differs from the reference: the run is wrong, not slow."""


def generate(directory: Path, n_events: int, n_rows: int, seed: int = 13) -> tuple[Path, Path, Path]:
    """Write ``rows.jsonl``, ``events.jsonl`` and ``combined.jsonl`` (rows, then events, each
    line tagged ``"side": "row" | "event"``); returns their paths."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    rows_path, events_path, combined_path = (directory / f"{name}-{n_events}-{n_rows}-{seed}.jsonl"
                                             for name in ("rows", "events", "combined"))
    rows = [{"user": f"u{i}", "tier": TIERS[rng.randrange(len(TIERS))]} for i in range(n_rows)]
    ids = max(1, n_rows * 11 // 10)
    events = [{"n": n, "user": f"u{rng.randrange(ids)}", "amount": rng.randint(1, 500)} for n in range(n_events)]
    with open(rows_path, "w") as r, open(events_path, "w") as e, open(combined_path, "w") as c:
        for row in rows:
            r.write(json.dumps(row) + "\n")
            c.write(json.dumps({"side": "row", **row}) + "\n")
        for ev in events:
            e.write(json.dumps(ev) + "\n")
            c.write(json.dumps({"side": "event", **ev}) + "\n")
    return rows_path, events_path, combined_path


def reference(rows_path: Path, events_path: Path) -> list[tuple[int, str]]:
    """The expected ``(n, tier)`` of every joined event, by ``n``."""
    with open(rows_path) as f:
        tiers = {row["user"]: row["tier"] for row in map(json.loads, f)}
    out = []
    with open(events_path) as f:
        for ev in map(json.loads, f):
            tier = tiers.get(ev["user"])
            if tier is not None:
                out.append((ev["n"], tier))
    return out


def check(expected: list[tuple[int, str]], got: list[tuple[int, str]], who: str) -> int:
    """Raise :class:`JoinMismatch` unless ``got`` holds exactly the expected pairs (any order)."""
    got_sorted = sorted(got)
    if got_sorted != expected:
        seen = {n for n, _ in got_sorted}
        missing = sum(1 for n, _ in expected if n not in seen)
        raise JoinMismatch(f"{who}: {len(got)} join results, {len(expected)} expected "
                           f"({missing} missing, {len(got) - len(set(got))} duplicated)")
    return len(got)
