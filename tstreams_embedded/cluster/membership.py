"""Cluster membership changes, one node at a time (Raft's single-server change, §4.1 of
Ongaro's thesis).

The **size** quorums are counted on is replicated state, not a ZooKeeper setting read at
start-up: ``tstreams cluster init --nodes N±1`` rewrites ``P/config``; the leader, which
watches it, appends a **membership entry** (a :class:`~.messages.MembershipCall` holding the
new size) and counts acknowledgements on the new size from that entry on. Every node
records the size in its state (the ``cluster`` database, key :data:`MEMBERS_KEY`) in the same
LMDB transaction as it applies the entry, so the size travels with snapshots and survives
restarts, and elections count majorities on it.

A change of one node is safe whatever each node believes meanwhile: every majority of
``N`` nodes and every majority of ``N + 1`` nodes share a node, so two leaders can never
both gather a quorum. A change of more than one node at a time breaks that; ``cluster init``
refuses it (unless ``--force``, for a cluster that is down) and the leader never applies two
changes at once: it appends the next membership entry only after the previous one was
applied.
"""

from __future__ import annotations

import struct
from typing import Any

import lmdb

MEMBERS_KEY = b"\x00members"
_SIZE = struct.Struct(">Q")


def read_members(txn: lmdb.Transaction, cdb: Any) -> int | None:
    """The size recorded by the last applied membership entry (``None``: never changed)."""
    raw = txn.get(MEMBERS_KEY, db=cdb)
    return int(_SIZE.unpack(bytes(raw))[0]) if raw else None


def write_members(txn: lmdb.Transaction, cdb: Any, nodes: int) -> None:
    txn.put(MEMBERS_KEY, _SIZE.pack(int(nodes)), db=cdb)


def check_size_change(current: int, wanted: int, force: bool, where: str) -> None:
    """``InvalidArgument`` unless ``wanted`` differs from ``current`` by at most one node."""
    from .. import errors

    if abs(wanted - current) > 1 and not force:
        step = current + 1 if wanted > current else current - 1
        raise errors.InvalidArgument(
            f"{where} has {current} nodes: change its size one node at a time (--nodes {step}, wait until "
            f"'tstreams cluster status' shows it applied, then the next), or pass --force on a stopped cluster")


def settings_changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The names of the settings that differ between two ``P/config`` values."""
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
