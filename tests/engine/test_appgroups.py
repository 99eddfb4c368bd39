"""``engine/operator/appgroups.py``: the applications found in an engine's state, read by seeking (the
cluster status page's applications panel): real Apps write their groups and offsets, the
overview shows their members, tasks and input lag, and its limits bound what it reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded.engine.operator.appgroups import INFO, MEMBER, AppLimits, app_overview, group_store, task_key
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.streams import App, StreamsBuilder

TASKS = 4
#: a group: each member's liveness, then each task's lease: None (no lease), "free" (released)
#: or the index of the member holding it
groups = st.tuples(st.lists(st.booleans(), max_size=3),
                   st.lists(st.one_of(st.none(), st.just("free"), st.integers(0, 2)), min_size=TASKS,
                            max_size=TASKS))
app_names = st.sampled_from(["a", "a-b", "ab", "b", "b.c", "zz"])
loose_stores = st.lists(st.sampled_from(["loose", "a/0/s", "x/y", "a-b/global/t", "zz/3/n", "b.c"]), max_size=4)


def topology() -> Any:
    b = StreamsBuilder()
    b.stream("in", value_serde="bytes").map_values(len).to("sizes")
    return b.build()


def test_apps_with_their_members_tasks_and_lag(tmp_path: Path) -> None:
    with ts.open(str(tmp_path), durability="async") as engine:
        core: Any = engine.backend
        engine.create_stream("in", partitions=3)
        producer = engine.producer("in")
        for i in range(6):
            producer.instant([f"item {i}".encode()], partition=i % 3)
        # stores that belong to no application: skipped by seeking past them
        core.submit([O.StoreWrite("loose", [[b"k", b"v"]]), O.StoreWrite("x/y", [[b"k", b"v"]]),
                     O.StoreWrite("zz/0/s", [[b"k", b"v"]])])
        alpha = App(engine, application_id="alpha", topology=topology(), lease_ms=60_000)
        alpha.run()  # processed everything; still a member until close
        beta = App(engine, application_id="beta", topology=topology(), lease_ms=60_000)
        beta.run()
        beta.close()  # left the group: its tasks are free
        for i in range(4):
            producer.instant([f"more {i}".encode()], partition=0)  # alpha and beta lag 4 on partition 0

        ov = app_overview(core.store, core.now_ms())
        assert [a.application_id for a in ov.apps] == ["alpha", "beta"] and not ov.truncated
        a, b = ov.apps
        assert [(m.member_id, m.live, m.tasks) for m in a.members] == [(alpha.membership.member_id, True, [0, 1, 2])]
        assert a.unassigned == []
        assert [(lag.stream, lag.partition, lag.lag_txns) for lag in a.lag] == [("in", 0, 4), ("in", 1, 0),
                                                                                ("in", 2, 0)]
        assert all(not m.live and m.tasks == [] for m in b.members) and b.unassigned == [0, 1, 2]
        assert [lag.lag_txns for lag in b.lag] == [4, 0, 0]

        # the limits bound what is read, and say so
        one = app_overview(core.store, core.now_ms(), AppLimits(apps=1))
        assert [x.application_id for x in one.apps] == ["alpha"] and one.truncated
        few = app_overview(core.store, core.now_ms(), AppLimits(seeks=2))
        assert few.truncated and len(few.apps) <= 1
        capped = app_overview(core.store, core.now_ms(), AppLimits(count_cap=2, partitions=2))
        assert [lag.lag_txns for lag in capped.apps[0].lag] == [2, 0] and capped.truncated
        unbudgeted = app_overview(core.store, core.now_ms(), AppLimits(scan_budget=0))
        assert all(lag.lag_txns is None for x in unbudgeted.apps for lag in x.lag)
        entries = app_overview(core.store, core.now_ms(), AppLimits(group_entries=1))
        assert all(x.truncated for x in entries.apps)
        alpha.close()
        assert all(not m.live for x in app_overview(core.store, core.now_ms()).apps for m in x.members)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(apps=st.dictionaries(app_names, groups, max_size=5), loose=loose_stores, max_apps=st.integers(1, 6))
def test_apps_found_by_seeking_equal_the_model(make_engine: Callable[..., ts.Engine],
                                               apps: dict[str, tuple[list[bool], list[Any]]], loose: list[str],
                                               max_apps: int) -> None:
    """Group tables written with the engine's own records, among stores of no application:
    the overview lists exactly the applications that have a group table, in store-name
    order, with each member's liveness and tasks, up to ``apps`` of them (then truncated)."""
    engine = make_engine()
    core: Any = engine.backend
    ops: list[O.Operation] = [O.StoreWrite(name, [[b"k", b"v"]]) for name in loose]
    expected: dict[str, tuple[list[tuple[str, bool, list[int]]], list[int]]] = {}
    for app, (members, tasks) in apps.items():
        store = group_store(app)
        ids = [f"{app}-m{i}" for i in range(len(members))]
        for member, live in zip(ids, members, strict=True):
            ops.append(O.Lease(store, MEMBER + member.encode(), member, 1, 60_000))
            ops.append(O.StoreWrite(store, [[INFO + member.encode(), msgpack.packb(["h", 1])]]))
            if not live:
                ops.append(O.Lease(store, MEMBER + member.encode(), member, 1, 0))
        held: dict[str, list[int]] = {m: [] for m in ids}
        unassigned = []
        for p, lease in enumerate(tasks):
            if lease is None or (isinstance(lease, int) and lease >= len(ids)):
                continue
            owner = "x" if lease == "free" else ids[lease]
            ops.append(O.Lease(store, task_key(p), owner, 1, 60_000))
            if lease == "free":
                ops.append(O.Lease(store, task_key(p), owner, 1, 0))
            if lease != "free" and members[lease]:
                held[owner].append(p)
            else:
                unassigned.append(p)
        if ops and any(getattr(op, "store", None) == store for op in ops):
            expected[app] = ([(m, live, held[m]) for m, live in sorted(zip(ids, members, strict=True))], unassigned)
    if ops:
        core.submit(ops)
    order = sorted(expected, key=lambda name: (name + "/").encode())
    ov = app_overview(core.store, core.now_ms(), AppLimits(apps=max_apps))
    assert [a.application_id for a in ov.apps] == order[:max_apps]
    if len(order) > max_apps:
        assert ov.truncated
    for a in ov.apps:
        members, unassigned = expected[a.application_id]
        assert [(m.member_id, m.live, m.tasks) for m in a.members] == members
        assert [(m.host, m.port) for m in a.members] == [("h", 1)] * len(members)
        assert a.unassigned == unassigned and a.lag == [] and not a.truncated
