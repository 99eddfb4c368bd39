"""The page-views pipeline of ``kill_worker.py`` (run by the kill and the scale-out tests):
its input, the model of its output, and the check of the output and stores against it."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.streams import Windowed
from tstreams_embedded.streams.records import partition_of
from tstreams_embedded.streams.serdes import MsgpackSerde, WindowedSerde, serde
from tstreams_embedded.streams.stores import ReadOnlyKeyValueStore, ReadOnlyWindowStore, namespace

from .harness import envelope_transactions, read_envelopes

KEY_SERDE, VALUE_SERDE = serde("str"), serde("json")
RECORDS_PER_TRANSACTION = 5


def make_events(rng: random.Random, n: int, pages: list[str], users: list[str]) -> list[dict[str, Any]]:
    """Page views with disorder of up to 40 ms (some late: grace is 20 ms)."""
    return [{"page": rng.choice(pages), "user": rng.choice(users), "n": i, "ts": i * 7 - rng.randint(0, 40)}
            for i in range(n)]


def views_input(events: list[dict[str, Any]], partitions: int) -> tuple[list[O.Operation],
                                                                          dict[int, list[dict[str, Any]]]]:
    """The transactions of stream "views" (keyed by page), and the events per partition."""
    by_partition: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_partition[partition_of(KEY_SERDE.serialize(e["page"]), partitions)].append(e)
    ops = envelope_transactions("views", ((KEY_SERDE.serialize(e["page"]), VALUE_SERDE.serialize(e), e["ts"])
                                          for e in events), partitions, RECORDS_PER_TRANSACTION)
    return ops, by_partition


def model(events_by_partition: dict[int, list[dict[str, Any]]]) -> tuple[dict[Windowed, int], list[Windowed]]:
    """Per input partition (one task each; the windowed count needs no repartition): the
    windows' counts of accepted records and the closed windows."""
    counts: dict[Windowed, int] = {}
    closed: list[Windowed] = []
    for events in events_by_partition.values():
        observed = None
        mine: dict[Windowed, int] = {}
        for e in events:
            if e["page"] == "/health":
                continue
            t = e["ts"]
            observed = t if observed is None else max(observed, t)
            start = t - t % 100
            if start + 100 + 20 > observed:
                w = Windowed(e["page"], start, start + 100)
                mine[w] = mine.get(w, 0) + 1
        counts.update(mine)
        assert observed is not None
        closed.extend(w for w in mine if w.end + 20 <= observed)
    return counts, closed


def expected_totals(events: list[dict[str, Any]]) -> dict[str, int]:
    """The store "totals": the sum of ``n`` per user, health checks left out."""
    totals: dict[str, int] = defaultdict(int)
    for e in events:
        if e["page"] != "/health":
            totals[e["user"]] += e["n"]
    return dict(totals)


def totals_store(engine: ts.Engine, application_id: str, partitions: int) -> ReadOnlyKeyValueStore:
    return ReadOnlyKeyValueStore(engine.backend, [namespace(application_id, p, "totals") for p in range(partitions)],
                                 KEY_SERDE, MsgpackSerde())


def check_output(engine: ts.Engine, application_id: str, partitions: int, events: list[dict[str, Any]],
                 by_partition: dict[int, list[dict[str, Any]]]) -> None:
    """Stream "out" holds each closed window once with its exact count, the store "counts"
    every window's count, the store "totals" the sums: no missing, no duplicate, no wrong."""
    counts, closed = model(by_partition)
    windowed_key = WindowedSerde(KEY_SERDE)
    out = [(windowed_key.deserialize(kb), MsgpackSerde().deserialize(vb))  # type: ignore[arg-type]
           for kb, vb, _, _ in read_envelopes(engine, "out")]
    assert len(out) == len(set(w for w, _ in out)), "a window was emitted twice"
    assert sorted(out, key=repr) == sorted(((w, counts[w]) for w in closed), key=repr)
    windows = ReadOnlyWindowStore(engine.backend, [namespace(application_id, p, "counts") for p in range(partitions)],
                                  KEY_SERDE, MsgpackSerde())
    assert windows.all() == counts
    assert totals_store(engine, application_id, partitions).all() == expected_totals(events)
