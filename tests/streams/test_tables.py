"""Tables: source tables with tombstones, filter, map_values, table–table joins and grouped
aggregation with adder and subtractor, against pure-Python models of the change semantics."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.streams import App, StreamsBuilder, TestDriver, send_records

KEYS = ["a", "b", "c", "d"]
GROUPS = ["x", "y", "z"]

row = st.one_of(st.none(), st.fixed_dictionaries({"g": st.sampled_from(GROUPS), "n": st.integers(-5, 20)}))
updates = st.lists(st.tuples(st.sampled_from(KEYS), row), min_size=1, max_size=30)


def test_source_table_keeps_the_latest_value_and_tombstones_delete() -> None:
    b = StreamsBuilder()
    b.table("users", key_serde="str", value_serde="json").to_stream().to("changes", key_serde="str",
                                                                        value_serde="json")
    with TestDriver(b.build(), partitions=3) as d:
        d.pipe("users", "ann", {"age": 1}, 1)
        d.pipe("users", "bob", {"age": 2}, 2)
        d.pipe("users", "ann", {"age": 3}, 3)
        d.pipe("users", "bob", None, 4)
        d.pipe("users", "zed", None, 5)  # deleting a missing key changes nothing: no record
        assert d.store("users-table").all() == {"ann": {"age": 3}}
        out = sorted((r.timestamp, r.key, r.value) for r in d.read_output("changes"))
        assert out == [(1, "ann", {"age": 1}), (2, "bob", {"age": 2}), (3, "ann", {"age": 3}), (4, "bob", None)]


def _model_group_sum(ups: list[tuple[str, Any]]) -> tuple[list[tuple[str, int]], dict[str, int], list[tuple[str, int]]]:
    """(emitted sums, final sums, emitted counts) of group_by(g).aggregate(sum of n) and count."""
    table: dict[str, Any] = {}
    sums: dict[str, int] = {}
    counts: dict[str, int] = {}
    out_sums: list[tuple[str, int]] = []
    out_counts: list[tuple[str, int]] = []
    for key, new in ups:
        old = table.get(key)
        if old is None and new is None:
            continue
        if new is None:
            del table[key]
        else:
            table[key] = new
        if old is not None:
            sums[old["g"]] = sums.get(old["g"], 0) - old["n"]
            counts[old["g"]] = counts.get(old["g"], 0) - 1
            out_sums.append((old["g"], sums[old["g"]]))
            out_counts.append((old["g"], counts[old["g"]]))
        if new is not None:
            sums[new["g"]] = sums.get(new["g"], 0) + new["n"]
            counts[new["g"]] = counts.get(new["g"], 0) + 1
            out_sums.append((new["g"], sums[new["g"]]))
            out_counts.append((new["g"], counts[new["g"]]))
    return out_sums, sums, out_counts


def _group_topology() -> StreamsBuilder:
    b = StreamsBuilder()
    grouped = b.table("t", key_serde="str", value_serde="json").group_by(lambda k, v: (v["g"], v["n"]),
                                                                        key_serde="str")
    (grouped.aggregate(lambda: 0, lambda g, n, agg: agg + n, lambda g, n, agg: agg - n, store="sums")
        .to_stream().to("sums", key_serde="str"))
    grouped.count(store="counts").to_stream().to("counts", key_serde="str")
    return b


@settings(max_examples=40, deadline=None)
@given(ups=updates)
def test_group_by_aggregate_with_adder_and_subtractor_equals_the_model(ups: list[tuple[str, Any]]) -> None:
    out_sums, sums, out_counts = _model_group_sum(ups)
    with TestDriver(_group_topology().build()) as d:
        for i, (key, value) in enumerate(ups):
            d.pipe("t", key, value, i)
        assert [(r.key, r.value) for r in d.read_output("sums")] == out_sums
        assert [(r.key, r.value) for r in d.read_output("counts")] == out_counts
        assert d.store("sums").all() == sums


@settings(max_examples=10, deadline=None)
@given(ups=updates)
def test_group_by_through_a_repartition_stream_on_three_tasks(ups: list[tuple[str, Any]]) -> None:
    _, sums, _ = _model_group_sum(ups)
    with TestDriver(_group_topology().build(), partitions=3) as d:
        for i, (key, value) in enumerate(ups):
            d.pipe("t", key, value, i)
        assert d.store("sums").all() == sums
        last: dict[str, int] = {}
        for r in d.read_output("sums"):
            last[r.key] = r.value
        assert last == sums


def _joined(kind: str, left: Any, right: Any, joiner: Callable[[Any, Any], Any]) -> Any:
    if left is None and right is None:
        return None
    if kind == "inner" and (left is None or right is None):
        return None
    if kind == "left" and left is None:
        return None
    return joiner(left, right)


small_row = st.one_of(st.none(), st.integers(0, 9))
two_table_updates = st.lists(st.tuples(st.sampled_from(["l", "r"]), st.sampled_from(KEYS[:3]), small_row),
                             min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(ups=two_table_updates, kind=st.sampled_from(["inner", "left", "outer"]))
def test_table_table_join_of_a_filtered_and_a_mapped_table_equals_the_model(
        ups: list[tuple[str, str, int | None]], kind: str) -> None:
    def keep(k: str, v: int) -> bool:
        return v % 3 != 0

    def joiner(a: int | None, b: int | None) -> list[int | None]:
        return [a, b]

    b = StreamsBuilder()
    left = b.table("l", key_serde="str", value_serde="json").filter(keep)
    right = b.table("r", key_serde="str", value_serde="json").map_values(lambda v: v * 10)
    joined = getattr(left, {"inner": "join", "left": "left_join", "outer": "outer_join"}[kind])(right, joiner)
    joined.to_stream().to("joined", key_serde="str", value_serde="json")
    # model: the two tables after filter / map_values, and the join's change records
    tables: dict[str, dict[str, int]] = {"l": {}, "r": {}}
    expected: list[tuple[str, Any]] = []

    def view(side: str, key: str) -> int | None:
        v = tables[side].get(key)
        if v is None:
            return None
        if side == "l":
            return v if keep(key, v) else None
        return v * 10

    for side, key, value in ups:
        old_raw = tables[side].get(key)
        if old_raw is None and value is None:
            continue
        before_l, before_r = view("l", key), view("r", key)
        if value is None:
            del tables[side][key]
        else:
            tables[side][key] = value
        after_l, after_r = view("l", key), view("r", key)
        changed_side_old = before_l if side == "l" else before_r
        changed_side_new = after_l if side == "l" else after_r
        if changed_side_old is None and changed_side_new is None:
            continue  # the filter dropped both versions: no change reaches the join
        old = _joined(kind, before_l, before_r, joiner)
        new = _joined(kind, after_l, after_r, joiner)
        if old is not None or new is not None:
            expected.append((key, new))
    with TestDriver(b.build()) as d:
        for i, (side, key, value) in enumerate(ups):
            d.pipe(side, key, value, i)
            d.process()  # one update at a time: the order across the two input streams is the model's
        assert [(r.key, r.value) for r in d.read_output("joined")] == expected


def test_table_join_of_tables_on_different_partition_counts_fails_at_start() -> None:
    b = StreamsBuilder()
    b.table("l", key_serde="str").join(b.table("r", key_serde="str"), lambda a, c: a).to_stream().to("o")
    with ts.open(tempfile.mkdtemp(), durability="async") as engine:
        engine.create_stream("l", partitions=2)
        engine.create_stream("r", partitions=3)
        with pytest.raises(errors.TopologyError, match="co-partitioned.*repartition"):
            App(engine, application_id="j", topology=b.build()).run()


def test_bad_arguments_raise_specific_errors() -> None:
    b = StreamsBuilder()
    t = b.table("t")
    with pytest.raises(errors.InvalidArgument):
        t.filter("not callable")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument):
        t.group_by(lambda k, v: (k, v)).aggregate(lambda: 0, lambda k, v, a: a, 3)  # type: ignore[arg-type]
    with pytest.raises(errors.TopologyError):
        t.join(StreamsBuilder().table("u"), lambda a, c: a)
    with pytest.raises(errors.TopologyError):
        b.table("t")  # already a source
    b2 = StreamsBuilder()
    b2.table("t").group_by(lambda k, v: "not a pair").count().to_stream().to("o")
    with TestDriver(b2.build()) as d:
        with pytest.raises(errors.TopologyError, match="pair"):
            d.pipe("t", "k", 1, 1)  # processed at once


# -- a stateful machine: table updates, app restarts, against the model --------------------------

class TableAppMachine(RuleBasedStateMachine):
    """A table and its per-group sums on a real engine (3 partitions): updates, deletes and
    restarts of the App (a new App on the same directory continues from its stores)."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="table-machine-")
        self.engine = ts.open(self.dir, durability="async", compaction_interval=None, keepalive_interval=None)
        self.engine.create_stream("t", partitions=3)
        self.app = self._app()
        self.table: dict[str, Any] = {}
        self.t = 0

    def _app(self) -> App:
        return App(self.engine, application_id="machine", topology=_group_topology().build())

    def _write(self, key: str, value: Any) -> None:
        self.t += 1
        send_records(self.engine, "t", [(key, value, self.t)], key_serde="str", value_serde="json")
        if value is None:
            self.table.pop(key, None)
        else:
            self.table[key] = value

    @rule(key=st.sampled_from(KEYS), value=st.fixed_dictionaries({"g": st.sampled_from(GROUPS),
                                                                 "n": st.integers(-5, 20)}))
    def put(self, key: str, value: Any) -> None:
        self._write(key, value)

    @precondition(lambda self: bool(self.table))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        self._write(data.draw(st.sampled_from(sorted(self.table))), None)

    @rule()
    def process(self) -> None:
        self.app.run()

    @rule()
    def restart(self) -> None:
        self.app.close()
        self.app = self._app()

    @invariant()
    def stores_equal_the_model_after_processing(self) -> None:
        self.app.run()
        assert self.app.store("t-table").all() == self.table
        sums: dict[str, int] = {}
        for row in self.table.values():
            sums[row["g"]] = sums.get(row["g"], 0) + row["n"]
        stored = self.app.store("sums").all()
        assert {g: n for g, n in stored.items() if g in sums} == sums
        assert all(n == 0 for g, n in stored.items() if g not in sums)  # emptied groups sum to 0

    def teardown(self) -> None:
        self.app.close()
        self.engine.close()
        shutil.rmtree(self.dir, ignore_errors=True)


TableAppMachine.TestCase.settings = settings(max_examples=15, stateful_step_count=15, deadline=None)
test_table_app_machine = TableAppMachine.TestCase
