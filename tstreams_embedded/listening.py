"""Where a process listens: which ``tcp://`` binds other machines can reach, and the
``--http HOST:PORT`` address of the metrics and the web console.

Shared by ``tstreams serve``, ``tstreams cluster serve`` (:mod:`tstreams_embedded.net.serve`,
:mod:`tstreams_embedded.cluster.serve`) and ``tstreams console``
(:mod:`tstreams_embedded.console.cli`), so that it sits below all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import BindFailed, InvalidArgument

_LOCAL_HOSTS = ("localhost", "[::1]", "::1")


def exposed_binds(binds: Sequence[str]) -> list[str]:
    """The ``tcp://`` endpoints of ``binds`` that are reachable from other machines (any
    host but loopback: ``0.0.0.0``, ``*``, an interface name or address)."""
    out = []
    for b in binds:
        if not b.startswith("tcp://"):
            continue  # ipc://, inproc:// stay on this machine
        host = b[len("tcp://"):].rsplit(":", 1)[0]
        if host.startswith("127.") or host in _LOCAL_HOSTS:
            continue
        out.append(b)
    return out


def parse_http(http: str) -> tuple[str, int]:
    """``host:port`` of an ``--http`` option, or :class:`InvalidArgument`."""
    host, _, port = http.rpartition(":") if isinstance(http, str) else ("", "", "")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgument(f"--http takes host:port, got {http!r}")
    return host, int(port)


def listen_http(app: Any, host: str, port: int) -> None:
    """``app.listen(port, host)`` (a Tornado application), or :class:`BindFailed`."""
    try:
        app.listen(port, host)
    except OSError as exc:
        raise BindFailed(f"cannot listen for HTTP on {host}:{port}: {exc.strerror or exc}") from None
