"""``ts.connect``: an :class:`~tstreams_embedded.engine.api.engine.Engine` on a remote endpoint.

It picks the client by the endpoint's scheme: ``zk://`` a replicated cluster
(:mod:`tstreams_embedded.cluster.client`), anything else one ``tstreams serve``
(:mod:`tstreams_embedded.net`). It sits above both, so that the library's modules that
connect (the CLI's targets, Spark, asyncio) import it and not the package's face.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .engine.api.engine import Engine


def connect(endpoint: str | Sequence[str], **options: Any) -> Engine:
    """Connect to a ``tstreams serve`` endpoint; returns an :class:`Engine` with the same API.

    ``zk://h1:2181,h2:2181/path`` connects to a replicated cluster and follows its leader
    (see ``docs/CLUSTER.md``)."""
    if isinstance(endpoint, str) and endpoint.startswith("zk://"):
        from .cluster.client import connect_cluster

        cluster: Engine = connect_cluster(endpoint, **options)
        return cluster
    from .net import connect as connect_server

    return connect_server(endpoint, **options)
