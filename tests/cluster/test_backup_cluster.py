"""``tstreams backup --connect zk://…``: the copy comes from the leader's data and restores
to what the cluster acknowledged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import tstreams_embedded as ts
from tstreams_embedded.engine.operator import backup as B
from tstreams_embedded.testing.server_process import child_environment

from .conftest import Cluster


def test_a_backup_of_a_cluster_restores_what_it_acknowledged(cluster: Cluster, connect: Any, tmp_path: Path) -> None:
    engine = connect(timeout=60)
    engine.create_stream("s")
    ids = [engine.producer("s").instant([b"%d" % k]) for k in range(20)]
    r = subprocess.run([sys.executable, "-m", "tstreams_embedded.cli", "backup", "--connect", cluster.url,
                        "--timeout", "60", str(tmp_path / "b")], capture_output=True, text=True, timeout=120,
                       env=child_environment())
    assert r.returncode == 0, r.stderr
    B.restore(str(tmp_path / "b"), str(tmp_path / "r"))
    with ts.open(tmp_path / "r") as restored:
        c = restored.consumer("s", "check")
        got = []
        while (t := c.get_transaction()) is not None:
            got.append((t.id, t.items))
    assert got == [(txn_id, [b"%d" % k]) for k, txn_id in enumerate(ids)]
