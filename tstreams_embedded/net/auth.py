"""CURVE keys for the server and its clients (``zmq.auth``).

``tstreams keys generate DIR`` writes::

    DIR/server.key, DIR/server.key_secret     the server's keypair
    DIR/client.key, DIR/client.key_secret     a client keypair
    DIR/authorized/client.key                 public keys the server accepts (one file each)

The server (``--curve-dir DIR``) encrypts with its keypair and, through a ZAP
authenticator, accepts only clients whose public key is in ``DIR/authorized``: an unknown
client's handshake is refused and it gets no service at all. A client needs the server's
public key and its own keypair (``RemoteBackend(..., curve_dir=DIR)``).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from ..errors import InvalidArgument

AUTHORIZED = "authorized"


def generate_keys(directory: str | os.PathLike[str], clients: tuple[str, ...] = ("client",)) -> dict[str, str]:
    """Create the server keypair, one keypair per client name, and authorize the clients.

    Existing key files are overwritten. Returns ``{name: public key file}``.
    """
    d = os.fspath(directory)
    os.makedirs(os.path.join(d, AUTHORIZED), exist_ok=True)
    out = {}
    pub, _ = zmq.auth.create_certificates(d, "server")
    out["server"] = pub
    for name in clients:
        if not name or os.sep in name or name == "server":
            raise InvalidArgument(f"invalid client key name {name!r}")
        pub, _ = zmq.auth.create_certificates(d, name)
        shutil.copy(pub, os.path.join(d, AUTHORIZED, os.path.basename(pub)))
        out[name] = pub
    return out


def _load(path: str, secret: bool) -> tuple[bytes, bytes | None]:
    if not os.path.exists(path):
        raise InvalidArgument(f"CURVE key file {path!r} does not exist (run 'tstreams keys generate DIR')")
    pub, sec = zmq.auth.load_certificate(path)
    if secret and not sec:
        raise InvalidArgument(f"{path!r} holds no secret key")
    return pub, sec


def load_server_curve(directory: str | os.PathLike[str]) -> tuple[bytes, bytes, str]:
    """``(public, secret, authorized_dir)`` of the server in ``directory``."""
    d = os.fspath(directory)
    pub, sec = _load(os.path.join(d, "server.key_secret"), True)
    auth_dir = os.path.join(d, AUTHORIZED)
    if not os.path.isdir(auth_dir):
        raise InvalidArgument(f"{auth_dir!r} is missing: no client would be accepted")
    return pub, sec, auth_dir  # type: ignore[return-value]


def load_client_curve(directory: str | os.PathLike[str], name: str = "client") -> tuple[bytes, bytes, bytes]:
    """``(server public, client public, client secret)`` from ``directory``."""
    d = os.fspath(directory)
    server_pub, _ = _load(os.path.join(d, "server.key"), False)
    pub, sec = _load(os.path.join(d, f"{name}.key_secret"), True)
    return server_pub, pub, sec  # type: ignore[return-value]


def start_authenticator(context: zmq.Context[Any], authorized_dir: str) -> ThreadAuthenticator:
    """Start a ZAP handler accepting CURVE clients whose public key file is in ``authorized_dir``."""
    auth = ThreadAuthenticator(context)
    auth.start()
    auth.configure_curve(domain="*", location=authorized_dir)
    return auth
