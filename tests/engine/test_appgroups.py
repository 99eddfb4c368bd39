"""``engine/appgroups.py``: the applications found in an engine's state, read by seeking (the
cluster status page's applications panel): real Apps write their groups and offsets, the
overview shows their members, tasks and input lag, and its limits bound what it reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tstreams_embedded as ts
from tstreams_embedded.engine import ops as O
from tstreams_embedded.engine.appgroups import AppLimits, app_overview
from tstreams_embedded.streams import App, StreamsBuilder


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
