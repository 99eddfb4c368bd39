"""A real standalone ZooKeeper server on a free loopback port, in a directory of its own.

Needs Java and ZooKeeper's jars: Debian's ``zookeeper`` package (``/usr/share/java``),
a tarball pointed at by ``$ZOOKEEPER_PATH`` (its ``*.jar`` and ``lib/*.jar``), or an
explicit ``classpath``.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .ports import LOOPBACK, free_port
from .processes import ManagedProcess

if TYPE_CHECKING:
    from kazoo.client import KazooClient

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

#: Where the jars are looked for, in order (globs). The Debian jar's manifest names its
#: own dependencies; ``slf4j-simple`` makes the server log to the log file.
JAR_GLOBS: tuple[str, ...] = (
    "/usr/share/zookeeper/*.jar",
    "/usr/share/zookeeper/lib/*.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-simple.jar",
    "/usr/share/java/jline.jar",
    "/usr/share/java/metrics-core.jar",
    "/usr/share/java/snappy-java.jar",
    "/usr/share/java/commons-cli.jar",
    "/usr/share/java/commons-io.jar",
)


def zookeeper_classpath(zookeeper_path: str | os.PathLike[str] | None = None) -> list[str]:
    """The jars to run a ZooKeeper server: from ``zookeeper_path`` (or ``$ZOOKEEPER_PATH``:
    a tarball's directory, ``*.jar`` and ``lib/*.jar``) if given, else :data:`JAR_GLOBS`.
    Empty if no ZooKeeper jar was found."""
    root = zookeeper_path or os.environ.get("ZOOKEEPER_PATH")
    patterns = (f"{root}/*.jar", f"{root}/lib/*.jar") if root else JAR_GLOBS
    jars = list(dict.fromkeys(j for p in patterns for j in sorted(glob.glob(str(p)))))
    if not any("zookeeper" in os.path.basename(j) for j in jars):
        return []
    return jars


def four_letter_word(port: int, word: str = "ruok", host: str = LOOPBACK, timeout: float = 1.0) -> str:
    """Send a four-letter command (``ruok``, ``srvr``, ``stat``) and return the answer
    (``""`` if the server does not answer)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer(ManagedProcess):
    """A standalone ZooKeeper (``ZooKeeperServerMain``) on ``host:port`` (a free port by
    default), its configuration, data and log (``zookeeper.log``) in ``workdir`` (a new
    temporary directory by default, removed by :meth:`cleanup`).

    Ready when it serves clients (``srvr`` names its mode). Stopped by PID (SIGTERM, then SIGKILL).
    The admin HTTP server is off, and ``ruok``, ``srvr``, ``stat`` and ``mntr`` are allowed.

    >>> with ZooKeeperServer() as zk:                       # doctest: +SKIP
    ...     client = zk.client(); client.start(); client.ensure_path("/x"); client.stop()
    """

    name = "zookeeper"
    stop_timeout = 10.0

    def __init__(self, workdir: str | os.PathLike[str] | None = None, *, port: int | None = None,
                 host: str = LOOPBACK, classpath: Sequence[str] | None = None, java: str | None = None,
                 tick_time_ms: int = 500, heap_mb: int = 256, extra_config: dict[str, str] | None = None) -> None:
        self._owns_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="tstreams-zk-"))
        super().__init__(self.workdir / "zookeeper.log")
        self.host = host
        self.port = port or free_port(host)
        self.classpath = list(classpath) if classpath is not None else zookeeper_classpath()
        if not self.classpath:
            raise RuntimeError("ZooKeeper jars not found (Debian: apt-get install zookeeper; "
                               "or set ZOOKEEPER_PATH to an unpacked release)")
        java_exe = java or (os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME")
                            else shutil.which("java"))
        if not java_exe:
            raise RuntimeError("java not found (install a JRE or set JAVA_HOME)")
        self.java = java_exe
        self.tick_time_ms = tick_time_ms
        self.heap_mb = heap_mb
        self.extra_config = dict(extra_config or {})
        self.data_dir = self.workdir / "data"
        self.config_path = self.workdir / "zoo.cfg"

    @property
    def address(self) -> str:
        """``HOST:PORT``, a kazoo ``hosts`` string."""
        return f"{self.host}:{self.port}"

    hosts = address

    def config(self) -> dict[str, str]:
        """The ``zoo.cfg`` entries."""
        cfg = {
            "tickTime": str(self.tick_time_ms),
            "dataDir": str(self.data_dir),
            "clientPort": str(self.port),
            "clientPortAddress": self.host,
            "maxClientCnxns": "0",
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,stat,mntr",
        }
        cfg.update(self.extra_config)
        return cfg

    def before_start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.config().items()))

    def command(self) -> list[str]:
        return [self.java, f"-Xmx{self.heap_mb}m", "-Dzookeeper.jmx.log4j.disable=true",
                "-Dorg.slf4j.simpleLogger.showDateTime=true", "-cp", os.pathsep.join(self.classpath),
                MAIN_CLASS, str(self.config_path)]

    def is_ready(self) -> bool:
        """Whether the server serves clients: ``srvr`` names its mode. (``ruok`` answers
        ``imok`` as soon as the process listens, while a restarting server still loads its
        data and closes every client connection for a second or more.)"""
        return "Mode: " in four_letter_word(self.port, "srvr", self.host)

    def client(self, **options: Any) -> KazooClient:
        """A (not yet started) ``kazoo.client.KazooClient`` for this server."""
        from kazoo.client import KazooClient

        options.setdefault("timeout", 10.0)
        return KazooClient(hosts=self.address, **options)

    def cleanup(self) -> None:
        """Stop, then remove ``workdir`` if this object created it."""
        self.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
