"""Test helpers for applications built on tstreams-embedded (and for its own tests).

* :func:`eventually`, :func:`wait_until`: poll a condition instead of sleeping.
* :func:`free_port`, :func:`wait_port`: loopback ports.
* :func:`stop_process`: the one "SIGTERM, wait, SIGKILL" by PID (:func:`stop_processes`: several
  side by side); :class:`ManagedProcess`,
  the base of the server classes:
  :class:`ServeProcess` (``tstreams serve``), :class:`HAProxyProcess`,
  :class:`ZooKeeperServer`, :class:`RedisServer`; :class:`ClusterNodeProcess` and
  :class:`LocalCluster` (``tstreams serve --cluster`` nodes).
* :mod:`tstreams_embedded.testing.history`: the Jepsen-style history and its checker.
* :mod:`tstreams_embedded.testing.coordinator` (an in-memory ZooKeeper whose sessions can
  be expired), :mod:`tstreams_embedded.testing.network` (an in-memory peer network that
  partitions any link either way, drops, delays, duplicates and reorders) and
  :mod:`tstreams_embedded.testing.memory_cluster` (real cluster nodes in one process over
  both); import them by module.
* :class:`FakeClock`: a controllable engine clock (``ts.open(path, clock=...)``).
* :func:`engine_on`: one engine, embedded or served.
* :mod:`tstreams_embedded.testing.strategies`: hypothesis strategies (transactions,
  partitions, crash points).
* :mod:`tstreams_embedded.testing.pytest_plugin`: pytest fixtures (installed as a plugin).

This package imports only the standard library at import time; ``strategies`` needs
hypothesis, ``pytest_plugin`` pytest, :meth:`ZooKeeperServer.client` kazoo and
:class:`RedisServer` the ``redis`` client.
"""

from __future__ import annotations

from typing import Any

from .backends import BACKENDS, engine_on
from .clock import FakeClock
from .cluster import ClusterNodeProcess, LocalCluster
from .haproxy import HAProxyProcess
from .polling import eventually, wait_until
from .ports import free_port, port_open, wait_port
from .processes import ManagedProcess, kill_process, stop_process, stop_processes
from .redis_server import RedisServer
from .server_process import ServeProcess
from .zookeeper import ZooKeeperServer, four_letter_word, zookeeper_classpath

__all__ = [
    "BACKENDS",
    "ClusterNodeProcess",
    "FakeClock",
    "HAProxyProcess",
    "LocalCluster",
    "ManagedProcess",
    "RedisServer",
    "ServeProcess",
    "TestDriver",
    "ZooKeeperServer",
    "engine_on",
    "eventually",
    "four_letter_word",
    "free_port",
    "kill_process",
    "port_open",
    "stop_process",
    "stop_processes",
    "wait_port",
    "wait_until",
    "zookeeper_classpath",
]


def __getattr__(name: str) -> Any:
    """``TestDriver`` (:class:`tstreams_embedded.streams.TestDriver`, the stream apps' test
    driver) is imported on first use, so that importing this package stays light."""
    if name == "TestDriver":
        from ..streams.driver import TestDriver

        return TestDriver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
