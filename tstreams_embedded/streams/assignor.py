"""The sticky assignor: which live instance of an application runs which task.

A pure function of (task partitions, live members, current owners), so every instance
computes the same answer from the same lease table, without a leader:

* **balanced**: every member gets ``P // M`` or ``P // M + 1`` tasks;
* **sticky**: a task stays with its live owner whenever the balance allows it; the members
  that already hold the most tasks get the ``P % M`` larger quotas, so a member joining or
  leaving moves only the tasks it must (about ``P / M``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def assign(partitions: Iterable[int], members: Iterable[str], current: Mapping[int, str]) -> dict[int, str]:
    """``{partition: member}`` for every partition (empty when there are no members)."""
    parts = sorted(set(partitions))
    live = sorted(set(members))
    if not live:
        return {}
    held = {m: 0 for m in live}
    for p in parts:
        owner = current.get(p)
        if owner in held:
            held[owner] += 1
    base, extra = divmod(len(parts), len(live))
    order = sorted(live, key=lambda m: (-held[m], m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    out: dict[int, str] = {}
    taken = {m: 0 for m in live}
    for p in parts:
        owner = current.get(p)
        if owner in quota and taken[owner] < quota[owner]:
            out[p] = owner
            taken[owner] += 1
    for p in parts:
        if p not in out:
            m = max(live, key=lambda m: (quota[m] - taken[m], -live.index(m)))
            out[p] = m
            taken[m] += 1
    return out
