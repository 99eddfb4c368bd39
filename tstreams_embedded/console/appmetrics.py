"""What a stream app's live members answer about themselves: their dropped records by reason.

The engine stores an application's group (members, their tasks, where each answers queries:
:mod:`tstreams_embedded.engine.operator.appgroups`), not its metrics: counters such as
``tstreams_streams_dropped_records_total{app,partition,reason}`` live in each member's
process, served by its interactive-query server at ``GET /metrics``
(:mod:`tstreams_embedded.streams.queries`). :func:`dropped_records` asks a member for
them, bounded: a short timeout, at most :data:`MAX_METRICS_BYTES` of its answer read, and
only the dropped-record lines kept. A member without a query server, or one that does not
answer, has no figures (``error`` says why).
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from typing import Any

#: the family of the members' dropped-record counters (``streams.metrics``)
DROPPED_FAMILY = "tstreams_streams_dropped_records_total"
#: the most of a member's ``/metrics`` answer read (the rest is not looked at)
MAX_METRICS_BYTES = 1 << 20
#: seconds to wait for a member's answer
METRICS_TIMEOUT = 1.0
#: members asked per answer of the apps page, and the seconds all of them may take
MAX_ASKED_MEMBERS = 20
ASK_SECONDS = 2.0

_SAMPLE = re.compile(rf'^{DROPPED_FAMILY}\{{(?P<labels>[^}}]*)\}} (?P<value>\S+)', re.MULTILINE)
_REASON = re.compile(r'(?:^|,)reason="(?P<reason>[^"\\]*)"')


def query_url(host: str | None, port: int | None) -> str | None:
    """The base URL of a member's interactive-query server (``None``: it has none)."""
    if not host or not port:
        return None
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def parse_dropped(text: str) -> dict[str, int]:
    """Reason -> records dropped, summed over the tasks, from Prometheus text."""
    out: dict[str, int] = {}
    for m in _SAMPLE.finditer(text):
        reason = _REASON.search(m["labels"])
        try:
            value = float(m["value"])
        except ValueError:
            continue
        if reason is not None and value == value:  # not NaN
            out[reason["reason"]] = out.get(reason["reason"], 0) + int(value)
    return dict(sorted(out.items()))


def dropped_records(base_url: str, timeout: float = METRICS_TIMEOUT) -> dict[str, Any]:
    """``{"dropped": {reason: count}}`` of the member at ``base_url``, or ``{"error": ...}``."""
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=timeout) as r:
            raw = r.read(MAX_METRICS_BYTES)
            if len(raw) == MAX_METRICS_BYTES:  # cut short: its last line may be too
                raw = raw[: raw.rfind(b"\n") + 1]
            text = raw.decode("utf-8", "replace")
    except (OSError, ValueError) as exc:  # refused, timed out, an HTTP error, a malformed address
        return {"error": f"{base_url}/metrics: {exc}"}
    return {"dropped": parse_dropped(text)}


def ask_members(apps: list[dict[str, Any]]) -> None:
    """Add to each live member of ``apps`` (``dataclasses.asdict`` of
    :class:`~tstreams_embedded.engine.operator.appgroups.AppOverview`) its ``query_url`` and
    ``dropped`` (or ``metrics_error``), and to each application ``dropped``: the sum over
    the members that answered. At most :data:`MAX_ASKED_MEMBERS` members are asked, within
    :data:`ASK_SECONDS` in all; the others get a ``metrics_error`` saying so."""
    asked = 0
    deadline = time.monotonic() + ASK_SECONDS
    for app in apps:
        total: dict[str, int] = {}
        for member in app["members"]:
            url = query_url(member["host"], member["port"])
            member["query_url"] = url
            if not member["live"] or url is None:
                member["dropped"] = None
                member["metrics_error"] = ("expired: its counters went with its process" if not member["live"]
                                           else "no interactive-query server (http_port)")
                continue
            left = deadline - time.monotonic()
            if asked >= MAX_ASKED_MEMBERS or left <= 0:
                member["dropped"], member["metrics_error"] = None, "not asked: the page's bound on members asked"
                continue
            asked += 1
            got = dropped_records(url, min(METRICS_TIMEOUT, left))
            member["dropped"] = got.get("dropped")
            member["metrics_error"] = got.get("error")
            for reason, n in (got.get("dropped") or {}).items():
                total[reason] = total.get(reason, 0) + n
        app["dropped"] = dict(sorted(total.items()))
