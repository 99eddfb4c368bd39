"""The node's roles see the node through a narrow protocol of their own, never by importing
cluster/node.py (which builds them): the imports run one way, node -> roles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tstreams_embedded.cluster as cluster

ROLES = ["applier", "election", "follower", "replication", "writes"]


@pytest.mark.parametrize("module", ROLES)
def test_a_role_does_not_import_the_node(module: str) -> None:
    tree = ast.parse((Path(cluster.__file__).parent / f"{module}.py").read_text(encoding="utf-8"))
    imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert "node" not in imported, f"cluster/{module}.py imports cluster/node.py: type its node by a Protocol"
