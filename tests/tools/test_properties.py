"""Properties of the operator tooling: positions parse to the IDs ``ts.txn_id_at`` gives,
and what ``tstreams produce`` writes, ``tstreams consume`` prints back unchanged."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from pathlib import Path

import msgpack
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.cli import main
from tstreams_embedded.tools.positions import parse_position

times = st.datetimes(min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(4000, 1, 1),
                     timezones=st.none() | st.just(dt.timezone.utc) | st.builds(
                         dt.timezone, st.timedeltas(min_value=dt.timedelta(hours=-12),
                                                    max_value=dt.timedelta(hours=12)).map(
                             lambda d: dt.timedelta(minutes=d // dt.timedelta(minutes=1)))))


class NothingOpen:
    """The one Backend question a position asks: nothing was open at any time."""

    def first_open_at(self, stream: str, partition: int, ms: int) -> int:
        return 0


HEAD = 2**63 - 1  # a stable offset that clamps nothing


@given(times)
def test_a_time_parses_to_the_offset_txn_id_at_gives(when: dt.datetime) -> None:
    position = parse_position(when.isoformat())
    aware = when if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)
    wanted = position.wanted(NothingOpen(), "s", 0, HEAD)  # type: ignore[arg-type]
    assert position.kind == "time" and wanted == ts.txn_id_at(aware) - 1
    if when.tzinfo is dt.timezone.utc:
        assert parse_position(when.isoformat().replace("+00:00", "Z")).time == position.time


@given(st.integers(0, 2**63 - 1))
def test_an_id_starts_at_that_transaction(txn_id: int) -> None:
    position = parse_position(str(txn_id))
    assert (position.kind, position.wanted(NothingOpen(), "s", 0, HEAD)) == ("id", max(txn_id - 1, 0))  # type: ignore[arg-type]


@given(st.integers(1, 10_000), st.sampled_from("smhd"))
def test_a_relative_time_counts_back_from_now(n: int, unit: str) -> None:
    now = dt.datetime(2026, 11, 23, 12, tzinfo=dt.timezone.utc)
    seconds = n * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    assert parse_position(f"-{n}{unit}", now).time == now - dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "today", "2026-02-30", "12:00", "-5w", "1.5", "-1", str(2**63), "\u00b2",
                                  "\u0663", "-\u00b2d", "-1000000d", "-99999999999999999999d", "-1e9s"])
def test_what_is_not_a_position_is_refused(text: str) -> None:
    with pytest.raises(errors.InvalidArgument):
        parse_position(text)


@given(st.text() | st.from_regex(r"\A-[0-9]{1,40}(\.[0-9]{1,5})?[smhd]\Z") | st.from_regex(r"\A\d{1,30}\Z"))
def test_any_text_is_a_position_or_invalid_argument(text: str) -> None:
    try:
        parse_position(text)
    except errors.InvalidArgument:
        pass


_dirs = itertools.count()
lines = st.binary(max_size=40).filter(lambda b: b"\n" not in b and not b.endswith(b"\r"))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(lines, min_size=1, max_size=12), txn_size=st.integers(1, 5), partitions=st.integers(1, 3))
def test_produce_then_consume_round_trips_lines(tmp_path: Path, items: list[bytes], txn_size: int,
                                                partitions: int) -> None:
    data = str(tmp_path / f"d{next(_dirs)}")
    runner = CliRunner()
    assert runner.invoke(main, ["streams", "create", "s", "--partitions", str(partitions), "--data", data]
                         ).exit_code == 0
    produced = runner.invoke(main, ["produce", "s", "--txn-size", str(txn_size), "--json", "--data", data],
                             input=b"".join(i + b"\n" for i in items))
    assert produced.exit_code == 0, produced.stderr
    written = [json.loads(line) for line in produced.stdout.splitlines()]
    assert [w["items"] for w in written] == [len(items[i : i + txn_size]) for i in range(0, len(items), txn_size)]
    consumed = runner.invoke(main, ["consume", "s", "--format", "hex", "--json", "--data", data])
    by_id = {(t["partition"], t["id"]): [bytes.fromhex(h) for h in t["items"]]
             for t in map(json.loads, consumed.stdout.splitlines())}  # IDs are per partition
    assert len(by_id) == len(written)
    assert [i for w in written for i in by_id[w["partition"], w["id"]]] == items  # in order, none lost or added


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5)
                                    | st.binary(max_size=5),
                                    lambda inner: st.lists(inner, max_size=3), max_leaves=6), min_size=1, max_size=6))
def test_produce_msgpack_then_consume_hex_round_trips(tmp_path: Path, values: list[object]) -> None:
    data = str(tmp_path / f"m{next(_dirs)}")
    runner = CliRunner()
    runner.invoke(main, ["streams", "create", "s", "--data", data])
    packed = b"".join(msgpack.packb(v, use_bin_type=True) for v in values)
    assert runner.invoke(main, ["produce", "s", "--format", "msgpack", "--txn-size", "100", "--data", data],
                         input=packed).exit_code == 0
    out = runner.invoke(main, ["consume", "s", "--format", "hex", "--data", data]).stdout.split()
    assert [msgpack.unpackb(bytes.fromhex(h), raw=False) for h in out] == values
