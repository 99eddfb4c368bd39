"""Servers of the network suite; ``run_requests`` drives them with client processes.

Each system starts its server process(es) in :meth:`open` (once per run of the suite) and
stops them by PID in :meth:`close`. ``run_requests(kind, clients, target, ...)`` runs
``clients`` client processes of ``kind`` (see :func:`benchmarks.net._client`) against the
server and reports requests per second, per-request latency and server CPU per request.
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.measure import free_port
from benchmarks.net import (
    HAPROXY,
    Proc,
    echo_server,
    moebius_server,
    prepare_stream,
    run_clients,
    start_haproxy,
    start_ours,
)
from benchmarks.systems.base import Outcome, System


class _Served(System):
    """A system reached at ``self.endpoints[target]``, whose server PIDs are ``self.pids[target]``."""

    def __init__(self, workdir) -> None:  # noqa: ANN001
        super().__init__(workdir)
        self.procs: list[Proc] = []
        self.endpoints: dict[str, str] = {}
        self.pids: dict[str, list[int]] = {}

    def close(self) -> None:
        procs, self.procs = self.procs, []
        for p in procs:
            p.stop()

    def server_pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def run_requests(self, kind: str, clients: int, target: str, warmup: float, measure: float, window: int,
                     settle: float) -> Outcome:
        cfg = {"warmup": warmup, "measure": measure, "window": window, "settle": settle}
        r = run_clients(kind, self.endpoints[target], clients, cfg, self.pids[target])
        out = Outcome(r["requests"], r["requests"] / r["rate"] if r["rate"] else 0.0, stored=r["requests"],
                      expected=r["requests"] if r["requests"] else -1)
        out.latency = {k: r[k] for k in ("p50_ms", "p99_ms", "n") if k in r}
        out.extra["server_cpu_us_per_req"] = r["server_cpu_us_per_req"]
        return out


class _ForkedServer(_Served):
    """A baseline server loop run in a forked process (``target(bind, ready)``)."""

    @staticmethod
    def target(bind: str, ready: Any) -> None:
        raise NotImplementedError

    def open(self) -> None:
        p = Proc(type(self).target, f"tcp://127.0.0.1:{free_port()}")
        self.procs.append(p)
        self.endpoints[""], self.pids[""] = p.bind, [p.pid]


class EchoServer(_ForkedServer):
    name = "echo-server"
    label = "echo (same Server loop, no engine)"
    description = "tstreams_embedded.net.server.Server with handlers that do nothing"
    target = staticmethod(echo_server)


class MoebiusServer(_ForkedServer):
    name = "moebius-server"
    label = "Moebius-style loop (JSON echo)"
    description = "zmq.Poller, one message per wakeup, JSON, linear handler scan, ROUTER_MANDATORY"
    target = staticmethod(moebius_server)


class OursServe(_Served):
    name = "ours-serve"
    label = "tstreams serve (async durability)"
    description = "tstreams serve --durability async"
    is_ours = True
    durability = "async"
    extra_args: tuple[str, ...] = ()

    def open(self) -> None:
        p = start_ours(self.workdir / "data", free_port(), self.durability, self.workdir, self.name, self.extra_args)
        self.procs.append(p)
        prepare_stream(p.bind)
        self.endpoints[""], self.pids[""] = p.bind, [p.pid]


class OursServeSync(OursServe):
    name = "ours-serve-sync"
    label = "tstreams serve (sync durability)"
    description = "tstreams serve --durability sync"
    durability = "sync"


class OursServeBefore(OursServe):
    """The settings of before wire protocol 3 (issue 19 item 4, pieces): ``--rcvhwm 64`` and
    whole requests up to 16 MiB in one message (``--max-msg-size`` 16 MiB): the baseline of
    what pieces and the smaller ``--rcvhwm`` (16) cost per request."""

    name = "ours-serve-before"
    label = "tstreams serve (async), before pieces (rcvhwm 64, 16 MiB messages)"
    description = "tstreams serve --durability async --rcvhwm 64 --max-msg-size 16MiB"
    extra_args = ("--rcvhwm", "64", "--max-msg-size", str(16 << 20))


class OursHAProxy(_Served):
    """Two ``tstreams serve`` processes on one data directory behind HAProxy; ``target`` is
    ``direct`` (the first server) or ``proxy`` (HAProxy's front end)."""

    name = "ours-haproxy"
    label = "tstreams serve x2 behind HAProxy"
    description = "cluster/haproxy.cfg (TCP mode) in front of 2 tstreams serve (async) on one data directory"
    is_ours = True

    def open(self) -> None:
        shared = self.workdir / "shared"
        a, b = free_port(), free_port()
        s1 = start_ours(shared, a, "async", self.workdir, "s1")
        self.procs.append(s1)
        s2 = start_ours(shared, b, "async", self.workdir, "s2")
        self.procs.append(s2)
        front = start_haproxy(free_port(), [a, b], self.workdir)
        self.procs.append(front)
        prepare_stream(s1.bind)
        self.endpoints = {"direct": s1.bind, "proxy": front.bind}
        self.pids = {"direct": [s1.pid], "proxy": [front.pid, s1.pid, s2.pid]}

    @classmethod
    def available(cls) -> str | None:
        return None if os.path.exists(HAPROXY) else "haproxy is not installed (apt-get install haproxy)"

