"""An in-process server on its own thread and IOLoop, for tests of the framework itself."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import zmq
from tornado.ioloop import IOLoop

from tstreams_embedded.net.registry import Registry
from tstreams_embedded.net.server import Server, ServerOptions


class ThreadServer:
    """``Server(registry)`` bound to a free loopback port, served by a background thread."""

    def __init__(self, registry: Registry, options: ServerOptions | None = None, **kw: Any) -> None:
        self.ctx = zmq.Context()
        self.server = Server(registry, "tcp://127.0.0.1:*", options, context=self.ctx, **kw)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "server thread did not start"
        self.endpoint = self.server.endpoints[0]

    def _run(self) -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        self.loop = IOLoop.current()
        self.server.start(self.loop)
        self._ready.set()
        self.loop.start()
        self.loop.close(all_fds=False)

    def call_in_loop(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the server loop and return its result."""
        box: list = []
        done = threading.Event()

        def run() -> None:
            box.append(fn(*args))
            done.set()

        self.loop.add_callback(run)
        assert done.wait(10)
        return box[0]

    def stats(self) -> dict[str, Any]:
        return self.call_in_loop(self.server.server_stats)

    def stop(self) -> None:
        if self.server.stopped:
            return
        self.loop.add_callback(lambda: self.server.stop(5.0, on_stopped=self.loop.stop))
        self._thread.join(15)
        self.ctx.term()
