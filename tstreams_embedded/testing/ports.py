"""Loopback TCP ports: pick a free one, wait until something listens on one."""

from __future__ import annotations

import socket

from .polling import eventually

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that was free a moment ago (the OS picks it).

    Another process can take it before you bind it: servers started with such a port
    should fail loudly (they do) and callers may retry.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def port_open(port: int, host: str = LOOPBACK, timeout: float = 0.2) -> bool:
    """Whether a TCP connection to ``host:port`` succeeds right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        return s.connect_ex((host, port)) == 0


def wait_port(port: int, timeout: float = 20.0, host: str = LOOPBACK) -> None:
    """Wait until something accepts TCP connections on ``host:port``.

    Raises :class:`AssertionError` (see :func:`~tstreams_embedded.testing.eventually`)
    if nothing does within ``timeout`` seconds.
    """
    eventually(lambda: port_open(port, host), timeout, 0.02, message=f"nothing listens on {host}:{port}")
