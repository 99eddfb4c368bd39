"""The ``cluster`` suite's replication and failover figures (one part of the suite).

The suite is assembled in :mod:`benchmarks.scenarios` from the modules named in
``CLUSTER_PARTS``: each defines ``part()``, returning its ``(scenarios, goals)``, and imports
:mod:`benchmarks.scenarios` inside that function only (so either module can be imported
first). This one: durable produce (1 and 8 clients) on a 3-node cluster against one node,
a replicated Redis (``appendfsync everysec`` and ``always``) and the disk's fsync floor, with
the CPU per item of the leader, a follower and the single node; and failover.
:mod:`benchmarks.cluster_catchup` adds the catch-up figure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.scenarios import Goal, Scenario

_PRODUCE = {"tiny": {"n_items": 1_000, "batch": 100}, "quick": {"n_items": 20_000, "batch": 100},
            "full": {"n_items": 200_000, "batch": 100}}
_PRODUCE_8 = {"tiny": {"n_items": 1_600, "batch": 100, "clients": 8},
              "quick": {"n_items": 40_000, "batch": 100, "clients": 8},
              "full": {"n_items": 400_000, "batch": 100, "clients": 8}}
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
            "replica (appendfsync everysec or always, MULTI/XADD×100/EXEC then WAIT 1 0, one round trip). "
            "The fsync floor is this disk's limit at one 4 KiB append + fdatasync per transaction. CPU per item "
            "(psutil): the cluster's leader and mean follower, Redis's primary and replica, the single node.",
            (Variant("ours-cluster"), Variant("ours-serve-node"), Variant("redis-replicated"),
             Variant("redis-replicated-always"), Variant("fsync-floor")),
            _PRODUCE, latency="commit of one 100-item transaction", isolation="shared",
        ),
        Scenario(
            "cluster", "replicated_produce_8", "Durable produce from 8 clients, 100 × 100 B per transaction, "
            "replicated", "produce",
            "As above, with 8 client threads, each with its own connection (ts.connect, or a Redis connection), "
            "writing to one partition at once: the servers group what arrives together (one log entry per "
            "burst on the leader).",
            (Variant("ours-cluster"), Variant("ours-serve-node"), Variant("redis-replicated"),
             Variant("redis-replicated-always")),
            _PRODUCE_8, latency="commit of one 100-item transaction", isolation="shared",
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
        *(goal for scenario, who in (("replicated_produce", "1 client"), ("replicated_produce_8", "8 clients"))
          for goal in (
              Goal(scenario, f"{who}: 3 nodes, quorum acks >= 0.6x one node", "ours-cluster", "ours-serve-node",
                   at_least=0.6),
              Goal(scenario, f"{who}: 3 nodes >= 1.0x Redis + 1 replica (everysec, WAIT 1)", "ours-cluster",
                   "redis-replicated", at_least=1.0),
              Goal(scenario, f"{who}: 3 nodes vs Redis + 1 replica (always, WAIT 1)", "ours-cluster",
                   "redis-replicated-always"),
              Goal(scenario, f"{who}: leader CPU per item <= 1.3x one node's", "ours-cluster", "ours-serve-node",
                   metric="cpu_us_per_item", at_most=1.3),
              Goal(scenario, f"{who}: follower CPU per item <= 0.5x one node's", "ours-cluster", "ours-serve-node",
                   metric="follower_cpu_us_per_item", at_most=0.5),
          )),
        Goal("replicated_produce", "1 client: one node vs the fsync floor (1 page per transaction)",
             "ours-serve-node", "fsync-floor"),
        Goal("failover", f"p50 <= session + 0.5 s ({SESSION_TIMEOUT + 0.5:g} s)", "ours-cluster",
             metric="failover_p50_s", at_most=SESSION_TIMEOUT + 0.5, unit="s"),
        Goal("failover", f"max <= session + 1 s ({SESSION_TIMEOUT + 1:g} s; median of each repetition's max)",
             "ours-cluster", metric="failover_max_s", at_most=SESSION_TIMEOUT + 1.0, unit="s"),
    )
    return scenarios, goals
