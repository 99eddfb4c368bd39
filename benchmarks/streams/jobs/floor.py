"""The floor: plain single-threaded Python, no durability.

Parse each JSON line (stdlib ``json`` or ``orjson``), count in a dict per window, keep
stream time, and emit each window once when stream time passes its end + grace. Late
records (their window already emitted) are dropped and counted. Output: JSON lines
``[page, window start ms, count]``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from benchmarks.streams.events import GRACE_MS, SIZE_MS
from benchmarks.streams.jobs import report, spec_from_argv


def run(spec: dict[str, Any]) -> None:
    if spec.get("parser") == "orjson":
        import orjson

        loads: Any = orjson.loads
    else:
        loads = json.loads
    t0 = time.perf_counter()
    windows: dict[int, dict[str, int]] = {}  # window start -> page -> count
    stream_time = -1
    next_close = None  # the smallest start + size + grace of an open window
    late = emitted = 0
    drop_late = spec.get("drop_late", True)
    with open(spec["input"], "rb") as src, open(spec["output"], "w", encoding="utf-8") as out:
        for line in src:
            event = loads(line)
            ts = event["ts"]
            if ts > stream_time:
                stream_time = ts
                if next_close is not None and stream_time >= next_close:
                    for start in sorted(s for s in windows if s + SIZE_MS + GRACE_MS <= stream_time):
                        for page, count in windows.pop(start).items():
                            out.write(json.dumps([page, start, count]) + "\n")
                            emitted += 1
                    next_close = min(windows) + SIZE_MS + GRACE_MS if windows else None
            start = ts - ts % SIZE_MS
            if start + SIZE_MS + GRACE_MS <= stream_time and drop_late:
                late += 1
                continue
            pages = windows.get(start)
            if pages is None:
                pages = windows[start] = {}
                close = start + SIZE_MS + GRACE_MS
                next_close = close if next_close is None else min(next_close, close)
            page = event["page"]
            pages[page] = pages.get(page, 0) + 1
    report(process_seconds=time.perf_counter() - t0, late=late, emitted=emitted)


if __name__ == "__main__":
    run(spec_from_argv())
