"""The operator commands on a replicated cluster: ``--connect zk://…`` finds the leader
through a real ZooKeeper and a real ``tstreams serve --cluster`` node."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tstreams_embedded.cli import main
from tstreams_embedded.cluster.zk import init_cluster
from tstreams_embedded.testing import ServeProcess, ZooKeeperServer

_paths = itertools.count(1)


@pytest.fixture
def cluster_url(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[str]:
    """A one-node cluster (a quorum of one) at a fresh ZooKeeper path."""
    url = f"zk://{zookeeper.address}/cli{next(_paths)}"
    init_cluster(url, 1)
    node = ServeProcess(tmp_path / "n1", tmp_path, name="n1",
                        extra_args=["--cluster", url, "--node-id", "n1", "--session-timeout", "3"])
    with node:
        yield url


def test_operator_commands_through_a_cluster(cluster_url: str) -> None:
    def run(*args: str, input: str | None = None) -> list[dict]:
        result = CliRunner().invoke(main, [*args, "--connect", cluster_url, "--timeout", "30"], input=input)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]

    run("streams", "create", "s", "--partitions", "2")
    written = run("produce", "s", "--txn-size", "2", "--partition", "1", "--json", input="a\nb\nc\n")
    assert [w["items"] for w in written] == [2, 1]
    read = run("consume", "s", "--group", "g", "--commit", "--json", "--max", "1")
    assert read[0]["items"] == ["a", "b"] and read[0]["id"] == written[0]["id"]
    described = run("consumers", "describe", "s", "g", "--json")
    assert [(r["partition"], r["lag_transactions"]) for r in described] == [(0, 0), (1, 1)]
    (late,) = [r for r in run("consumers", "reset", "s", "g", "--to", "-1h", "--partition", "1", "--json")]
    assert late["new_offset"] < written[0]["id"] == late["next_read_id"] and not late["clamped"]
    clamped = run("consumers", "reset", "s", "g", "--to", "2100-01-01", "--dry-run", "--json")
    assert [(r["new_offset"], r["clamped"]) for r in clamped] == [(0, True), (written[-1]["id"], True)]
    run("consumers", "reset", "s", "g", "--to", "oldest", "--json")
    assert [r["lag_items"] for r in run("consumers", "describe", "s", "g", "--json")] == [0, 3]
    assert [r["transactions"] for r in run("streams", "describe", "s", "--json")] == [0, 2]
    assert run("consumers", "delete", "s", "g", "--json") == [{"stream": "s", "consumer": "g", "partitions_deleted": 2}]
    assert run("streams", "delete", "s", "--json") == [{"deleted": "s", "id": 1, "partitions": 2}]
    bad = CliRunner().invoke(main, ["consumers", "describe", "s", "g", "--connect", cluster_url])
    assert bad.exit_code == 1 and bad.stderr.startswith("Error: StreamNotFound") and bad.stderr.count("\n") == 1
