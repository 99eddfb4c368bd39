"""``tstreams cluster init|status``."""

from __future__ import annotations

import json

import click

from .zk import ACKS, cluster_status, init_cluster


@click.group("cluster")
def cluster() -> None:
    """Create and inspect a replicated cluster (ZooKeeper)."""


@cluster.command("init")
@click.argument("url")
@click.option("--nodes", type=int, required=True, help="Number of nodes (quorums are counted on it).")
@click.option("--acks", type=click.Choice(ACKS), default="quorum", show_default=True,
              help="When a write is acknowledged: held by a majority, by all nodes, or by the leader only.")
def init(url: str, nodes: int, acks: str) -> None:
    """Record the cluster at URL (zk://host:port/path): its size and acks setting."""
    click.echo(json.dumps(init_cluster(url, nodes, acks)))


@cluster.command("status")
@click.argument("url")
def status(url: str) -> None:
    """Print the cluster's leader, epoch and each node's role, log position and lag (JSON)."""
    click.echo(json.dumps(cluster_status(url), indent=2, sort_keys=True))
