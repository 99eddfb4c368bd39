"""The node's parts wait, sleep, lock and start threads only through their injected
``cluster.runtime.Runtime`` (else the deterministic simulation cannot schedule them: a real
wait would block every simulated task, a real thread would run outside the schedule)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tstreams_embedded.cluster as cluster

#: the modules a Node runs (docs/CLUSTER.md, "The node's parts")
NODE_PARTS = ["node", "election", "leader", "follower", "applier", "replication", "writes", "log", "channel",
              "membership", "retention", "follower_reads", "roles", "messages", "counters"]
DIRECT = re.compile(r"(?<![\w.])(threading\.\w+|time\.(monotonic|sleep|time|perf_counter)\w*)")


@pytest.mark.parametrize("module", NODE_PARTS)
def test_a_node_part_uses_its_runtime_not_threading_or_time(module: str) -> None:
    source = (Path(cluster.__file__).parent / f"{module}.py").read_text(encoding="utf-8")
    found = [f"line {n}: {line.strip()}" for n, line in enumerate(source.splitlines(), 1) if DIRECT.search(line)]
    assert not found, f"cluster/{module}.py calls threading or time directly (use node.runtime): {found}"
