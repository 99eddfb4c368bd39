"""HAProxy in front of ``tstreams serve`` processes (``cluster/haproxy.cfg``)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .polling import eventually
from .ports import LOOPBACK, free_port, port_open
from .processes import ManagedProcess
from .server_process import PACKAGE_ROOT

#: The configuration of a checkout: ``cluster/haproxy.cfg`` next to the package.
DEFAULT_CONFIG = PACKAGE_ROOT / "cluster" / "haproxy.cfg"


def haproxy_executable() -> str | None:
    """Path of ``haproxy`` (``PATH``, then ``/usr/sbin``), or ``None``."""
    found = shutil.which("haproxy")
    if found:
        return found
    return "/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None


class HAProxyProcess(ManagedProcess):
    """``haproxy -f CONFIG -db`` balancing TCP connections over ``servers`` (ports on
    ``host``).

    The configuration reads its addresses from the environment: ``TSTREAMS_BIND`` (the
    frontend, ``host:frontend_port``) and ``TSTREAMS_SERVER1``, ``TSTREAMS_SERVER2``, …
    (one per server, in order); ``cluster/haproxy.cfg`` of a checkout is the default. An
    admin socket is added (a second ``-f`` file) so that :meth:`server_status` and
    :meth:`wait_servers_up` can ask HAProxy which servers its health checks mark up.
    """

    name = "haproxy"
    stop_timeout = 10.0

    def __init__(self, servers: Sequence[int], workdir: str | os.PathLike[str] | None = None, *,
                 frontend_port: int | None = None, host: str = LOOPBACK,
                 config: str | os.PathLike[str] | None = None, executable: str | None = None) -> None:
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="tstreams-haproxy-"))
        super().__init__(self.workdir / "haproxy.log")
        exe = executable or haproxy_executable()
        if exe is None:
            raise RuntimeError("haproxy is not installed (Debian: apt-get install haproxy)")
        self.executable = exe
        self.servers = list(servers)
        self.host = host
        self.port = frontend_port or free_port(host)
        self.config = Path(config) if config is not None else DEFAULT_CONFIG
        if not self.config.exists():
            raise FileNotFoundError(f"HAProxy configuration {self.config} not found (pass config=)")
        self.admin_socket = self.workdir / "haproxy-admin.sock"
        self._admin_config = self.workdir / "haproxy-admin.cfg"

    @property
    def endpoint(self) -> str:
        """``tcp://HOST:PORT`` of the frontend."""
        return f"tcp://{self.host}:{self.port}"

    def environment(self) -> dict[str, str]:
        env = dict(os.environ, TSTREAMS_BIND=f"{self.host}:{self.port}")
        for i, port in enumerate(self.servers, 1):
            env[f"TSTREAMS_SERVER{i}"] = f"{self.host}:{port}"
        return env

    def command(self) -> list[str]:
        return [self.executable, "-f", str(self.config), "-f", str(self._admin_config), "-db"]

    def before_start(self) -> None:
        self.admin_socket.unlink(missing_ok=True)
        self._admin_config.write_text(f'global\n    stats socket "{self.admin_socket}" mode 600 level admin\n')
        check = subprocess.run([self.executable, "-c", "-q", "-f", str(self.config), "-f", str(self._admin_config)],
                               env=self.environment(), capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise RuntimeError(f"invalid HAProxy configuration {self.config}:\n{check.stdout}{check.stderr}")

    def is_ready(self) -> bool:
        return port_open(self.port, self.host) and self.admin_socket.exists()

    def admin(self, command: str) -> str:
        """Send one command to the admin socket (``show stat``, ``disable server …``)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(self.admin_socket))
            s.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def server_status(self) -> dict[str, str]:
        """``{server name: status}`` of the backend servers (``UP``, ``DOWN``, ``MAINT``…)."""
        lines = self.admin("show stat").splitlines()
        if not lines or not lines[0].startswith("# "):
            return {}
        header = lines[0][2:].split(",")
        name_i, status_i, type_i = header.index("svname"), header.index("status"), header.index("type")
        out = {}
        for line in lines[1:]:
            fields = line.split(",")
            if len(fields) > max(name_i, status_i, type_i) and fields[type_i] == "2":  # 2: a server
                out[fields[name_i]] = fields[status_i]
        return out

    def wait_servers_up(self, names: Sequence[str] | None = None, timeout: float = 20.0) -> None:
        """Wait until the health checks mark ``names`` (default: every server) ``UP``."""

        def up() -> bool:
            status = self.server_status()
            wanted = list(names) if names is not None else list(status)
            return bool(wanted) and all(status.get(n) == "UP" for n in wanted)

        eventually(up, timeout, 0.05, message=lambda: f"HAProxy servers not up: {self.server_status()}")


def write_leader_only_config(path: str | os.PathLike[str], check_ports: Sequence[int], host: str = LOOPBACK) -> Path:
    """Write the leader-only HAProxy configuration of a cluster (as ``cluster/local.sh up``
    makes it, ``cluster/haproxy-leader.cfg``): server ``i`` is ``TSTREAMS_SERVER<i>`` (its
    client port, from :class:`HAProxyProcess`' environment) and is checked with
    ``GET /health/leader`` on ``host:check_ports[i]`` (the node's ``--http``), so only the
    leader takes connections. Returns the path."""
    lines = [
        "global", "    maxconn 4000",
        "defaults", "    mode tcp", "    timeout connect 2s", "    timeout client 60s", "    timeout server 60s",
        "    timeout tunnel 1h", "    timeout check 1s", "    retries 3", "    option redispatch", "    option tcpka",
        "frontend tstreams", '    bind "${TSTREAMS_BIND}"', "    default_backend tstreams_leader",
        "backend tstreams_leader", "    option httpchk GET /health/leader", "    http-check expect status 200",
        "    default-server inter 300ms fall 1 rise 1 on-marked-down shutdown-sessions",
    ]
    lines += [f'    server n{i} "${{TSTREAMS_SERVER{i}}}" check addr {host} port {port}'
              for i, port in enumerate(check_ports, 1)]
    out = Path(path)
    out.write_text("\n".join(lines) + "\n")
    return out
