"""``tstreams cluster init|status``, and ``tstreams serve`` with the cluster options.

``serve`` here is the network layer's single-node ``serve`` (:mod:`..net.cli`) plus
``--cluster``, ``--node-id``, ``--repl``, ``--acks`` and ``--session-timeout`` (``--http``
is the single-node option, with more endpoints on a cluster node):
without ``--cluster`` it runs exactly that single-node server.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ..net.cli import configure_logging
from ..net.cli import serve as node_serve
from ..tools.params import MAX_PERIOD, MAX_TIMEOUT, seconds
from .retention import DEFAULT_COMPACTION_INTERVAL, DEFAULT_RETAIN_BYTES, DEFAULT_RETAIN_ENTRIES
from .zk import ACKS, cluster_status, init_cluster

CLUSTER_OPTIONS = [
    click.Option(["--cluster"], default=None,
                 help="Join the replicated cluster at zk://host:port/path (see docs/CLUSTER.md)."),
    click.Option(["--node-id"], default=None, help="This node's name in the cluster (with --cluster)."),
    click.Option(["--repl"], default=None,
                 help="Replication endpoint to bind (default: the --bind host, a free port)."),
    click.Option(["--acks"], type=click.Choice(ACKS), default=None,
                 help="Override the cluster's acks setting: quorum (default), all, leader."),
    click.Option(["--session-timeout"], type=seconds(0, MAX_TIMEOUT, min_open=True), default=4.0, show_default=True,
                 metavar="SECONDS",
                 help="ZooKeeper session timeout in seconds (bounds failover time)."),
]


def _serve(cluster: str | None, node_id: str | None, repl: str | None, acks: str | None,
           session_timeout: float, **node_options: Any) -> None:
    if cluster is None:
        assert node_serve.callback is not None
        node_serve.callback(**node_options)
        return
    if not node_id:
        raise click.UsageError("--cluster needs --node-id")
    from .serve import serve_cluster

    configure_logging(node_options["log_level"])
    sys.exit(serve_cluster(node_options["data"], list(node_options["binds"]), cluster, node_id,
                           http=node_options["http"], repl=repl,
                           acks=acks, durability=node_options["durability"], session_timeout=session_timeout,
                           ready_file=node_options["ready_file"], curve_dir=node_options["curve_dir"],
                           max_msg_size=node_options["max_msg_size"],
                           max_request_size=node_options["max_request_size"],
                           max_client_bytes=node_options["max_client_bytes"],
                           max_write_queue_bytes=node_options["max_write_queue_bytes"],
                           max_reply_bytes=node_options["max_reply_bytes"],
                           max_server_bytes=node_options["max_server_bytes"], rcvhwm=node_options["rcvhwm"],
                           piece_timeout=node_options["piece_timeout"],
                           http_token=node_options["http_token"],
                           console_sample_interval=node_options["console_sample_interval"]))


serve = click.Command("serve", params=[*node_serve.params, *CLUSTER_OPTIONS], callback=_serve,
                      help=node_serve.help)


@click.group("cluster")
def cluster() -> None:
    """Create and inspect a replicated cluster (ZooKeeper)."""


@cluster.command("init")
@click.argument("url")
@click.option("--nodes", type=click.IntRange(1, 99), default=None,
              help="Number of nodes (quorums are counted on it). Needed to create a cluster.")
@click.option("--acks", type=click.Choice(ACKS), default=None,
              help="When a write is acknowledged: held by a majority, by all nodes, or by the leader only "
                   "[new cluster: quorum].")
@click.option("--log-retain-entries", type=int, default=None,
              help=f"Replicated log entries each node keeps (more while a live follower still needs them) "
                   f"[new cluster: {DEFAULT_RETAIN_ENTRIES}].")
@click.option("--log-retain-bytes", type=int, default=None,
              help=f"Hard bound on each node's replicated log; a follower behind it catches up by snapshot "
                   f"[new cluster: {DEFAULT_RETAIN_BYTES}].")
@click.option("--compaction-interval", type=seconds(0, MAX_PERIOD), default=None, metavar="SECONDS",
              help=f"Seconds between replicated compactions of transactions past their stream's TTL (0: never) "
                   f"[new cluster: {DEFAULT_COMPACTION_INTERVAL:g}].")
@click.option("--force", is_flag=True, default=False,
              help="Allow a size change of more than one node at a time (only on a stopped cluster).")
@click.option("--timeout", type=seconds(0, MAX_TIMEOUT, min_open=True), default=10.0, show_default=True,
              metavar="SECONDS",
              help="Seconds to wait for ZooKeeper (to connect, and for each call).")
def init(url: str, nodes: int | None, acks: str | None, log_retain_entries: int | None,
         log_retain_bytes: int | None, compaction_interval: float | None, force: bool, timeout: float) -> None:
    """Record the cluster at URL (zk://host:port/path): its size, acks, log retention and
    compaction interval. A new cluster needs --nodes; the options left out take their
    defaults. On an existing cluster only the options given change, the others keep their
    values; the nodes pick the change up at once, and the size changes by one node at a
    time (docs/CLUSTER.md, "Add a node / remove a node")."""
    click.echo(json.dumps(init_cluster(url, nodes, acks, timeout=timeout, log_retain_entries=log_retain_entries,
                                       log_retain_bytes=log_retain_bytes, compaction_interval=compaction_interval,
                                       force=force)))


@cluster.command("status")
@click.argument("url")
@click.option("--timeout", type=seconds(0, MAX_TIMEOUT, min_open=True), default=10.0, show_default=True,
              metavar="SECONDS",
              help="Seconds to wait for ZooKeeper (to connect, and for each call).")
def status(url: str, timeout: float) -> None:
    """Print the cluster's leader, epoch and each node's role, log position and lag (JSON)."""
    click.echo(json.dumps(cluster_status(url, timeout=timeout), indent=2, sort_keys=True))
