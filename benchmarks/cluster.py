"""The ``cluster`` suite's replication and failover figures (one part of the suite).

The suite is assembled in :mod:`benchmarks.scenarios` from the modules named in
``CLUSTER_PARTS``: each defines ``part()``, returning its ``(scenarios, goals)``, and imports
:mod:`benchmarks.scenarios` inside that function only (so either module can be imported
first). This one: durable produce on a 3-node cluster against one node and a replicated
Redis, and failover; :mod:`benchmarks.cluster_catchup` adds the catch-up figure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.scenarios import Goal, Scenario

_PRODUCE = {"tiny": {"n_items": 1_000, "batch": 100}, "quick": {"n_items": 20_000, "batch": 100},
            "full": {"n_items": 200_000, "batch": 100}}
_FAILOVER = {"tiny": {"kills": 1}, "quick": {"kills": 3}, "full": {"kills": 20}}


def part() -> tuple[tuple[Scenario, ...], tuple[Goal, ...]]:
    from benchmarks.scenarios import Goal, Scenario, Variant
    from benchmarks.systems.cluster import SESSION_TIMEOUT

    scenarios = (
        Scenario(
            "cluster", "replicated_produce", "Durable produce, 100 × 100 B per transaction, replicated", "produce",
            "One client writes 100-byte items in durable 100-item transactions (producer.instant): through "
            "ts.connect('zk://…') to a 3-node cluster that acknowledges once 2 of 3 nodes hold the entry on disk; "
            "through ts.connect('tcp://…') to one tstreams serve --durability sync; and to Redis Streams with one "
            "replica (appendfsync everysec, MULTI/XADD×100/EXEC then WAIT 1 0, one round trip).",
            (Variant("ours-cluster"), Variant("ours-serve-node"), Variant("redis-replicated")),
            _PRODUCE, latency="commit of one 100-item transaction", isolation="shared",
        ),
        Scenario(
            "cluster", "failover", "Failover: SIGKILL the leader → first acknowledged write", "failover",
            f"With all 3 nodes ready and a write just acknowledged, SIGKILL the leader and time until the client's "
            f"next write (retried by ts.connect('zk://…') itself) is acknowledged by the new leader; then restart "
            f"the killed node. ZooKeeper session timeout {SESSION_TIMEOUT:g} s, tickTime 200 ms. The rate is "
            f"failovers per second of failover time (1 / mean); p50/max are the figures to read.",
            (Variant("ours-cluster"),), _FAILOVER, latency="kill → first acknowledged write",
            unit="failovers/s", isolation="shared",
        ),
    )
    goals = (
        Goal("replicated_produce", "3 nodes, quorum acks >= 0.6x one node", "ours-cluster", "ours-serve-node",
             at_least=0.6),
        Goal("replicated_produce", "3 nodes, quorum acks >= 2x Redis + 1 replica (everysec, WAIT 1)",
             "ours-cluster", "redis-replicated", at_least=2.0),
        Goal("failover", f"p50 <= session + 0.5 s ({SESSION_TIMEOUT + 0.5:g} s)", "ours-cluster",
             metric="failover_p50_s", at_most=SESSION_TIMEOUT + 0.5, unit="s"),
        Goal("failover", f"max <= session + 1 s ({SESSION_TIMEOUT + 1:g} s; median of each repetition's max)",
             "ours-cluster", metric="failover_max_s", at_most=SESSION_TIMEOUT + 1.0, unit="s"),
    )
    return scenarios, goals
