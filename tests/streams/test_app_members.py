"""Scale-out in one process, embedded and served: instances split the tasks, hand them over
when one leaves, take them when one stops renewing, and a task whose lease was taken can
never commit (its work is redone from the last commit by the new holder)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.streams import App, StreamsBuilder, send_records
from tstreams_embedded.streams.app_members import group_store, read_group, task_key
from tstreams_embedded.testing import eventually

PARTITIONS = 4


def totals_topology(on_record: Any = None) -> Any:
    b = StreamsBuilder()
    s = b.stream("in", key_serde="str", value_serde="json")
    if on_record is not None:
        s = s.peek(on_record)
    s.group_by_key(key_serde="str").aggregate(lambda: 0, lambda k, v, t: t + v, store="totals")
    s.to("copy", key_serde="str", value_serde="json")
    return b.build()


def feed(engine: ts.Engine, start: int, n: int) -> dict[str, int]:
    records = [(f"k{i % 10}", i, i) for i in range(start, start + n)]
    send_records(engine, "in", records, key_serde="str", value_serde="json")
    out: dict[str, int] = defaultdict(int)
    for k, v, _ in records:
        out[k] += v
    return out


def copies(engine: ts.Engine) -> list[int]:
    got = []
    for p in range(engine.get_stream("copy").partitions):
        got.extend(len(t.items) for t in engine.backend.transactions_range("copy", p, 0, 2**63 - 1))
    return got


def owners(engine: ts.Engine, app_id: str) -> dict[int, str | None]:
    view = read_group(engine.backend, app_id, 1000)
    return {p: view.owner(p) for p in range(PARTITIONS)}


def test_instances_split_hand_over_and_take_over(tstreams_engine: ts.Engine) -> None:
    engine = tstreams_engine
    engine.create_stream("in", partitions=PARTITIONS)
    expected = feed(engine, 0, 200)
    a = App(engine, application_id="g", topology=totals_topology(), lease_ms=600).start()
    b = App(engine, application_id="g", topology=totals_topology(), lease_ms=600).start()
    try:
        eventually(lambda: sorted(owners(engine, "g").values(), key=str) ==
                   sorted([a.membership.member_id] * 2 + [b.membership.member_id] * 2), timeout=30,
                   message="the two instances did not split 4 tasks 2 and 2")
        for k, v in feed(engine, 200, 200).items():
            expected[k] += v
        eventually(lambda: a.store("totals").all() == dict(expected), timeout=30)
        b.stop()  # leaves the group: a takes b's tasks at once (no lease to wait for)
        eventually(lambda: set(owners(engine, "g").values()) == {a.membership.member_id}, timeout=30)
        for k, v in feed(engine, 400, 100).items():
            expected[k] += v
        eventually(lambda: a.store("totals").all() == dict(expected), timeout=30)
    finally:
        a.stop()
        b.close()
    assert set(owners(engine, "g").values()) == {None}  # both left: every lease is free
    assert sum(copies(engine)) == 500  # each record copied exactly once


def test_a_task_whose_lease_was_taken_cannot_commit(tstreams_engine: ts.Engine) -> None:
    """While the task processes a record, its lease expires and another owner takes it: the
    commit is refused (nothing of it is written), the app drops the task, takes the lease
    back when the thief's lease expires, and redoes the work from the last commit."""
    engine = tstreams_engine
    engine.create_stream("in")
    backend = engine.backend
    stolen: list[int] = []
    store = group_store("fenced")

    def steal(key: str, value: int) -> None:
        if value == 7 and not stolen:
            lease = read_group(backend, "fenced", 1000).tasks[0]
            eventually(lambda: backend.now_ms() > lease[2], timeout=10)  # our lease expired meanwhile
            stolen.append(lease[1] + 1)
            backend.submit([O.Lease(store, task_key(0), "thief", lease[1] + 1, 300)])

    expected = feed(engine, 0, 5)
    app = App(engine, application_id="fenced", topology=totals_topology(steal), lease_ms=200, commit_records=1)
    app.run()
    assert app.store("totals").all() == dict(expected)
    for k, v in feed(engine, 5, 10).items():
        expected[k] += v
    app.run()  # fenced at record 7, waits for the thief's lease to expire, takes it, redoes the rest
    assert stolen, "the lease was taken during processing"
    assert app.store("totals").all() == dict(expected)
    assert app.prometheus.registry.get_sample_value("tstreams_streams_fenced_commits_total",
                                                    {"app": "fenced", "partition": "0"}) == 1
    assert read_group(backend, "fenced", 1000).tasks[0][1] == stolen[0] + 1  # taken back: a new epoch
    assert sum(copies(engine)) == 15
    app.close()


def test_a_silent_instance_loses_its_tasks_within_the_lease(tstreams_engine: ts.Engine) -> None:
    """An instance that stops renewing (it ran until idle and was never closed, as a killed
    process) keeps its tasks only until its leases run out; then another instance takes them."""
    engine = tstreams_engine
    engine.create_stream("in", partitions=PARTITIONS)
    expected = feed(engine, 0, 40)
    first = App(engine, application_id="s", topology=totals_topology(), lease_ms=300)
    first.run()
    for k, v in feed(engine, 40, 40).items():
        expected[k] += v
    second = App(engine, application_id="s", topology=totals_topology(), lease_ms=300)
    second.run()  # waits for the first one's leases to expire, then takes every task
    assert set(owners(engine, "s").values()) <= {second.membership.member_id, None}
    assert second.store("totals").all() == dict(expected)
    assert sum(copies(engine)) == 80
    first.close()
    second.close()


@pytest.mark.timeout(40)
def test_a_static_member_is_succeeded_at_once(tstreams_engine: ts.Engine) -> None:
    """A restart with the same ``static_id`` takes its crashed predecessor's tasks at once
    (a 60 s lease is not waited for), and the predecessor is fenced."""
    engine = tstreams_engine
    engine.create_stream("in", partitions=PARTITIONS)
    expected = feed(engine, 0, 40)
    crashed = App(engine, application_id="st", topology=totals_topology(), lease_ms=60_000, static_id="node-1")
    crashed.run()  # never closed: as if its process were killed
    for k, v in feed(engine, 40, 40).items():
        expected[k] += v
    restarted = App(engine, application_id="st", topology=totals_topology(), lease_ms=60_000, static_id="node-1")
    restarted.run()
    assert restarted.store("totals").all() == dict(expected)
    assert set(owners(engine, "st").values()) == {restarted.membership.member_id}
    assert set(read_group(engine.backend, "st", 1000).members) == {restarted.membership.member_id}  # succeeded
    assert sum(copies(engine)) == 80
    crashed.close()  # the zombie's close commits nothing (its leases are gone) and frees nothing of the new one's
    assert set(owners(engine, "st").values()) == {restarted.membership.member_id}
    restarted.close()


@pytest.mark.parametrize("options", [{"lease_ms": 0}, {"lease_ms": "5"}, {"static_id": ""}, {"static_id": 3},
                                     {"http_port": 70_000}, {"http_port": True}, {"http_host": ""},
                                     {"instance_name": ""}])
def test_bad_scale_out_options(tstreams_embedded_engine: ts.Engine, options: dict[str, Any]) -> None:
    with pytest.raises(errors.InvalidArgument):
        App(tstreams_embedded_engine, application_id="bad", topology=totals_topology(), **options)


def test_bad_store_partitions(tstreams_embedded_engine: ts.Engine) -> None:
    tstreams_embedded_engine.create_stream("in", partitions=2)
    with App(tstreams_embedded_engine, application_id="bad", topology=totals_topology()) as app:
        for bad in ([2], [-1], ["0"], "0", [True]):
            with pytest.raises(errors.InvalidArgument):
                app.store("totals", partitions=bad)  # type: ignore[arg-type]
        assert app.store("totals", partitions=[1]).all() == {}
