"""The module paths that the README and docs/BACKUP.md document keep working after the engine
moved into layer sub-packages (``engine/ops.py``, ``iteration.py`` and ``backup.py`` re-export)."""

from __future__ import annotations

import importlib

import pytest

import tstreams_embedded.engine
from tstreams_embedded.engine.operator import backup as operator_backup
from tstreams_embedded.engine.protocol import iteration as protocol_iteration
from tstreams_embedded.engine.protocol import ops as protocol_ops


@pytest.mark.parametrize(("documented", "module", "names"), [
    ("tstreams_embedded.engine.ops", protocol_ops,
     ["Instant", "Open", "Data", "Checkpoint", "SetOffsets", "Opcode", "TxnState", "encode", "decode", "pack_items"]),
    ("tstreams_embedded.engine.iteration", protocol_iteration, ["iter_transactions"]),
    ("tstreams_embedded.engine.backup", operator_backup, ["backup", "restore", "Archiver"]),
])
def test_documented_paths_give_the_same_objects(documented: str, module: object, names: list[str]) -> None:
    public = importlib.import_module(documented)
    for name in names:
        assert getattr(public, name) is getattr(module, name), f"{documented}.{name}"


def test_from_engine_import_backup_as_docs_backup_shows() -> None:
    from tstreams_embedded.engine import backup

    assert backup.backup is operator_backup.backup and tstreams_embedded.engine.backup is backup
