"""One engine per Python process and target, opened lazily where the work runs.

Spark pickles readers and writers and runs them in Python worker processes (executors)
and in a long-lived driver-side Python process. Neither an LMDB environment nor a ZeroMQ
socket may cross a pickle or a ``fork``, so every ``read()``/``write()``/``commit()`` asks
:func:`engine_for` here, which opens the engine on first use in *this* process and keeps it
for the life of the (reused) worker. LMDB also forbids opening one environment twice in a
process, which the cache prevents.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from ..connecting import connect
from ..engine.embedded import open_engine
from ..errors import InvalidArgument
from .options import Target

_lock = threading.Lock()
_engines: dict[tuple[int, str, str], Any] = {}


def engine_for(target: Target) -> Any:
    """The engine (``ts.open`` or ``ts.connect``) for ``target`` in this process."""
    kind, where = ("path", target.path) if target.path else ("endpoint", target.endpoint)
    assert where is not None
    key = (os.getpid(), kind, where)
    with _lock:
        engine = _engines.get(key)
        if engine is not None:
            return engine
        if kind == "path":
            if not os.path.isdir(where):
                raise InvalidArgument(
                    f"option 'path': {where!r} is not an engine directory (it does not exist); "
                    "Spark executors must see the same local directory (local mode / shared host), "
                    "otherwise use option 'endpoint'"
                )
            engine = open_engine(where)
        else:
            try:
                engine = connect(where, timeout=target.timeout)
            except TypeError:
                engine = connect(where)
        _engines[key] = engine
        return engine


def close_all() -> None:
    """Close every engine this process opened (registered with :mod:`atexit`)."""
    with _lock:
        items = [(k, e) for k, e in _engines.items() if k[0] == os.getpid()]
        _engines.clear()
    for _, engine in items:
        try:
            engine.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


atexit.register(close_all)
