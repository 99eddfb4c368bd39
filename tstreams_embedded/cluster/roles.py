"""A cluster node's role (the ``/status`` and metrics value is the string)."""

from __future__ import annotations

from enum import Enum


class Role(str, Enum):
    FOLLOWER = "follower"  # follows the leader ZooKeeper names (or waits for one)
    CANDIDATE = "candidate"  # holds the election lock, bumped the epoch, asks the others' positions
    LEADER = "leader"  # leads its epoch (a :class:`.leader.LeaderState` exists)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
