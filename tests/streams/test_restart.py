"""Restart after SIGKILL without a ``static_id``: a real subprocess runs the app and is
SIGKILLed; the restart on the same host finds the dead member's process gone (PID not
running) and succeeds it at once, fenced by the leases' epochs — with ``run(until_idle=True)``
as with ``start()`` — instead of waiting out a 20 s lease. A live member on the same host is
never succeeded so, and ``run(until_idle=True)`` never returns while another member holds
a task with unprocessed input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded.engine.operator.appgroups import MEMBER
from tstreams_embedded.engine.storage.state_stores import unpack_lease
from tstreams_embedded.streams import App, send_records
from tstreams_embedded.streams.app_members import Membership, group_store, read_group
from tstreams_embedded.streams.process_id import ProcessId, host_key
from tstreams_embedded.testing import eventually

from .harness import WorkerProcess, read_envelopes
from .restart_worker import APP_ID, topology

WORKER = Path(__file__).resolve().parent / "restart_worker.py"
PARTITIONS = 4
LEASE_MS = 20_000  # far longer than any bound below: only succession can be that quick
BOUND_S = 10.0


def send(engine: ts.Engine, keys: list[str], value: int) -> None:
    send_records(engine, "in", [(k, value, value) for k in keys], key_serde="str", value_serde="json")


def counts(engine: ts.Engine) -> dict[str, int]:
    return dict(App(engine, application_id=APP_ID, topology=topology()).store("n").all())


class Worker(WorkerProcess):
    """The app in a subprocess (see ``restart_worker.py``)."""

    def __init__(self, data: str, lease_ms: int = LEASE_MS) -> None:
        super().__init__(WORKER, data, str(lease_ms))


KEYS = [f"k{i}" for i in range(12)]


def killed_worker(engine: ts.Engine, data: str) -> str:
    """Start the worker, let it process a first batch, SIGKILL it; its member id."""
    engine.create_stream("in", partitions=PARTITIONS)
    send(engine, KEYS, 1)
    worker = Worker(data)
    try:
        eventually(lambda: counts(engine) == dict.fromkeys(KEYS, 1), timeout=60, message="the worker processed")
        members = read_group(engine.backend, APP_ID, LEASE_MS).members
        assert len(members) == 1
        (dead,) = members
        process = members[dead].process
        assert process is not None and process.pid == worker.proc.pid and not process.is_dead_here()
    finally:
        worker.kill()
    send(engine, KEYS, 2)  # written after the kill: only the restart can process it
    return dead


def check_exactly_once(engine: ts.Engine, dead: str) -> None:
    assert counts(engine) == dict.fromkeys(KEYS, 2)
    copies = sorted((k, v) for k, v, _, _ in read_envelopes(engine, "copy"))
    assert copies == sorted((k.encode(), b"%d" % v) for k in KEYS for v in (1, 2))  # no missing, no duplicate
    lease = unpack_lease(engine.backend.store_get(group_store(APP_ID), MEMBER + dead.encode()))
    assert lease is not None and lease[2] == 0, "the dead member was succeeded (its lease ended), not expired"


@pytest.mark.timeout(120)
def test_run_until_idle_after_sigkill_processes_the_new_input_exactly_once(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    with ts.open(data, compaction_interval=None) as engine:
        dead = killed_worker(engine, data)
        app = App(engine, application_id=APP_ID, topology=topology(), lease_ms=LEASE_MS)
        metrics = app.run(until_idle=True)
        assert metrics.get("records") == len(KEYS)
        assert set(app.membership.held()) == set(range(PARTITIONS))
        check_exactly_once(engine, dead)
        app.close()


@pytest.mark.timeout(120)
def test_start_after_sigkill_takes_over_well_before_the_lease(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    with ts.open(data, compaction_interval=None) as engine:
        dead = killed_worker(engine, data)
        app = App(engine, application_id=APP_ID, topology=topology(), lease_ms=LEASE_MS).start()
        try:
            eventually(lambda: counts(engine) == dict.fromkeys(KEYS, 2), timeout=BOUND_S,
                       message=f"the restart did not succeed the dead member within {BOUND_S} s "
                               f"(lease {LEASE_MS / 1000} s)")
        finally:
            app.stop()
        check_exactly_once(engine, dead)


@pytest.mark.timeout(120)
def test_a_live_member_on_this_host_is_not_succeeded(tmp_path: Path) -> None:
    """A live worker and a member of this process split the tasks and keep them (same
    epochs) through many ticks; once the worker is SIGKILLed, the next tick succeeds it."""
    data = str(tmp_path / "data")
    with ts.open(data, compaction_interval=None) as engine:
        engine.create_stream("in", partitions=PARTITIONS)
        worker = Worker(data)
        try:
            here = Membership(engine.backend, APP_ID, PARTITIONS, lease_ms=LEASE_MS)
            # the worker holds every task; ours come when it hands them over (it ticks every 0.25 s)
            eventually(lambda: len(here.tick().members) == 2 and len(here.held()) == PARTITIONS // 2, timeout=60,
                       message="the two members did not split the tasks")
            before = read_group(engine.backend, APP_ID, LEASE_MS)
            theirs = {p: lease for p, lease in before.tasks.items() if lease[0] != here.member_id}
            assert len(theirs) == PARTITIONS // 2
            for _ in range(20):
                view = here.tick(force_renew=True)
                assert len(view.members) == 2
                assert {p: view.tasks[p][:2] for p in theirs} == {p: lease[:2] for p, lease in theirs.items()}
        finally:
            worker.kill()
        view = here.tick()  # the worker's process is gone: its tasks are taken at once, 20 s lease or not
        assert set(here.held()) == set(range(PARTITIONS))
        assert {p: e for p, e in here.held().items() if p in theirs} == {p: theirs[p][1] + 1 for p in theirs}
        assert set(read_group(engine.backend, APP_ID, LEASE_MS).members) == {here.member_id}
        here.leave()


def test_process_ids_judge_only_this_hosts_processes(tmp_path: Path) -> None:
    me = ProcessId.current()
    assert me.host == host_key() and me.pid == os.getpid()
    assert not me.is_dead_here()
    assert ProcessId(me.host, me.pid, me.started - 5).is_dead_here()  # PID reused by another process
    assert not ProcessId("elsewhere|boot|ns", me.pid, me.started - 5).is_dead_here()  # another host: unknown
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = ProcessId(me.host, child.pid, 0.0)
    child.wait()
    assert started.is_dead_here()  # reaped: no such process
    assert ProcessId.from_wire(me.to_wire()) == me
    assert ProcessId.from_wire(["h", "1", 2.0]) is None and ProcessId.from_wire(None) is None


def test_run_until_idle_waits_for_another_members_task_with_input(tmp_path: Path) -> None:
    """An instance that ran until idle and was never closed (as a process on another host that
    died: this process is alive, so it is not succeeded) holds the only task; a second
    instance's ``run(until_idle=True)`` waits for its lease to run out, then processes."""
    with ts.open(str(tmp_path / "data")) as engine:
        engine.create_stream("in", partitions=1)
        send(engine, ["a"], 1)
        first = App(engine, application_id=APP_ID, topology=topology(), lease_ms=500)
        first.run()
        send(engine, ["a", "b"], 2)
        second = App(engine, application_id=APP_ID, topology=topology(), lease_ms=500)
        assert second.run(until_idle=True).get("records") == 2
        assert counts(engine) == {"a": 2, "b": 1}
        assert set(second.membership.held()) == {0}
        first.close()
        second.close()
