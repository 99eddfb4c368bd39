"""Interactive queries read ONE snapshot, embedded and remote: while a writer moves amounts
between keys of two tasks' stores in atomic commits (the total never changes), every query
that spans both tasks and many pages shows the total."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.storage.state_stores import window_key
from tstreams_embedded.streams.serdes import serde
from tstreams_embedded.streams.stores import ReadOnlyKeyValueStore, ReadOnlyWindowStore
from tstreams_embedded.streams.windows import Windowed

KEYS = 5_000  # per task: more than one page of the old page-by-page reads (4,096)
START = 100
TOTAL = 2 * KEYS * START
QUERIES = 12

key_serde, value_serde = serde("str"), serde("msgpack")
KV = ["acct/0/balances", "acct/1/balances"]
WIN = ["acct/0/windows", "acct/1/windows"]


def kv_key(task: int, i: int) -> bytes:
    return key_serde.serialize(f"t{task}-{i:05d}")


def win_key(task: int, i: int) -> bytes:
    return window_key(1000 + i, i, kv_key(task, i))


class Mover:
    """Moves amounts between a key of task 0 and a key of task 1 (in the key-value and the
    windowed store), each move one atomic commit, until stopped; counts its commits."""

    def __init__(self, backend: ts.Engine) -> None:
        self.backend = backend.backend
        self.values = [[START] * KEYS, [START] * KEYS]
        for task in (0, 1):
            for lo in range(0, KEYS, 1000):
                puts = [[kv_key(task, i), value_serde.serialize(START)] for i in range(lo, lo + 1000)]
                wins = [[win_key(task, i), value_serde.serialize(START)] for i in range(lo, lo + 1000)]
                self.backend.submit([O.StoreWrite(KV[task], puts), O.StoreWrite(WIN[task], wins)], durable=False)
        self.commits = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = random.Random(7)
        try:
            while not self.stop.is_set():
                i, j = rng.randrange(KEYS), rng.randrange(KEYS)
                amount = rng.randint(1, 50)
                self.values[0][i] -= amount
                self.values[1][j] += amount
                a, b = value_serde.serialize(self.values[0][i]), value_serde.serialize(self.values[1][j])
                self.backend.submit([O.StoreWrite(KV[0], [[kv_key(0, i), a]]), O.StoreWrite(KV[1], [[kv_key(1, j), b]]),
                                     O.StoreWrite(WIN[0], [[win_key(0, i), a]]),
                                     O.StoreWrite(WIN[1], [[win_key(1, j), b]])],
                                    durable=False)
                self.commits += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


@pytest.fixture
def mover(tstreams_engine: ts.Engine) -> Iterator[Mover]:
    m = Mover(tstreams_engine)
    m.thread.start()
    try:
        yield m
    finally:
        m.stop.set()
        m.thread.join(timeout=60)
    assert m.error is None, m.error


def run_queries(mover: Mover, queries: dict[str, Callable[[], int]]) -> None:
    """Each query QUERIES times while the mover commits: every answer shows the total, and
    the mover committed while the queries ran (else the test proves nothing)."""
    before = mover.commits
    for _ in range(QUERIES):
        for what, query in queries.items():
            assert query() == TOTAL, f"{what} mixed two commits"
    assert mover.commits - before >= QUERIES, "the writer hardly committed during the queries"


def test_key_value_queries_read_one_snapshot(tstreams_engine: ts.Engine, mover: Mover) -> None:
    store = ReadOnlyKeyValueStore(tstreams_engine.backend, KV, key_serde, value_serde)
    run_queries(mover, {
        "all": lambda: sum(store.all().values()),
        "range": lambda: sum(v for _, v in store.range("t0", "t2")),
        "prefix": lambda: sum(v for _, v in store.prefix("t")),
        "entries": lambda: sum(value_serde.deserialize(v) for _, v in store.entries(None, None, 10_000)),
    })
    assert len(store.all()) == len(store.range()) == 2 * KEYS


def test_window_queries_read_one_snapshot(tstreams_engine: ts.Engine, mover: Mover) -> None:
    store = ReadOnlyWindowStore(tstreams_engine.backend, WIN, key_serde, value_serde)
    run_queries(mover, {
        "fetch_all": lambda: sum(v for _, v in store.fetch_all()),
        "all": lambda: sum(store.all().values()),
        "fetch_all(0, KEYS)": lambda: sum(v for _, v in store.fetch_all(0, KEYS)),
    })
    assert len(store.all()) == 2 * KEYS
    assert [w for w, _ in store.fetch("t1-00007", 7, 7)] == [Windowed("t1-00007", 7, 1007)]
    assert [w.key for w, _ in store.fetch_all(7, 8)] == ["t0-00007", "t1-00007", "t0-00008", "t1-00008"]


def test_a_query_beyond_its_byte_bound_raises_query_too_large(tstreams_engine: ts.Engine) -> None:
    tstreams_engine.backend.submit([O.StoreWrite(names[task], [[key(task, i), value_serde.serialize(i)]
                                                               for i in range(100)])
                                    for names, key in ((KV, kv_key), (WIN, win_key)) for task in (0, 1)])
    store = ReadOnlyKeyValueStore(tstreams_engine.backend, KV, key_serde, value_serde, max_bytes=500)
    with pytest.raises(errors.QueryTooLarge, match="narrow"):
        store.all()
    assert store.range("t0-00000", "t0-00010") == [(f"t0-{i:05d}", i) for i in range(10)]  # narrowed: answered
    assert [k for k, _ in store.entries(None, None, limit=3)] == [kv_key(0, i) for i in range(3)]
    windows = ReadOnlyWindowStore(tstreams_engine.backend, WIN, key_serde, value_serde, max_bytes=500)
    with pytest.raises(errors.QueryTooLarge):
        windows.fetch_all()
    assert windows.fetch("t1-00042") == [(Windowed("t1-00042", 42, 1042), 42)]


def test_range_bounds_longer_than_any_stored_key(tstreams_engine: ts.Engine) -> None:
    longest = "a" * 255  # the longest stored key there can be
    tstreams_engine.backend.submit([O.StoreWrite(KV[0], [[key_serde.serialize(k), value_serde.serialize(1)]
                                                         for k in (longest, "b")])])
    store = ReadOnlyKeyValueStore(tstreams_engine.backend, KV, key_serde, value_serde)
    assert store.range("a" * 300) == [("b", 1)]  # longest < "a" * 300 < "b"
    assert store.range("a" * 254, "a" * 300) == [(longest, 1)]
    assert store.range("a" * 256, "c" * 400) == [("b", 1)]
    assert store.entries(key_serde.serialize("a" * 300), None, limit=1) == [(b"b", value_serde.serialize(1))]
    assert store.get("a" * 300) is None
