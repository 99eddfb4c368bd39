"""Opening the embedded engine: ``ts.open(path)``.

LMDB allows one environment per file per process, so this module keeps a per-process
registry of open :class:`~.storage.core.Core` instances by process ID and directory. Opening the
same directory again shares its Core (with the same storage options, or
:class:`~tstreams_embedded.errors.EngineBusy` naming the one that differs; per-handle
options such as ``txn_ttl`` may differ); each :class:`~.api.engine.Engine` handle is closed on
its own and the Core closes with the last one.

After ``fork()``, the child never uses (nor closes) an environment inherited from its
parent: LMDB forbids it, and a lock held by a parent thread at the fork would hang it. Its
first ``ts.open`` of a directory opens a new environment.
"""

from __future__ import annotations

import inspect
import os
import threading
from typing import Any

from .. import errors
from .api.engine import DEFAULT_TXN_TTL, Engine, check_handle_options
from .storage.core import Core
from .storage.directory import DATA_FILE, is_data_directory

#: Core's keyword options and their defaults (what a second open is compared with)
CORE_OPTIONS: dict[str, Any] = {
    name: p.default for name, p in inspect.signature(Core.__init__).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY
}

_registry_lock = threading.Lock()
#: (process id, real path) -> (core, handles, effective options)
_registry: dict[tuple[int, str], tuple[Core, int, dict[str, Any]]] = {}
#: Cores inherited through fork(): kept referenced forever, so that the child never closes
#: (nor frees) its parent's LMDB environment.
_inherited: list[Core] = []


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()  # it may have been held by a parent thread
    for core, _, _ in _registry.values():  # already closed by core's own fork hook
        _inherited.append(core)
    _registry.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _options(core_options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(core_options) - set(CORE_OPTIONS))
    if unknown:
        raise errors.InvalidArgument(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(CORE_OPTIONS)}")
    return {**CORE_OPTIONS, **core_options}


def _differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    out = []
    for name in a:
        x, y = a[name], b[name]
        if (x is not y) if callable(x) or callable(y) else x != y:
            out.append(name)
    return out


def _acquire(key: str, durability: str, core_options: dict[str, Any]) -> Core:
    options = _options(core_options)
    with _registry_lock:
        rkey = (os.getpid(), key)
        entry = _registry.get(rkey)
        if entry is not None and not entry[0].closed:
            core, refs, opened_with = entry
            if core.durability != durability:
                raise errors.EngineBusy(f"{key!r} is already open in this process with durability={core.durability!r}")
            differ = _differing(opened_with, options)
            if differ:
                shown = ", ".join(f"{n}={opened_with[n]!r}" for n in differ)
                raise errors.EngineBusy(
                    f"{key!r} is already open in this process with {shown}; open it with the same "
                    f"storage options ({', '.join(differ)} differ) or close the other handles first"
                )
            _registry[rkey] = (core, refs + 1, opened_with)
        else:
            core = Core(key, durability, **core_options)
            _registry[rkey] = (core, 1, options)
        return core


def _release(key: str, core: Core) -> None:
    with _registry_lock:
        rkey = (os.getpid(), key)
        entry = _registry.get(rkey)
        if entry is None or entry[0] is not core:
            if not core.closed and core not in _inherited:
                core.close()
            return
        c, refs, options = entry
        if refs <= 1:
            _registry.pop(rkey, None)
            c.close()
        else:
            _registry[rkey] = (c, refs - 1, options)


def open_engine(path: str | os.PathLike[str], durability: str = "sync", *, txn_ttl: float = DEFAULT_TXN_TTL,
                keepalive_interval: float | None = -1, create: bool = True, **core_options: Any) -> Engine:
    """Open (creating if needed) the engine in directory ``path``.

    With ``create=False`` the directory must already be an initialised tstreams data
    directory (it holds a non-empty ``data.mdb``): otherwise
    :class:`~tstreams_embedded.errors.DataDirectoryNotFound` is raised and nothing is
    created (no directory, no file). Read-only tools open with it, so that a mistyped path
    is an error rather than a new, empty engine.

    ``durability`` is ``"sync"``, ``"strict"`` or ``"async"`` (see :class:`~.storage.core.Core`);
    ``core_options`` are :class:`~.storage.core.Core`'s keyword options (``map_size``,
    ``max_item_size``, ``clock``, ``compaction_interval``, ``log_retention``,
    ``log_retention_bytes``, …). Opening the
    same directory again in one process shares the underlying environment; its storage
    options must then be the same (:class:`EngineBusy` names the one that differs). Every
    option is validated first: a failed open leaves nothing open and no thread running.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise errors.InvalidArgument(f"path must be a string or path, got {type(path).__name__}")
    if not os.fspath(path):
        raise errors.InvalidArgument("path must not be empty (use '.' for the current directory)")
    if not isinstance(create, bool):
        raise errors.InvalidArgument(f"create must be True or False, got {create!r}")
    check_handle_options(txn_ttl, keepalive_interval)
    key = os.path.realpath(os.fspath(path))
    if not create and not is_data_directory(key):
        raise errors.DataDirectoryNotFound(f"{os.fspath(path)!r} is not a tstreams data directory "
                                           f"(no {DATA_FILE} with data in it)")
    core = _acquire(key, durability, core_options)
    try:
        return Engine(core, txn_ttl=txn_ttl, keepalive_interval=keepalive_interval,
                      on_close=lambda: _release(key, core))
    except BaseException:
        _release(key, core)
        raise
