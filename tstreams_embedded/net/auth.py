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

The nodes of a replicated cluster share one keys directory. Their replication port is a
CURVE server with the same server keypair, in its own ZAP domain
(:data:`REPLICATION_DOMAIN`), and accepts only peers that present the server keypair itself:
a client keypair, although authorized for the client port, is refused there.
"""

from __future__ import annotations

import datetime
import os
import shutil
from collections.abc import Iterable
from typing import Any, NamedTuple

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from ..errors import InvalidArgument

AUTHORIZED = "authorized"
#: ZAP domain of a cluster node's replication port (the client port uses the default one).
REPLICATION_DOMAIN = "tstreams-replication"


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


class PeerKeys(NamedTuple):
    """The keypair (Z85) the nodes of one cluster present to each other on their
    replication ports: the server keypair of their shared keys directory."""

    public: bytes
    secret: bytes


def load_peer_keys(directory: str | os.PathLike[str]) -> PeerKeys:
    """The cluster's :class:`PeerKeys` from ``directory`` (its ``server.key_secret``)."""
    public, secret, _ = load_server_curve(directory)
    return PeerKeys(public, secret)


def secure_replication_server(sock: zmq.Socket[Any], keys: PeerKeys) -> None:
    """Make ``sock`` (before ``bind``) a CURVE server in :data:`REPLICATION_DOMAIN`."""
    sock.curve_server = True
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    sock.zap_domain = REPLICATION_DOMAIN.encode()


def secure_replication_client(sock: zmq.Socket[Any], keys: PeerKeys) -> None:
    """Make ``sock`` (before ``connect``) a CURVE client of a peer's replication port."""
    sock.curve_serverkey = keys.public
    sock.curve_publickey = keys.public
    sock.curve_secretkey = keys.secret


class _KeySet:
    """A ZAP credentials provider: accepts exactly the public keys (Z85) it holds."""

    def __init__(self, keys: Iterable[bytes]) -> None:
        self.keys = frozenset(keys)

    def callback(self, domain: str, key: bytes) -> bool:
        return key in self.keys


def start_authenticator(context: zmq.Context[Any], authorized_dir: str,
                        peers: PeerKeys | None = None) -> ThreadAuthenticator:
    """Start a ZAP handler accepting CURVE clients whose public key file is in
    ``authorized_dir``; with ``peers``, it also accepts exactly ``peers.public`` in
    :data:`REPLICATION_DOMAIN` (and nothing else there)."""
    clients = zmq.auth.load_certificates(authorized_dir)
    auth = ThreadAuthenticator(context)
    auth.start()
    auth.configure_curve_callback(domain="*", credentials_provider=_KeySet(clients))
    if peers is not None:
        auth.configure_curve_callback(domain=REPLICATION_DOMAIN, credentials_provider=_KeySet([peers.public]))
    return auth
