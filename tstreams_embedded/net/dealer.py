"""The client's DEALER socket, shared by both client transports: its set-up and the
vocabulary of its failures.

:class:`~tstreams_embedded.net.connection.Connection` (threads) and
:class:`~tstreams_embedded.aio.connection.AsyncConnection` (an asyncio event loop) open the
same socket (:func:`open_dealer`), read the same monitor events (:func:`monitor_event`)
and fail requests with the same messages (:func:`lost_message`, :func:`expired_message`).
Pure functions and constants: no transport state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import zmq
from zmq.utils.monitor import parse_monitor_message

from ..errors import InvalidArgument

POLLIN = int(zmq.POLLIN)

MONITOR_EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_MONITOR_STOPPED
)
#: Why a handshake failed, by monitor event (the others: "protocol error").
HANDSHAKE_FAILURES: dict[int, str] = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "authentication refused",
    # the peer closed the connection before the handshake ended: e.g. a proxy (HAProxy) with
    # no server up, such as a cluster's leader-only backend while the cluster has no leader
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "the connection was closed during the handshake (behind a proxy: "
                                          "no server up, e.g. a cluster without a leader)",
}


def open_dealer(ctx: zmq.Context[Any], endpoints: Sequence[str], heartbeat: float,
                curve: tuple[bytes, bytes, bytes] | None, reconnect_ivl_ms: int = 100,
                reconnect_ivl_max_ms: int = 1000) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
    """The client's DEALER socket connected to ``endpoints``, and its monitor socket (for
    :data:`MONITOR_EVENTS`), made in ``ctx`` (a ``zmq.asyncio`` context makes both
    asyncio sockets). ``ZMQ_IMMEDIATE`` keeps requests unsent while no connection is up;
    ZMTP heartbeats detect a silent peer; ``curve`` is ``(server_public, client_public,
    client_secret)``. :class:`InvalidArgument` for a malformed address (nothing stays open)."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.IMMEDIATE, 1)
    s.setsockopt(zmq.LINGER, 200)
    s.setsockopt(zmq.SNDHWM, 1_000_000)
    s.setsockopt(zmq.RCVHWM, 1_000_000)
    s.setsockopt(zmq.RECONNECT_IVL, reconnect_ivl_ms)
    s.setsockopt(zmq.RECONNECT_IVL_MAX, reconnect_ivl_max_ms)
    hb_ms = max(100, int(heartbeat * 1000))
    s.setsockopt(zmq.HEARTBEAT_IVL, hb_ms)
    s.setsockopt(zmq.HEARTBEAT_TIMEOUT, hb_ms * 3)
    s.setsockopt(zmq.HEARTBEAT_TTL, min(hb_ms * 3, 6_553_500))  # ZMTP carries it in 0.1 s units, 16 bits
    if curve is not None:
        server_pub, client_pub, client_sec = curve
        s.curve_serverkey = server_pub
        s.curve_publickey = client_pub
        s.curve_secretkey = client_sec
    mon = s.get_monitor_socket(MONITOR_EVENTS)
    for e in endpoints:
        try:
            s.connect(e)
        except zmq.ZMQError as exc:  # a malformed address ('tcp://host:abc', 'ipc://'): nothing stays open
            s.disable_monitor()
            mon.close(0)
            s.close(0)
            raise InvalidArgument(f"endpoint {e!r} is not a valid ZeroMQ address ({exc}); "
                                  "expected e.g. 'tcp://host:port'") from None
    return s, mon


def monitor_event(frames: list[bytes]) -> tuple[int, str]:
    """``(event, endpoint)`` of a message of the monitor socket."""
    ev = parse_monitor_message(frames)
    raw = ev["endpoint"]
    endpoint = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return int(ev["event"]), endpoint


def lost_message(endpoint: str, method: str) -> str:
    """The :class:`RemoteError` message of a write whose connection was lost in flight."""
    return f"connection to {endpoint} lost while {method} was in flight; it may or may not have been executed"


def expired_message(endpoints: Sequence[str], method: str, timeout: float, sent: bool, last_failure: str) -> str:
    """The :class:`RemoteError` message of a request that got no reply within ``timeout``."""
    if not sent:
        return (f"not connected to {', '.join(endpoints)}: no server answered within "
                f"{timeout:g}s; {method} was not sent{last_failure}")
    return (f"no reply to {method} from {', '.join(endpoints)} within {timeout:g}s; "
            "the request may or may not have been executed")
