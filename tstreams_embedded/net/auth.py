"""CURVE keys for the server and its clients (``zmq.auth``).

``tstreams keys generate DIR`` writes::

    DIR/server.key, DIR/server.key_secret     the server's keypair
    DIR/client.key, DIR/client.key_secret     a client keypair
    DIR/authorized/client.key                 public keys the server accepts (one file each)

Secret key files (``*.key_secret``) are created readable by their owner only (mode 0600,
also when they replace existing files); public key files are 0644.

The server (``--curve-dir DIR``) encrypts with its keypair and, through a ZAP
authenticator, accepts only clients whose public key is in ``DIR/authorized``: an unknown
client's handshake is refused and it gets no service at all. A client needs the server's
public key and its own keypair (``RemoteBackend(..., curve_dir=DIR)``).
"""

from __future__ import annotations

import datetime
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
    for name in clients:
        if not isinstance(name, str) or not name or os.sep in name or name in ("server", AUTHORIZED, ".", ".."):
            raise InvalidArgument(f"invalid client key name {name!r}")
    os.makedirs(os.path.join(d, AUTHORIZED), exist_ok=True)
    out = {}
    out["server"] = _create_keypair(d, "server")
    for name in clients:
        pub = _create_keypair(d, name)
        shutil.copy(pub, os.path.join(d, AUTHORIZED, os.path.basename(pub)))
        out[name] = pub
    return out


_BANNER = ("#   ****  Generated on {0} by tstreams keys generate  ****\n"
           "#   ZeroMQ CURVE {1} Certificate\n{2}\n")
SECRET_MODE = 0o600
PUBLIC_MODE = 0o644


def _write_key_file(path: str, kind: str, public: bytes, secret: bytes | None, mode: int) -> None:
    """Write a ``zmq.auth`` certificate file with ``mode``, never readable by others in
    between: created with ``mode`` and re-moded (``fchmod``) when it already existed."""
    warn = "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n" if secret else ""
    text = _BANNER.format(datetime.datetime.now(), kind, warn) + "metadata\ncurve\n"
    text += f'    public-key = "{public.decode()}"\n'
    if secret is not None:
        text += f'    secret-key = "{secret.decode()}"\n'
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _create_keypair(directory: str, name: str) -> str:
    """``NAME.key`` (0644) and ``NAME.key_secret`` (0600) in ``directory``; the public file's path."""
    public, secret = zmq.curve_keypair()
    base = os.path.join(directory, name)
    _write_key_file(base + ".key_secret", "**Secret**", public, secret, SECRET_MODE)
    _write_key_file(base + ".key", "Public", public, None, PUBLIC_MODE)
    return base + ".key"


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
