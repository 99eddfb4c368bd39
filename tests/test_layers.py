"""The engine's layers, held against its imports: a lower layer that imports a higher one fails here.

:data:`LAYERS` is the one definition of the order (docs/ARCHITECTURE.md draws it). Each
sub-package of ``tstreams_embedded/engine/`` is a layer and names the layers it may import;
a layer may only name layers listed before it. The modules directly in ``engine/``
(``embedded.py``, which joins storage and the API for ``ts.open``, and the public paths kept
for documented imports) are the top. Imports are read with :mod:`ast`, so an import inside a
function or under ``TYPE_CHECKING`` counts the same as one at the top of the file.
``protocol/`` (records, layouts, checks) starts no threads: it imports no threading module
(:data:`WITHOUT_THREADS`); a thread belongs to the layer that runs it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tstreams_embedded

PACKAGE = "tstreams_embedded"
ENGINE = f"{PACKAGE}.engine"
ENGINE_DIR = Path(tstreams_embedded.__file__).parent / "engine"

#: Bottom to top: each layer and the layers it may import (besides itself).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("protocol", ()),  # records, the Backend contract, validation: what both sides share
    ("api", ("protocol",)),  # Engine and its agents: written against Backend only
    ("storage", ("protocol",)),  # Core on LMDB
    ("operator", ("protocol", "storage")),  # check, backup, overviews
    ("", ("protocol", "api", "storage", "operator")),  # engine/*.py: ts.open and kept public paths
)
#: Modules of the package outside engine/ that the engine may use: they import no engine code.
FOUNDATION = frozenset({"errors", "ids", "serde", "policies"})
#: Layers that a remote client loads: they must not need LMDB.
WITHOUT_LMDB = frozenset({"protocol", "api"})
#: Layers of pure definitions (records, layouts, checks): they start no threads.
WITHOUT_THREADS = frozenset({"protocol"})
#: The modules that start threads (or pools of them).
THREAD_MODULES = frozenset({"threading", "_thread", "concurrent.futures", "multiprocessing"})


def engine_modules() -> dict[str, Path]:
    """Every module of the engine by dotted name."""
    out = {}
    for path in sorted(ENGINE_DIR.rglob("*.py")):
        parts = list(path.relative_to(ENGINE_DIR).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([ENGINE, *parts])] = path
    return out


def layer_of(module: str) -> str:
    """The layer of an engine module: its sub-package, or "" for a module directly in engine/."""
    rest = module[len(ENGINE) + 1:].split(".") if module != ENGINE else []
    return rest[0] if len(rest) > 1 or (rest and (ENGINE_DIR / rest[0]).is_dir()) else ""


def imported_modules(module: str, path: Path) -> set[str]:
    """The dotted names a module imports (``from P import name`` counts ``P.name`` too, since
    ``name`` may be a sub-module)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return out


def layer_violations(modules: dict[str, Path]) -> list[str]:
    """One line per import of an engine module by a module whose layer may not import it."""
    allowed = {layer: {layer, *below} for layer, below in LAYERS}
    problems = []
    for module, path in modules.items():
        layer = layer_of(module)
        for target in sorted(imported_modules(module, path)):
            if not target.startswith(ENGINE + ".") or target not in modules:
                continue
            if layer_of(target) not in allowed[layer]:
                problems.append(f"{module} ({layer or 'top'}) imports {target} ({layer_of(target) or 'top'}), "
                                "which is not below it")
    return problems


def test_the_layer_order_names_only_layers_below():
    seen: set[str] = set()
    for layer, below in LAYERS:
        assert set(below) <= seen, f"{layer!r} may import {sorted(set(below) - seen)}, not listed before it"
        seen.add(layer)


def test_every_engine_module_is_in_a_layer():
    layers = {layer for layer, _ in LAYERS}
    strays = [m for m in engine_modules() if layer_of(m) not in layers]
    assert not strays, f"engine modules outside the layers of tests/test_layers.py: {strays}"


def test_no_layer_imports_a_higher_one():
    problems = layer_violations(engine_modules())
    assert not problems, "\n".join(problems)


def test_the_check_catches_an_upward_import(tmp_path: Path):
    """The check itself: storage importing the API is reported."""
    module = tmp_path / "core.py"
    module.write_text("from ..api.engine import Engine\n")
    modules = engine_modules()
    modules[f"{ENGINE}.storage.core"] = module
    assert f"{ENGINE}.storage.core (storage) imports {ENGINE}.api.engine (api), which is not below it" \
        in layer_violations(modules)


def test_the_engine_imports_only_foundation_modules_of_the_package():
    problems = []
    for module, path in engine_modules().items():
        for target in imported_modules(module, path):
            parts = target.split(".")
            if parts[0] == PACKAGE and len(parts) > 1 and parts[1] != "engine" and parts[1] not in FOUNDATION:
                problems.append(f"{module} imports {target}")
    assert not problems, "\n".join(sorted(problems))


@pytest.mark.parametrize("layer", sorted(WITHOUT_LMDB))
def test_client_side_layers_do_not_need_lmdb(layer: str):
    users = [m for m, path in engine_modules().items()
             if layer_of(m) == layer and any(t.split(".")[0] == "lmdb" for t in imported_modules(m, path))]
    assert not users, f"{layer} must not import lmdb (a remote client loads it): {users}"


def thread_users(modules: dict[str, Path], layer: str) -> list[str]:
    """The modules of ``layer`` that import a module of :data:`THREAD_MODULES` (or a part of one)."""
    return sorted(m for m, path in modules.items()
                  if layer_of(m) == layer and any(t == name or t.startswith(name + ".")
                                                  for t in imported_modules(m, path) for name in THREAD_MODULES))


@pytest.mark.parametrize("layer", sorted(WITHOUT_THREADS))
def test_pure_layers_start_no_threads(layer: str):
    users = thread_users(engine_modules(), layer)
    assert not users, f"{layer} must start no threads (a thread belongs to the layer that runs it): {users}"


def test_the_check_catches_a_thread_in_the_protocol(tmp_path: Path):
    """The check itself: a protocol module importing threading is reported."""
    module = tmp_path / "schedules.py"
    module.write_text("from threading import Thread\n")
    modules = engine_modules()
    modules[f"{ENGINE}.protocol.schedules"] = module
    assert thread_users(modules, "protocol") == [f"{ENGINE}.protocol.schedules"]


#: The rooms of the package (its sub-packages and top-level modules; "" is the package's
#: face, ``tstreams_embedded/__init__.py``), bottom to top: a room imports only rooms listed
#: before it, so every arrow runs down (what ``farm-studio look`` draws). ``listening``
#: (the ``--http`` helpers) sits below the console and the servers that serve it;
#: ``connecting`` (``ts.connect``) above the network layer and the cluster it picks from;
#: the library's rooms that open engines import ``engine.embedded`` or ``connecting``,
#: never the face.
ROOMS: tuple[str, ...] = (
    "errors", "policies", "retry", "ids", "serde", "listening",
    "engine", "streams", "tools", "console", "net", "cluster", "connecting",
    "commands", "aio", "spark",
    "",  # the face: ts.open, ts.connect, the public names
    "quickstart", "testing", "cli", "demo", "clidocs",
)
PACKAGE_DIR = ENGINE_DIR.parent


def package_modules() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    out = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([PACKAGE, *parts])] = path
    return out


def room_of(module: str) -> str:
    """The room of a module of the package: its first name under the package ("" for the face)."""
    return module.split(".")[1] if module.count(".") else ""


def rooms_imported(module: str, path: Path) -> set[str]:
    """The rooms a module imports; ``from tstreams_embedded import errors`` is the room
    ``errors``, ``import tstreams_embedded`` or ``from tstreams_embedded import connect`` the face."""
    rooms = set(ROOMS)
    out = set()
    for name in imported_modules(module, path):
        parts = name.split(".")
        if parts[0] != PACKAGE:
            continue
        if len(parts) == 1:
            continue  # ``from tstreams_embedded import x`` also yields tstreams_embedded.x: judged there
        out.add(parts[1] if parts[1] in rooms and parts[1] else "")
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import) and any(alias.name == PACKAGE for alias in node.names):
            out.add("")
    return out


def room_violations(modules: dict[str, Path]) -> list[str]:
    """One line per import of a room that is not below the importing module's room."""
    rank = {room: i for i, room in enumerate(ROOMS)}
    problems = []
    for module, path in modules.items():
        room = room_of(module)
        for target in sorted(rooms_imported(module, path)):
            if target != room and rank[target] > rank[room]:
                problems.append(f"{module} ({room or 'the face'}) imports {target or 'the face'}, which is above it")
    return problems


def test_every_room_of_the_package_is_in_the_order():
    strays = sorted({room_of(m) for m in package_modules()} - set(ROOMS))
    assert not strays, f"rooms of the package outside ROOMS of tests/test_layers.py: {strays}"


def test_every_arrow_between_rooms_runs_down():
    problems = room_violations(package_modules())
    assert not problems, "\n".join(problems)


def test_the_check_catches_an_arrow_back_up(tmp_path: Path):
    """The check itself: the console importing the network layer's serve module, a library
    room and the face importing above them (what ``tstreams console`` and ``ts.connect`` did)."""
    cli = tmp_path / "cli.py"
    cli.write_text("from ..net.serve import listen_http\n")
    driver = tmp_path / "driver.py"
    driver.write_text("import tstreams_embedded as ts\n")
    face = tmp_path / "__init__.py"
    face.write_text("def connect():\n    from .net import connect\n")
    modules = {f"{PACKAGE}.console.cli": cli, f"{PACKAGE}.streams.driver": driver, PACKAGE: face}
    assert room_violations(modules) == [
        f"{PACKAGE}.console.cli (console) imports net, which is above it",
        f"{PACKAGE}.streams.driver (streams) imports the face, which is above it",
    ]
