"""ZeroMQ endpoint addresses, checked before they are used.

ZeroMQ parses a ``tcp://`` port with ``strtoul`` into 16 bits: ``:99999`` silently became
port 34463 and ``:-5`` was accepted. :func:`check_endpoint` refuses such addresses with
:class:`~tstreams_embedded.errors.InvalidArgument` for the server's binds and the client's
connects alike, before anything is created or connected:

* ``tcp://HOST:PORT``: ``HOST`` non-empty (a name, an IPv4 address, ``[IPv6]``, or ``*``
  and an interface name to bind), ``PORT`` decimal in 1–65535; to bind, also ``*`` or
  ``0`` (any free port). A connect may name its source, ``tcp://SRC;HOST:PORT``.
* ``ipc://PATH`` and ``inproc://NAME``: a non-empty address.
* any other transport is refused (the server and the client speak only these three).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InvalidArgument

__all__ = ["MAX_PORT", "check_endpoint", "check_endpoints", "tcp_port"]

MAX_PORT = 65535
TRANSPORTS = ("tcp", "ipc", "inproc")


def tcp_port(text: str, *, bind: bool) -> int | None:
    """The port of ``text`` (``None`` for any free port when binding), or InvalidArgument."""
    if bind and text in ("*", "0"):
        return None
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PORT:
        accepted = "1-65535, or * for any free port" if bind else "1-65535"
        raise InvalidArgument(f"port must be a number in {accepted}, got {text!r}")
    return int(text)


def check_endpoint(endpoint: object, *, bind: bool) -> str:
    """``endpoint`` if it is a usable address to bind (``bind=True``) or to connect to,
    else :class:`InvalidArgument` naming what is wrong."""
    role = "bind" if bind else "connect to"

    def invalid(why: str) -> InvalidArgument:
        return InvalidArgument(f"endpoint {endpoint!r} is not a valid ZeroMQ address to {role}: {why}")

    if not isinstance(endpoint, str) or "://" not in endpoint:
        raise invalid("expected an address like 'tcp://host:port'")
    transport, _, address = endpoint.partition("://")
    if transport not in TRANSPORTS:
        raise invalid(f"the transport must be one of {', '.join(t + '://' for t in TRANSPORTS)}")
    if not address:
        raise invalid("the address is empty")
    if transport == "tcp":
        target = address.rpartition(";")[2] if not bind else address
        host, colon, port = target.rpartition(":")
        if not colon or not host:
            raise invalid("expected tcp://host:port")
        try:
            tcp_port(port, bind=bind)
        except InvalidArgument as exc:
            raise invalid(str(exc)) from None
    return endpoint


def check_endpoints(endpoints: str | Sequence[str], *, bind: bool) -> list[str]:
    """:func:`check_endpoint` of each of ``endpoints`` (one address or several, at least one)."""
    eps = list(endpoints) if isinstance(endpoints, (list, tuple)) else [endpoints]
    if not eps:
        raise InvalidArgument(f"no address to {'bind' if bind else 'connect to'}")
    return [check_endpoint(e, bind=bind) for e in eps]
