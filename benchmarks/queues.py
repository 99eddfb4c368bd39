"""The ``queues`` suite (issue 22 §2): receive + acknowledge of 100-byte items, durable,
against Redis Streams consumer groups and a SQLite table queue.

``python -m benchmarks --suite queues [--quick]`` writes ``results/queues.{json,md}``.
Goal: ours >= 1.5x Redis ``XREADGROUP``/``XACK`` with ``appendfsync always``; Redis
``everysec`` (not durable per ack) and SQLite are reported beside it. Ours twice: acks in
their own write (two durable writes per batch) and acks riding on the next receive
(``receive(commit_staged=True)``: one durable write per batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.scenarios import Goal, Scenario

BATCH = 100
RIDING = "ours: work_queue, acks riding on the next receive (sync)"
_ITEMS = {"tiny": 1_000, "quick": 20_000, "full": 100_000}


def part() -> tuple[tuple[Scenario, ...], tuple[Goal, ...]]:
    from benchmarks.scenarios import Goal, Scenario, Variant

    sizes = {mode: {"n_items": n, "batch": BATCH} for mode, n in _ITEMS.items()}
    scenarios = (
        Scenario(
            "queues", "queue_receive_ack", f"Work queue: receive {BATCH} + ack, durable", "queue",
            f"A backlog of 100-byte items consumed by one competing consumer: receive up to {BATCH} items, "
            f"acknowledge them in one write, repeat. Ours: engine.work_queue (durability sync; a receive and "
            f"an ack commit are each one durable write; 'riding': the batch's acks are staged and written in "
            f"the same durable write as the next receive, receive(commit_staged=True)). "
            f"Redis: XREADGROUP COUNT {BATCH} + one XACK per batch. "
            f"SQLite: claim rows with UPDATE ... RETURNING, ack with DELETE, WAL + synchronous=FULL.",
            (Variant("ours-queue", "ours: work_queue (sync)"),
             Variant("ours-queue", RIDING, params={"acks": "riding"}),
             Variant("redis-queue-always", "Redis consumer group (AOF always)"),
             Variant("redis-queue-everysec", "Redis consumer group (AOF everysec)"),
             Variant("sqlite-queue", "SQLite table queue (WAL, FULL)")),
            sizes, latency=f"one receive of {BATCH} + its ack",
        ),
    )
    goals = (
        Goal("queue_receive_ack", "acks riding on the next receive: ours >= 1.5x Redis XREADGROUP/XACK, "
             "appendfsync always", RIDING, "Redis consumer group (AOF always)", at_least=1.5),
        Goal("queue_receive_ack", "acks riding on the next receive vs Redis, appendfsync everysec (informational)",
             RIDING, "Redis consumer group (AOF everysec)"),
        Goal("queue_receive_ack", "acks riding on the next receive vs a SQLite table queue (informational)",
             RIDING, "SQLite table queue (WAL, FULL)"),
        Goal("queue_receive_ack", "ours >= 1.5x Redis Streams XREADGROUP/XACK, appendfsync always",
             "ours: work_queue (sync)", "Redis consumer group (AOF always)", at_least=1.5),
        Goal("queue_receive_ack", "ours vs Redis, appendfsync everysec (informational: not durable per ack)",
             "ours: work_queue (sync)", "Redis consumer group (AOF everysec)"),
        Goal("queue_receive_ack", "ours vs a SQLite table queue (informational)",
             "ours: work_queue (sync)", "SQLite table queue (WAL, FULL)"),
    )
    return scenarios, goals
