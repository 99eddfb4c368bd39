"""State-store records (``StoreWrite``) and the Backend's store reads, embedded and served."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import zmq
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.protocol.backend import StoreScan
from tstreams_embedded.engine.storage.state_stores import split_window_key, window_bound, window_key
from tstreams_embedded.net import framing


def test_puts_deletes_and_ranges(tstreams_engine: ts.Engine) -> None:
    b = tstreams_engine.backend
    b.submit([O.StoreWrite("app/0/kv", [[b"a", b"1"], [b"b", b"2"], [b"c", b"3"]]),
              O.StoreWrite("app/1/kv", [[b"a", b"other task"]])])
    assert b.store_get("app/0/kv", b"b") == b"2"
    assert b.store_get("app/0/kv", b"zz") is None
    assert b.store_range("app/0/kv") == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert b.store_range("app/0/kv", b"b") == [(b"b", b"2"), (b"c", b"3")]
    assert b.store_range("app/0/kv", b"a", b"c") == [(b"a", b"1"), (b"b", b"2")]
    assert b.store_range("app/0/kv", limit=1) == [(b"a", b"1")]
    assert b.store_range("app/1/kv") == [(b"a", b"other task")]  # stores are separate namespaces
    b.submit([O.StoreWrite("app/0/kv", [[b"d", b"4"]], [b"a"], [[b"b", b"c"]])])
    assert b.store_range("app/0/kv") == [(b"c", b"3"), (b"d", b"4")]
    b.submit([O.StoreWrite("app/0/kv", [], None, [[b"", None]])])
    assert b.store_range("app/0/kv") == []
    assert b.store_range("app/1/kv") == [(b"a", b"other task")]


def test_windowed_fetch(tstreams_engine: ts.Engine) -> None:
    b = tstreams_engine.backend
    puts = [[window_key(end, end - 10, k), b"%d" % end] for end in (-5, 10, 20, 30) for k in (b"x", b"y")]
    b.submit([O.StoreWrite("app/0/w", puts)])
    got = [split_window_key(k) for k, _ in b.store_windows("app/0/w", b"x", 10, 20)]
    assert got == [(10, 0, b"x"), (20, 10, b"x")]
    got = [split_window_key(k) for k, _ in b.store_windows("app/0/w", None, -100, 10)]
    assert got == [(-5, -15, b"x"), (-5, -15, b"y"), (10, 0, b"x"), (10, 0, b"y")]
    assert b.store_windows("app/0/w", None, 31, 2**63 - 1) == []
    assert len(b.store_windows("app/0/w", None, -(2**63), 2**63 - 1, limit=3)) == 3


@pytest.mark.parametrize("bad, error", [
    (O.StoreWrite("", [[b"k", b"v"]]), errors.InvalidArgument),
    (O.StoreWrite("s", [[b"k", "not bytes"]]), errors.InvalidArgument),
    (O.StoreWrite("s", [["k", b"v"]]), errors.InvalidArgument),
    (O.StoreWrite("s", [[b"k" * 300, b"v"]]), errors.InvalidArgument),
    (O.StoreWrite("s", [[b"k"]]), errors.InvalidArgument),
    (O.StoreWrite("s", "nope"), errors.InvalidArgument),
    (O.StoreWrite("s", [], [1]), errors.InvalidArgument),
    (O.StoreWrite("s", [], None, [[b"a"]]), errors.InvalidArgument),
])
def test_bad_store_writes_write_nothing(shared_engine: ts.Engine, bad: Any, error: type) -> None:
    b = shared_engine.backend
    b.submit([O.StoreWrite("s", [[b"before", b"1"]])])
    with pytest.raises(error):
        b.submit([O.StoreWrite("s", [[b"partial", b"no"]]), bad])
    assert b.store_range("s") == [(b"before", b"1")]


def test_store_values_obey_max_item_size(tstreams_make_engine: Any) -> None:
    engine = tstreams_make_engine(max_item_size=100)
    with pytest.raises(errors.ItemTooLarge):
        engine.backend.submit([O.StoreWrite("s", [[b"k", b"x" * 101]])])
    assert engine.backend.store_range("s") == []


def test_bad_store_reads(tstreams_engine: ts.Engine) -> None:
    b = tstreams_engine.backend
    with pytest.raises(errors.InvalidArgument):
        b.store_get("s", "str key")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument):
        b.store_get("", b"k")
    with pytest.raises(errors.InvalidArgument):
        b.store_range("s", limit=0)
    with pytest.raises(errors.InvalidArgument):
        b.store_windows("s", None, "0", 5)  # type: ignore[arg-type]


keys = st.binary(min_size=0, max_size=3)


class StoreModel(RuleBasedStateMachine):
    """A store against a dict: every StoreWrite (puts, deletes, range deletes) and reads."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.dir = tempfile.TemporaryDirectory()
        self.engine = ts.open(self.dir.name, durability="async", compaction_interval=None)
        self.model: dict[bytes, bytes] = {}

    @rule(puts=st.dictionaries(keys, st.binary(max_size=4), max_size=4), deletes=st.lists(keys, max_size=3),
          ranges=st.lists(st.tuples(keys, st.none() | keys), max_size=2))
    def write(self, puts: dict[bytes, bytes], deletes: list[bytes], ranges: list[tuple[bytes, bytes | None]]) -> None:
        self.engine.backend.submit([O.StoreWrite("m", [[k, v] for k, v in puts.items()], deletes or None,
                                                 [list(r) for r in ranges] or None)])
        for lo, hi in ranges:
            for k in [k for k in self.model if k >= lo and (hi is None or k < hi)]:
                del self.model[k]
        for k in deletes:
            self.model.pop(k, None)
        self.model.update(puts)

    @rule(key=keys)
    def get(self, key: bytes) -> None:
        assert self.engine.backend.store_get("m", key) == self.model.get(key)

    @rule(lo=st.none() | keys, hi=st.none() | keys, limit=st.integers(1, 5))
    def range(self, lo: bytes | None, hi: bytes | None, limit: int) -> None:
        expected = sorted((k, v) for k, v in self.model.items() if (lo is None or k >= lo) and (hi is None or k < hi))
        assert self.engine.backend.store_range("m", lo, hi, limit) == expected[:limit]

    @rule(scans=st.lists(st.tuples(st.none() | keys, st.none() | keys, st.none() | st.integers(1, 5)),
                         min_size=1, max_size=3))
    def snapshot(self, scans: list[tuple[bytes | None, bytes | None, int | None]]) -> None:
        got = self.engine.backend.store_snapshot([StoreScan("m", lo, hi, limit) for lo, hi, limit in scans])
        assert got == [sorted((k, v) for k, v in self.model.items()
                              if (lo is None or k >= lo) and (hi is None or k < hi))[:limit]
                       for lo, hi, limit in scans]

    @invariant()
    def everything(self) -> None:
        assert self.engine.backend.store_range("m") == sorted(self.model.items())

    def teardown(self) -> None:
        self.engine.close()
        self.dir.cleanup()


TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = settings(max_examples=30, stateful_step_count=15, deadline=None)


def test_range_reads_stop_at_the_byte_cap(tstreams_make_engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tstreams_embedded.engine.storage import state_stores as state

    monkeypatch.setattr(state, "MAX_READ_BYTES", 25)
    engine = tstreams_make_engine()
    engine.backend.submit([O.StoreWrite("s", [[b"k%d" % i, b"v" * 10] for i in range(5)])])
    assert [k for k, _ in engine.backend.store_range("s")] == [b"k0", b"k1"]  # 14 stored bytes each; 28 >= 25
    assert len(engine.backend.store_windows("s", None, state.MIN_TIME, state.MAX_TIME)) <= 3


def test_store_snapshot_reads_several_stores_and_windows(tstreams_engine: ts.Engine) -> None:
    b = tstreams_engine.backend
    wins = [[window_key(end, end - 10, k), b"%d" % end] for end in (10, 20, 30) for k in (b"x", b"y")]
    b.submit([O.StoreWrite("app/0/kv", [[b"a", b"1"], [b"b", b"2"], [b"c", b"3"]]),
              O.StoreWrite("app/1/kv", [[b"a", b"other"], [b"a\x00", b"next"]]),
              O.StoreWrite("app/0/w", wins)])
    got = b.store_snapshot([
        StoreScan("app/0/kv"),
        StoreScan("app/0/kv", b"b", None, 1),
        StoreScan("app/1/kv", b"a", b"a\x00"),  # exactly one key
        StoreScan("nothing/here"),
        StoreScan("app/0/w", window_key=b"y", window_start_from=5, window_start_to=10),
        StoreScan("app/0/w", window_start_from=20),
    ])
    assert got[0] == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert got[1] == [(b"b", b"2")]
    assert got[2] == [(b"a", b"other")]
    assert got[3] == []
    assert [split_window_key(k) for k, _ in got[4]] == [(20, 10, b"y")]
    assert [split_window_key(k) for k, _ in got[5]] == [(30, 20, b"x"), (30, 20, b"y")]
    assert b.store_snapshot([]) == []
    # the answer is bounded in bytes: beyond the bound, an error that says to narrow the query
    assert len(b.store_snapshot([StoreScan("app/0/kv")], max_bytes=6)[0]) == 3  # 2 bytes per entry
    with pytest.raises(errors.QueryTooLarge, match="narrow"):
        b.store_snapshot([StoreScan("app/0/kv"), StoreScan("app/1/kv")], max_bytes=6)


@pytest.mark.parametrize("scans, max_bytes", [
    ("not a list", None),
    ([("app/0/kv", None, None)], None),
    ([StoreScan("")], None),
    ([StoreScan("s", "str start")], None),  # type: ignore[arg-type]
    ([StoreScan("s", None, b"e" * 257)], None),
    ([StoreScan("s", limit=0)], None),
    ([StoreScan("s", window_start_from="0")], None),  # type: ignore[arg-type]
    ([StoreScan("s", window_key=b"k" * 256)], None),
    ([StoreScan("s")] * 4097, None),
    ([StoreScan("s")], 0),
    ([StoreScan("s")], (16 << 20) + 1),
])
def test_bad_store_snapshots(shared_engine: ts.Engine, scans: Any, max_bytes: Any) -> None:
    with pytest.raises(errors.InvalidArgument):
        shared_engine.backend.store_snapshot(scans, max_bytes)


WINDOW_KEYS = [b"", b"a", b"ab", b"b", b"\xff"]
window_entries = st.dictionaries(st.tuples(st.integers(-1, 2), st.integers(0, 1), st.sampled_from(WINDOW_KEYS)),
                                 st.binary(max_size=2), min_size=1, max_size=30)


@pytest.fixture(scope="module")
def window_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ts.Engine]:
    """One embedded engine for every example of the seeking test (each writes stores of its own)."""
    with ts.open(tmp_path_factory.mktemp("windows"), durability="async", compaction_interval=None) as engine:
        yield engine


_examples = itertools.count()


@settings(max_examples=150, deadline=None)
@given(stored=window_entries, key=st.sampled_from([*WINDOW_KEYS, b"c"]),
       start_from=st.none() | st.integers(-2, 3), start_to=st.none() | st.integers(-2, 3),
       end_from=st.none() | st.integers(-2, 4), limit=st.none() | st.integers(1, 4))
@example(stored={(1, 1, b"a"): b"1", (2, 0, b"a"): b"2"}, key=b"a", start_from=None, start_to=None, end_from=None,
         limit=None)  # two windows of the key with the same end
@example(stored={(0, 1, b"a"): b"1", (0, 1, b"b"): b"2"}, key=b"b", start_from=None, start_to=None, end_from=None,
         limit=None)  # another key first in the slot
def test_windows_of_one_key_found_by_seeking_equal_a_full_scan(
        window_engine: ts.Engine, stored: dict[tuple[int, int, bytes], bytes], key: bytes, start_from: int | None,
        start_to: int | None, end_from: int | None, limit: int | None) -> None:
    """The windows of one key (found one window slot at a time) are those a filter of every
    entry finds (each example in stores of its own: ``eN/w``, and ``eN/w2`` right after it)."""
    windows = {(start + length, start, k): v for (start, length, k), v in stored.items()}
    expected = sorted((window_key(end, start, k), v) for (end, start, k), v in windows.items()
                      if k == key and (start_from is None or start >= start_from)
                      and (start_to is None or start <= start_to) and (end_from is None or end >= end_from))
    store = f"e{next(_examples)}/w"
    window_engine.backend.submit([O.StoreWrite(store, [[window_key(*w), v] for w, v in windows.items()]),
                                  O.StoreWrite(store + "2", [[b"after", b"x"]])])
    start = None if end_from is None else window_bound(end_from)
    got = window_engine.backend.store_snapshot([StoreScan(store, start, None, limit, key, start_from, start_to)])
    assert got == [expected[:limit]]


@pytest.mark.parametrize("scans", [
    "nope", [["s"]], [["s", None, None, None, None, None, None, "extra"]], [[5, None, None, None, None, None, None]],
    [["s", "start", None, None, None, None, None]], [["s", None, None, -1, None, None, None]],
    [["s", None, None, None, None, "0", None]], [["s", None, b"e" * 300, None, None, None, None]], [None],
])
def test_malformed_store_snapshots_on_the_wire(tstreams_server: Any, scans: Any) -> None:
    """A client that bypasses RemoteBackend gets InvalidArgument for a malformed scan list."""
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(tstreams_server.endpoint)
    try:
        s.send_multipart(framing.request_frames(1, "store_snapshot", 0, [framing.pack([scans, None])]))
        assert s.poll(20_000), "no reply"
        req_id, flags, value = framing.unpack_reply(s.recv_multipart())
    finally:
        s.close(0)
    assert req_id == 1 and flags & framing.ERROR and value[0] == "InvalidArgument", value
