"""The five peer scenarios and their sizes per mode (100-byte items, durable settings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Scenario:
    """One scenario: ``method`` names the ``setup_<method>``/``run_<method>`` pair of a system."""

    id: str
    title: str
    method: str
    description: str
    latency: str | None
    sizes: dict[str, dict[str, Any]] = field(default_factory=dict)
    unit: str = "items/s"

    def params(self, mode: str) -> dict[str, Any]:
        return dict(self.sizes[mode])


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "produce", "1. Produce, 100-item transactions", "produce",
        "One producer writes 100-byte items in durable transactions of 100 items.",
        "commit of one 100-item transaction",
        {"tiny": {"n_items": 300, "batch": 100}, "quick": {"n_items": 30_000, "batch": 100},
         "full": {"n_items": 300_000, "batch": 100}},
    ),
    Scenario(
        "concurrent", "2. Produce 1-item transactions, 8 threads", "concurrent",
        "8 threads write durable 1-item transactions to one partition (client/server systems: one "
        "connection per thread; embedded: one producer per thread).",
        "one 1-item transaction",
        {"tiny": {"threads": 8, "per_thread": 5}, "quick": {"threads": 8, "per_thread": 250},
         "full": {"threads": 8, "per_thread": 2000}},
    ),
    Scenario(
        "consume", "3. Consume, offset commit every 100 items", "consume",
        "A consumer reads a pre-loaded backlog 100 items at a time and durably commits its offset "
        "after each 100 items.",
        "read 100 items + durable offset commit",
        {"tiny": {"n_items": 300, "batch": 100}, "quick": {"n_items": 30_000, "batch": 100},
         "full": {"n_items": 300_000, "batch": 100}},
    ),
    Scenario(
        "exactly_once", "4. Exactly-once read-transform-write", "exactly_once",
        "Read 100 items, transform them, write them to an output stream and commit the input offset in "
        "one atomic durable write (Redis MULTI/EXEC with the offset in a key, SQLite one transaction, "
        "LMDB one write transaction, ours CheckpointGroup).",
        "one read-transform-write batch of 100 items",
        {"tiny": {"n_items": 300, "batch": 100}, "quick": {"n_items": 20_000, "batch": 100},
         "full": {"n_items": 200_000, "batch": 100}},
    ),
    Scenario(
        "many_streams", "5. Many streams, 1 transaction each", "many_streams",
        "Create N streams with one 1-item transaction each, 1000 streams per durable commit/pipeline. "
        "Reports time, disk bytes and memory per stream.",
        None,
        {"tiny": {"n_streams": 2_000, "batch": 1000}, "quick": {"n_streams": 100_000, "batch": 1000},
         "full": {"n_streams": 1_000_000, "batch": 1000}},
        unit="streams/s",
    ),
)  # fmt: skip

BY_ID = {s.id: s for s in SCENARIOS}
