"""One engine on either backend: embedded (``ts.open``) or served (``tstreams serve`` in
a child process plus ``ts.connect``), so that one test body runs against both."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .server_process import ServeProcess

if TYPE_CHECKING:
    from tstreams_embedded.engine.api.engine import Engine

#: The backends :func:`engine_on` knows, in the order the pytest plugin runs them.
BACKENDS: tuple[str, ...] = ("embedded", "served")

#: Options of ``ts.open`` that a served engine takes from the server's command line or not
#: at all; everything else is passed to ``ts.connect``.
SERVER_SIDE_OPTIONS = frozenset({"durability", "compaction_interval", "map_size", "clock"})


@contextmanager
def engine_on(backend: str, directory: str | os.PathLike[str], *, connect_timeout: float = 30.0,
              on_server: Callable[[ServeProcess], None] | None = None, **options: Any) -> Iterator[Engine]:
    """An :class:`~tstreams_embedded.Engine` on ``backend`` with its data in ``directory``;
    closed (and its server stopped) on leaving the block.

    * ``"embedded"``: ``ts.open(directory/"data", **options)``.
    * ``"served"``: a :class:`ServeProcess` on ``directory/"data"`` (``durability`` goes to
      its command line; ``clock``, ``compaction_interval`` and ``map_size`` cannot be
      given), then ``ts.connect(endpoint, timeout=connect_timeout, **options)``.
      ``on_server`` is called with the running server.
    """
    import tstreams_embedded as ts

    root = Path(directory)
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    if backend == "embedded":
        with ts.open(data, **options) as engine:
            yield engine
        return
    if backend == "served":
        server_side = {k: options.pop(k) for k in list(options) if k in SERVER_SIDE_OPTIONS}
        durability = server_side.pop("durability", "sync")
        if server_side:
            raise ValueError(f"options {sorted(server_side)} cannot be given to a served engine")
        with ServeProcess(data, root, durability=durability) as server:
            if on_server is not None:
                on_server(server)
            engine = server.connect(timeout=connect_timeout, **options)
            try:
                yield engine
            finally:
                engine.close()
        return
    raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
