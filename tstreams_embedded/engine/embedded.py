"""Opening the embedded engine: ``ts.open(path)``.

LMDB allows one environment per file per process, so this module keeps a per-process
registry of open :class:`~.core.Core` instances by directory. Opening the same directory
again shares its Core; each :class:`~.engine.Engine` handle is closed on its own and the
Core closes with the last one.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .. import errors
from .core import Core
from .engine import DEFAULT_TXN_TTL, Engine

_registry_lock = threading.Lock()
_registry: dict[str, tuple[Core, int]] = {}


def _acquire(key: str, durability: str, core_options: dict[str, Any]) -> Core:
    with _registry_lock:
        if key in _registry and not _registry[key][0].closed:
            core, refs = _registry[key]
            if core.durability != durability:
                raise errors.EngineBusy(f"{key!r} is already open in this process with durability={core.durability!r}")
            _registry[key] = (core, refs + 1)
        else:
            core = Core(key, durability, **core_options)
            _registry[key] = (core, 1)
        return core


def _release(key: str, core: Core) -> None:
    with _registry_lock:
        c, refs = _registry.get(key, (core, 1))
        if refs <= 1:
            _registry.pop(key, None)
            c.close()
        else:
            _registry[key] = (c, refs - 1)


def open_engine(path: str | os.PathLike[str], durability: str = "sync", *, txn_ttl: float = DEFAULT_TXN_TTL,
                keepalive_interval: float | None = -1, **core_options: Any) -> Engine:
    """Open (creating if needed) the engine in directory ``path``.

    ``durability`` is ``"sync"``, ``"strict"`` or ``"async"`` (see :class:`~.core.Core`);
    ``core_options`` are :class:`~.core.Core`'s keyword options (``map_size``,
    ``max_item_size``, ``clock``, ``compaction_interval``, ``log_retention``, …). Opening the
    same directory again in one process shares the underlying environment.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise errors.InvalidArgument(f"path must be a string or path, got {type(path).__name__}")
    key = os.path.realpath(os.fspath(path))
    core = _acquire(key, durability, core_options)
    return Engine(core, txn_ttl=txn_ttl, keepalive_interval=keepalive_interval, on_close=lambda: _release(key, core))
