"""The anonymous resident memory of a process, and its trend (the memory tests of streams apps)."""

from __future__ import annotations

from pathlib import Path

MB = 1_000_000


def anon_rss(pid: int) -> int:
    """The anonymous resident memory of process ``pid`` (``RssAnon``: its heap, not the file
    pages of LMDB's map), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no RssAnon in /proc/{pid}/status")


def slope_mb_per_min(samples: list[tuple[float, int]]) -> float:
    """The least-squares slope of ``(seconds, bytes)`` samples, MB per minute."""
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    cov = sum((t - mt) * (r - mr) for t, r in samples)
    var = sum((t - mt) ** 2 for t, _ in samples)
    return cov / var * 60 / MB
