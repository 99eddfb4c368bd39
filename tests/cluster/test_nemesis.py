"""Seeded nemesis runs over an in-process cluster (tstreams_embedded.testing.nemesis): faults
(partitions either way, the leader cut from its followers only, session expiry, a node cut
from ZooKeeper, loss/duplication/reordering, restarts on disk) while one client writes; the
checker's findings are the failure message, with the command that re-runs the seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tstreams_embedded.testing.nemesis import run


def check(seed: int, root: Path, faults: int) -> None:
    result = run(seed, str(root), faults=faults)
    assert result.acked > 0, f"nothing was acknowledged; re-run with: {result.replay}"
    assert not result.problems, (f"faults {result.faults}: {result.problems[:10]}; "
                                 f"re-run with: {result.replay}")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_nemesis_seed(seed: int, tmp_path: Path) -> None:
    check(seed, tmp_path, faults=3)


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(100, 300))
def test_nemesis_soak(seed: int, tmp_path: Path) -> None:
    check(seed, tmp_path, faults=8)
