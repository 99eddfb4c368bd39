"""Global tables under scale-out and failure: one fenced updater per application (the
holder of the global-table lease), a holder SIGKILLed while updates keep arriving, and an
updater that fails (a key too long to store) stopping the app instead of freezing the table."""

from __future__ import annotations

import os
import random
import shutil
import signal
import sys
import tempfile
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.storage.core import Core
from tstreams_embedded.engine.storage.state_stores import MAX_STORE_KEY, unpack_lease
from tstreams_embedded.streams import App, StreamsBuilder, global_table, send_records
from tstreams_embedded.streams.app_members import group_store
from tstreams_embedded.streams.global_table import (
    FETCH_TXNS,
    GLOBAL_LEASE,
    GlobalTables,
    GlobalTableUpdater,
    global_namespace,
)
from tstreams_embedded.streams.records import unpack_envelope
from tstreams_embedded.streams.serdes import serde
from tstreams_embedded.streams.stores import pages
from tstreams_embedded.testing import FakeClock, ServeProcess, eventually

from .harness import WorkerProcess, committed_transactions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from global_worker import APPLICATION  # noqa: E402

WORKER = Path(__file__).resolve().parent / "global_worker.py"
KEYS = ["de", "fr", "it", "es", "nl"]
STR, JSON = serde("str"), serde("json")


def lease_owner(engine: ts.Engine, application: str) -> str | None:
    """The owner of the live global-table lease (None: free or expired)."""
    lease = unpack_lease(engine.backend.store_get(group_store(application), GLOBAL_LEASE))
    if lease is None or not lease[0] or lease[2] <= engine.backend.now_ms():
        return None
    return lease[0]


def global_offsets(engine: ts.Engine, application: str, store: str, stream: str) -> dict[int, int]:
    return engine.backend.get_offsets(stream, f"{application}-global-{store}")


def global_rows(engine: ts.Engine, application: str, store: str, keys: list[str]) -> dict[str, Any]:
    ns = global_namespace(application, store)
    rows = {}
    for k in keys:
        data = engine.backend.store_get(ns, STR.serialize(k))
        if data is not None:
            rows[k] = JSON.deserialize(data)
    return rows


# -- two processes, the holder SIGKILLed ------------------------------------------------------
class Worker(WorkerProcess):
    def __init__(self, data: str, name: str) -> None:
        super().__init__(WORKER, data, name)
        self.name = name


def json_version(value: bytes) -> int:
    version: int = JSON.deserialize(value)["v"]
    return version


def steps_back(engine: ts.Engine, application: str, store: str,
               version_of: Callable[[bytes], int] = json_version) -> tuple[int, list[str]]:
    """Every write to a global store and its offsets, read back from the engine's commit log
    in commit order: how many writes there were, and each one that moved an offset or a
    row's version (``version_of`` its stored value) back."""
    core = engine.backend
    assert isinstance(core, Core)
    ns, consumer = global_namespace(application, store), f"{application}-global-{store}"
    offsets: dict[int, int] = {}
    versions: dict[bytes, int] = {}
    writes, back = 0, []
    seq = 0
    while entries := core.read_log(seq, 1000):
        for seq, _, ops in entries:
            for op in ops:
                if isinstance(op, O.SetOffsets) and op.consumer == consumer:
                    writes += 1
                    for p, o in op.offsets.items():
                        if o < offsets.get(p, 0):
                            back.append(f"log {seq}: offset of partition {p} {offsets[p]} -> {o}")
                        offsets[p] = o
                elif isinstance(op, O.StoreWrite) and op.store == ns:
                    for k, v in op.puts:
                        version = version_of(v)
                        if version < versions.get(k, -1):
                            back.append(f"log {seq}: row {k!r} v{versions[k]} -> v{version}")
                        versions[k] = version
        seq += 1
    return writes, back


class Writer(threading.Thread):
    """Writes global-table updates (each key's version grows) and orders until stopped."""

    def __init__(self, engine: ts.Engine, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.engine = engine
        self.rng = rng
        self.done = threading.Event()
        self.written: dict[str, set[int]] = defaultdict(set)  # key -> versions written
        self.model: dict[str, int] = {}  # key -> latest version
        self.orders: dict[str, str] = {}  # order id -> cc
        self.error: BaseException | None = None

    def run(self) -> None:
        v = 0
        try:
            while not self.done.is_set() and v < 300_000:
                updates = []
                for _ in range(3):
                    k = self.rng.choice(KEYS)
                    updates.append((k, {"v": v}, v))
                    self.written[k].add(v)
                    v += 1
                send_records(self.engine, "rates", updates, key_serde="str", value_serde="json")
                for k, row, _ in updates:
                    self.model[k] = row["v"]
                oid = f"o{len(self.orders)}"
                cc = self.rng.choice(KEYS)
                send_records(self.engine, "orders", [(oid, {"id": oid, "cc": cc}, v)], key_serde="str",
                             value_serde="json")
                self.orders[oid] = cc
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            self.error = exc


@pytest.mark.timeout(300)
@pytest.mark.parametrize("deployment", ["directory", "served"])
def test_global_table_updater_holder_killed_or_paused_while_updates_arrive(tmp_path: Path, deployment: str) -> None:
    """Two processes share a global table; the lease holder (the one updater) is SIGKILLed
    (and restarted), and, through a ``tstreams serve``, also SIGSTOPped until the other
    instance has moved the store more than a fetch batch ahead, then resumed as a zombie,
    while updates keep arriving. Every write to the store and its offsets, read back from
    the commit log, moves forward only; another instance takes the lease and continues;
    every join output uses a row at least as new as the one before it for that key (in its
    output partition), exactly once; the final store is the model (latest row per key)."""
    rng = random.Random(int(os.environ.get("GLOBAL_KILL_SEED", "13")))
    data = str(tmp_path / "data")
    if deployment == "served":
        server = ServeProcess(data, tmp_path / "serve")
        server.start()
        try:
            with server.connect() as remote:
                writer = run_scenario(remote, server.endpoint, rng, ["kill", "pause", "kill", "pause"])
        finally:
            server.stop()
    else:
        with ts.open(data, compaction_interval=None) as engine:
            writer = run_scenario(engine, data, rng, ["kill", "kill", "kill"])
    with ts.open(data, compaction_interval=None) as engine:
        writes, back = steps_back(engine, APPLICATION, "rates-global")
        assert writes > 10 and back == []
        outputs = [[(STR.deserialize(k) if k else None, JSON.deserialize(v)) for k, v, _, _ in
                    _partition_envelopes(engine, "enriched", p)] for p in range(2)]
    print(f"{deployment}: {sum(len(v) for v in writer.written.values())} global updates, "
          f"{len(writer.orders)} orders, {writes} updater writes")
    seen_ids = [value[0] for part in outputs for _, value in part]
    assert sorted(seen_ids) == sorted(writer.orders), "join output is not exactly once"
    for part in outputs:
        newest: dict[str, int] = {}
        for key, (oid, cc, version) in part:
            assert key == oid and writer.orders[oid] == cc
            if version is None:
                assert cc not in newest, f"{oid}: no row for {cc!r} after v{newest.get(cc)}"
                continue
            assert version in writer.written[cc], f"{oid}: v{version} was never written for {cc!r}"
            assert version >= newest.get(cc, -1), f"{oid}: {cc!r} v{version} after v{newest[cc]}"
            newest[cc] = version
    assert len(seen_ids) > 50


def run_scenario(engine: ts.Engine, target: str, rng: random.Random, actions: list[str]) -> Writer:
    engine.create_stream("rates", partitions=2)
    engine.create_stream("orders", partitions=2)
    names = iter(f"w{i}" for i in range(100))
    workers: dict[str, Worker] = {}
    writer = Writer(engine, rng)

    def holder() -> str | None:
        owner = lease_owner(engine, APPLICATION)
        return None if owner is None else owner.split("-global-")[0]

    def applied() -> int:
        return committed_transactions(engine, "rates", f"{APPLICATION}-global-rates-global")

    try:
        for _ in range(2):
            w = Worker(target, next(names))
            workers[w.name] = w
        writer.start()
        for action in actions:
            eventually(lambda: holder() in workers, timeout=60, message="no instance holds the global lease")
            victim = holder()
            assert victim is not None
            before = applied()
            eventually(lambda b=before: applied() > b, timeout=60, message="the holder does not update")
            if action == "pause":  # until the other one took over and is more than a fetch batch ahead
                workers[victim].signal(signal.SIGSTOP)
                paused_at = applied()
                eventually(lambda p=paused_at: applied() > p + 2 * FETCH_TXNS, timeout=120,
                           message="nobody continued while the holder was paused")
                assert holder() not in (None, victim)
                workers[victim].signal(signal.SIGCONT)  # a zombie with stale offsets and data
                continue
            workers.pop(victim).kill()
            # the survivor takes the lease (once the dead one's expired) and continues
            eventually(lambda v=victim: holder() not in (None, v), timeout=60,
                       message="nobody took the dead holder's lease")
            assert holder() in workers
            after = applied()
            eventually(lambda a=after: applied() > a, timeout=60, message="the new holder does not update")
            w = Worker(target, next(names))
            workers[w.name] = w
        writer.done.set()
        writer.join()
        assert writer.error is None, writer.error
        eventually(lambda: global_rows(engine, APPLICATION, "rates-global", KEYS)
                   == {k: {"v": v} for k, v in writer.model.items()}, timeout=60,
                   message="the global store did not reach the model")
        eventually(lambda: sum(len(engine.backend.transactions_range("enriched", p, 0, 2**63 - 1))
                               for p in range(2)) > 0 and
                   committed_transactions(engine, "orders", APPLICATION) == len(writer.orders), timeout=120,
                   message="not every order was joined")
    finally:
        writer.done.set()
        for w in workers.values():
            w.kill()
    return writer


def _partition_envelopes(engine: ts.Engine, stream: str, partition: int) -> list[Any]:
    out = []
    for txn in engine.backend.transactions_range(stream, partition, 0, 2**63 - 1):
        out.extend(unpack_envelope(item) for item in txn.items)
    return out


# -- one process: the lease, the bootstrap, failures --------------------------------------------
LEASE = 300


def rates_topology() -> Any:
    b = StreamsBuilder()
    rates = b.global_table("rates", key_serde="str", value_serde="str")
    (b.stream("orders", key_serde="str", value_serde="str")
        .left_join(rates, lambda order, rate: [order, rate], key_selector=lambda k, order: order)
        .to("enriched", key_serde="str", value_serde="json"))
    return b.build()


def send_rates(engine: ts.Engine, rows: list[tuple[str, str]]) -> None:
    for k, v in rows:
        send_records(engine, "rates", [(k, v, 0)], key_serde="str", value_serde="str")


def test_only_the_lease_holder_updates_and_a_zombie_holder_is_fenced(tmp_path: Path) -> None:
    """The auditor's scenario: instance one catches up to v599; instance two neither writes
    nor moves the offsets back. When one stops renewing, two takes the lease and continues
    from the stored offsets; one's writes (a zombie's) are refused and write nothing."""
    with ts.open(str(tmp_path), durability="async", compaction_interval=None) as engine:
        engine.create_stream("rates")
        engine.create_stream("orders")
        one = App(engine, application_id="g", topology=rates_topology(), lease_ms=LEASE, instance_name="one")
        two = App(engine, application_id="g", topology=rates_topology(), lease_ms=LEASE, instance_name="two")
        assert one.task_count() == two.task_count() == 1
        g1, g2 = one.global_tables, two.global_tables
        assert g1.update() == 0 and g1.state == "updating"
        send_rates(engine, [("de", f"v{i}") for i in range(600)])
        assert g1.update() == 600
        assert two.store("rates-global").get("de") == "v599"
        offsets = global_offsets(engine, "g", "rates-global", "rates")
        assert g2.update() == 0 and g2.state == "standby"
        assert global_offsets(engine, "g", "rates-global", "rates") == offsets
        # one stops renewing (paused): two takes the lease once it expired
        eventually(lambda: g2.update() >= 0 and g2.state == "updating", timeout=30)
        send_rates(engine, [("de", f"v{i}") for i in range(600, 1200)])
        stale = O.CheckLease(group_store("g"), GLOBAL_LEASE, g1.owner, g1.epoch)
        with pytest.raises(errors.LeaseConflict):
            g1.updaters[0].catch_up(stale)  # one's in-memory offsets are at v599: refused
        assert g1.update() == 0 and g1.state == "standby"  # its renewal is refused: it stops updating
        assert global_offsets(engine, "g", "rates-global", "rates") == offsets
        assert two.store("rates-global").get("de") == "v599"
        assert g2.update() == 600
        assert two.store("rates-global").get("de") == "v1199"
        writes, back = steps_back(engine, "g", "rates-global", lambda v: int(v[1:]))
        assert writes >= 4 and back == []
        one.close()
        two.close()


def test_a_starting_instance_waits_for_the_holder_then_takes_over_when_it_stops(tmp_path: Path) -> None:
    with ts.open(str(tmp_path), durability="async") as engine:
        engine.create_stream("rates")
        engine.create_stream("orders")
        one = App(engine, application_id="g", topology=rates_topology(), lease_ms=LEASE, instance_name="one").start()
        two: App | None = None
        try:
            assert one.global_tables.state == "updating"
            send_rates(engine, [("de", f"v{i}") for i in range(300)])
            two = App(engine, application_id="g", topology=rates_topology(), lease_ms=LEASE,
                      instance_name="two").start()
            # two's bootstrap waited until the holder (one) applied everything sent before
            assert two.global_tables.state == "standby"
            assert two.store("rates-global").get("de") == "v299"
            assert lease_owner(engine, "g") == one.global_tables.owner
            one.stop()  # frees the lease: two takes it at its next look
            eventually(lambda: two is not None and two.global_tables.state == "updating", timeout=30)
            send_rates(engine, [("de", "v300")])
            eventually(lambda: two is not None and two.store("rates-global").get("de") == "v300", timeout=30)
        finally:
            one.close()
            if two is not None:
                two.close()
        assert lease_owner(engine, "g") is None  # released by close


def test_a_failed_global_table_updater_stops_the_app_and_is_raised(tmp_path: Path) -> None:
    """A global record whose key cannot be stored (the auditor's 265 bytes) kills the
    updater: ``run()`` raises StoreKeyTooLong (naming the store, the length and the limit),
    the workers stop, the failure shows in the state and the metrics, and the lease is
    freed. A restart fails the same way; with ``on_record_error="skip"`` it is skipped."""
    long_key = "x" * (MAX_STORE_KEY + 10)
    with ts.open(str(tmp_path), durability="async") as engine:
        engine.create_stream("rates")
        engine.create_stream("orders")
        app = App(engine, application_id="g", topology=rates_topology(), lease_ms=LEASE)
        assert app.task_count() == 1  # prepared: app.global_tables exists
        failure: list[BaseException] = []

        def run() -> None:
            try:
                app.run(until_idle=False)
            except BaseException as exc:  # noqa: BLE001 - checked below
                failure.append(exc)
        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        eventually(lambda: app.global_tables.state == "updating", timeout=30)
        send_rates(engine, [(long_key, "too long"), ("de", "Germany")])
        runner.join(timeout=60)
        assert not runner.is_alive(), "run() did not end when the global-table updater failed"
        assert len(failure) == 1 and isinstance(failure[0], errors.StoreKeyTooLong)
        message = str(failure[0])
        assert "'rates-global'" in message and f"{MAX_STORE_KEY + 10} bytes" in message and "255" in message
        assert app.global_tables.state == "failed"
        assert app.metrics["global_table_failures"] == 1
        assert b'tstreams_streams_global_tables_failed{app="g"} 1.0' in app.prometheus.exposition()
        assert lease_owner(engine, "g") is None
        # a started app: its workers stop and stop() re-raises
        again = App(engine, application_id="g", topology=rates_topology(), lease_ms=LEASE)
        with pytest.raises(errors.StoreKeyTooLong, match="rates-global"):
            again.start()  # the bootstrap meets the record
        with pytest.raises(errors.StoreKeyTooLong, match="rates-global"):
            App(engine, application_id="g", topology=rates_topology(), lease_ms=LEASE).run()
        skipping = App(engine, application_id="g", topology=rates_topology(), lease_ms=LEASE,
                       on_record_error="skip")
        skipping.run()
        assert skipping.store("rates-global").all() == {"de": "Germany"}
        assert skipping.metrics["records_skipped_on_error"] == 1
        assert b'tstreams_streams_error_records_skipped_total{app="g",source="global"} 1.0' in \
            skipping.prometheus.exposition()
        skipping.close()


def test_a_started_app_whose_global_updater_fails_stops_its_workers(tmp_path: Path) -> None:
    with ts.open(str(tmp_path), durability="async") as engine:
        engine.create_stream("rates")
        engine.create_stream("orders")
        app = App(engine, application_id="g", topology=rates_topology(), lease_ms=LEASE).start()
        send_rates(engine, [("x" * (MAX_STORE_KEY + 1), "too long")])
        eventually(lambda: app.global_tables.state == "failed", timeout=30)
        send_records(engine, "orders", [("o1", "de", 1)], key_serde="str", value_serde="str")
        with pytest.raises(errors.StoreKeyTooLong, match=f"{MAX_STORE_KEY + 1} bytes"):
            app.stop()
        # the workers stopped at the failure: the order was not processed (nor committed)
        assert committed_transactions(engine, "orders", "g") == 0


def test_a_task_record_whose_key_cannot_be_stored_fails_or_is_skipped(tmp_path: Path) -> None:
    """The auditor's 300-byte key in a count: every run() raised a bare InvalidArgument;
    now StoreKeyTooLong names the store, and ``on_record_error="skip"`` skips the record."""
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str").count(store="n")
    with ts.open(str(tmp_path), durability="async") as engine:
        engine.create_stream("in")
        send_records(engine, "in", [("k" * 300, {}, 1), ("ok", {}, 2), ("ok", {}, 3)], key_serde="str",
                     value_serde="json")
        for _ in range(2):
            with pytest.raises(errors.StoreKeyTooLong, match=r"store 'n'.* 255 bytes.*got 300"):
                App(engine, application_id="a", topology=b.build()).run()
        app = App(engine, application_id="a", topology=b.build(), on_record_error="skip")
        metrics = app.run()
        assert app.store("n").all() == {"ok": 2}
        assert metrics["records_skipped_on_error"] == 1 and metrics["records"] == 3
        assert b'tstreams_streams_error_records_skipped_total{app="a",source="task"} 1.0' in app.prometheus.exposition()
        app.close()
        # committed: a later run (failing policy) has nothing left to fail on
        assert App(engine, application_id="a", topology=b.build()).run().get("records", 0) == 0


def test_on_record_error_must_be_a_policy(tmp_path: Path) -> None:
    with ts.open(str(tmp_path), durability="async") as engine:
        engine.create_stream("rates")
        engine.create_stream("orders")
        for bad in ["ignore", None, 1]:
            with pytest.raises(errors.InvalidArgument, match="on_record_error"):
                App(engine, application_id="g", topology=rates_topology(), on_record_error=bad)  # type: ignore[arg-type]


# -- a state machine: two updaters, the engine's clock moving, stale writers -------------------
class GlobalUpdatersMachine(RuleBasedStateMachine):
    """Two instances' global-table updaters take turns as the engine's (fake) clock expires
    the lease; stale updaters (the offsets and the fence of an earlier holding) try to write.
    Invariants: the stored offsets and rows never move back (in any write, read back from the
    commit log) and the store always equals the model (the
    latest row per key of the stream up to the stored offsets); at most one instance holds.
    Fetches are cut to 2 transactions, so that a catch-up takes several writes."""

    def __init__(self) -> None:
        super().__init__()
        self.fetch_txns, global_table.FETCH_TXNS = global_table.FETCH_TXNS, 2
        self.clock = FakeClock()
        self.dir = tempfile.mkdtemp(prefix="global-")
        self.engine = ts.open(self.dir, clock=self.clock, durability="async", compaction_interval=None,
                              keepalive_interval=None)
        self.engine.create_stream("rates", partitions=2)
        specs = rates_topology().global_tables
        self.tables = [GlobalTables(self.engine.backend, "g", specs, poll_interval=0.01, lease_ms=1000,
                                    name=f"i{i}") for i in range(2)]
        self.fences: list[O.CheckLease | None] = [None, None]
        self.last_offsets: dict[int, int] = {}
        self.version = 0

    @rule(keys=st.lists(st.sampled_from(["de", "fr", "it"]), min_size=1, max_size=4))
    def send(self, keys: list[str]) -> None:
        rows = []
        for k in keys:
            rows.append((k, f"v{self.version}", 0))
            self.version += 1
        send_records(self.engine, "rates", rows, key_serde="str", value_serde="str", records_per_transaction=2)

    @rule(i=st.sampled_from([0, 1]))
    def update(self, i: int) -> None:
        t = self.tables[i]
        t.update()
        if t.epoch:
            self.fences[i] = O.CheckLease(group_store("g"), GLOBAL_LEASE, t.owner, t.epoch)

    @rule(ms=st.sampled_from([10, 400, 1500]))
    def tick(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(i=st.sampled_from([0, 1]))
    def release(self, i: int) -> None:
        self.tables[i].release()

    @rule(i=st.sampled_from([0, 1]))
    def stale_write(self, i: int) -> None:
        """An updater of instance ``i`` that starts over from offset 0 with the fence of its
        last holding: refused unless that holding is still the lease's."""
        fence = self.fences[i]
        lease = unpack_lease(self.engine.backend.store_get(group_store("g"), GLOBAL_LEASE))
        if fence is None or lease is None or (lease[0], lease[1]) == (fence.owner, fence.epoch):
            return
        stale = GlobalTableUpdater(self.engine.backend, "g", self.tables[i].updaters[0].spec)
        stale.offsets = dict.fromkeys(stale.offsets, 0)
        if not any(self.last_offsets.values()):
            return  # nothing to fetch, nothing to write
        with pytest.raises(errors.LeaseConflict):
            stale.catch_up(fence)

    @invariant()
    def forward_only_and_equal_to_the_model(self) -> None:
        offsets = global_offsets(self.engine, "g", "rates-global", "rates")
        for p, o in offsets.items():
            assert o >= self.last_offsets.get(p, 0)
        self.last_offsets = offsets
        _, back = steps_back(self.engine, "g", "rates-global", lambda v: int(v[1:]))  # every write, not just the last
        assert back == []
        model: dict[str, str] = {}
        for p, upto in offsets.items():
            for txn in self.engine.backend.transactions_range("rates", p, 0, upto):
                for item in txn.items:
                    env = unpack_envelope(item)
                    assert env is not None and env[0] is not None and env[1] is not None
                    model[STR.deserialize(env[0])] = STR.deserialize(env[1])
        ns = global_namespace("g", "rates-global")
        stored = {STR.deserialize(k): STR.deserialize(v) for k, v in pages(self.engine.backend, ns, None, None)}
        assert stored == model
        lease = unpack_lease(self.engine.backend.store_get(group_store("g"), GLOBAL_LEASE))
        holders = [t for t in self.tables if lease is not None and (t.owner, t.epoch) == lease[:2]]
        assert len(holders) <= 1

    def teardown(self) -> None:
        global_table.FETCH_TXNS = self.fetch_txns
        self.engine.close()
        shutil.rmtree(self.dir, ignore_errors=True)


TestGlobalUpdatersFollowTheModel = GlobalUpdatersMachine.TestCase
TestGlobalUpdatersFollowTheModel.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
