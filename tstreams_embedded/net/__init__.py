"""The network layer: a ZeroMQ server for the engine and a remote client.

``connect(endpoint)`` returns an :class:`~tstreams_embedded.engine.api.engine.Engine` whose
backend is a :class:`RemoteBackend`; the same program code then runs against a remote
``tstreams serve`` process as against an embedded engine. See ``docs/NETWORK.md``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .client import RemoteBackend

if TYPE_CHECKING:
    from ..engine.api.engine import Engine

__all__ = ["RemoteBackend", "connect"]


def connect(
    endpoint: str | Sequence[str],
    *,
    timeout: float = 30.0,
    heartbeat: float = 2.0,
    curve_dir: str | os.PathLike[str] | None = None,
    txn_ttl: float | None = None,
    keepalive_interval: float | None = -1,
    **options: Any,
) -> Engine:
    """Connect to ``tstreams serve`` at ``endpoint`` (e.g. ``"tcp://127.0.0.1:7000"``).

    Returns an ``Engine`` with the embedded API. Closing it closes the connection only.
    ``options`` go to :class:`RemoteBackend` (CURVE keys, ``pipeline_data``, ``context``).
    """
    from ..engine.api.engine import DEFAULT_TXN_TTL, Engine

    backend = RemoteBackend(endpoint, timeout=timeout, heartbeat=heartbeat, curve_dir=curve_dir, **options)
    ttl = DEFAULT_TXN_TTL if txn_ttl is None else txn_ttl
    return Engine(backend, txn_ttl=ttl, keepalive_interval=keepalive_interval)
