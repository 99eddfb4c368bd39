"""A task's KeyValueStore (memory cache + one StoreWrite per commit) against a dict model,
with commits and crashes (uncommitted changes lost)."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.streams.serdes import MsgpackSerde, StrSerde
from tstreams_embedded.streams.store_cache import entry_cost
from tstreams_embedded.streams.stores import KeyValueStore

keys = st.text(alphabet="abcd", max_size=3)


class TaskStore(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.engine = ts.open(self.dir.name, durability="async", compaction_interval=None)
        self.store = self._open()
        self.committed: dict[str, int] = {}
        self.current: dict[str, int] = {}

    def _open(self) -> KeyValueStore:
        return KeyValueStore(self.engine.backend, "app/0/s", "s", StrSerde(), MsgpackSerde())

    @rule(key=keys, value=st.integers(0, 9))
    def put(self, key: str, value: int) -> None:
        self.store.put(key, value)
        self.current[key] = value

    @rule(key=keys)
    def delete(self, key: str) -> None:
        self.store.delete(key)
        self.current.pop(key, None)

    @rule(lo=keys, hi=keys)
    def delete_range(self, lo: str, hi: str) -> None:
        self.store.delete_range_raw(lo.encode(), hi.encode())
        for k in [k for k in self.current if lo <= k < hi]:
            del self.current[k]

    @rule(key=keys)
    def get(self, key: str) -> None:
        assert self.store.get(key) == self.current.get(key)

    @rule(lo=keys, hi=keys)
    def range(self, lo: str, hi: str) -> None:
        assert list(self.store.range(lo, hi)) == sorted((k, v) for k, v in self.current.items() if lo <= k < hi)

    @rule()
    def commit(self) -> None:
        change = self.store.changes()
        if change is not None:
            self.engine.backend.submit([change])
        self.store.committed()
        self.committed = dict(self.current)

    @rule()
    def crash(self) -> None:
        """Uncommitted changes are lost; a new store instance sees the last commit."""
        self.store = self._open()
        self.current = dict(self.committed)

    @invariant()
    def contents(self) -> None:
        assert list(self.store.all()) == sorted(self.current.items())
        stored = [(k.decode(), MsgpackSerde().deserialize(v)) for k, v in self.engine.backend.store_range("app/0/s")]
        assert stored == sorted(self.committed.items())

    def teardown(self) -> None:
        self.engine.close()
        self.dir.cleanup()


TestTaskStore = TaskStore.TestCase
TestTaskStore.settings = settings(max_examples=30, stateful_step_count=20, deadline=None)


def test_keys_too_long_for_the_engine_are_refused_at_once(tstreams_make_engine: object) -> None:
    engine = tstreams_make_engine()  # type: ignore[operator]
    store = KeyValueStore(engine.backend, "app/0/s", "s", StrSerde(), MsgpackSerde())
    with pytest.raises(errors.InvalidArgument, match="'s'"):
        store.put("k" * 256, 1)


@pytest.mark.parametrize("page", [1, 2, 3, 1000])
def test_reads_page_through_every_entry(tstreams_make_engine: object, monkeypatch: pytest.MonkeyPatch,
                                        page: int) -> None:
    from tstreams_embedded.engine.protocol import ops as O
    from tstreams_embedded.streams import stores

    monkeypatch.setattr(stores, "PAGE", page)
    engine = tstreams_make_engine()  # type: ignore[operator]
    entries = {f"k{i:02d}": i for i in range(10)}
    engine.backend.submit([O.StoreWrite("app/0/s", [[k.encode(), MsgpackSerde().serialize(v)]
                                                    for k, v in entries.items()])])
    view = stores.ReadOnlyKeyValueStore(engine.backend, ["app/0/s"], StrSerde(), MsgpackSerde())
    assert view.all() == entries
    assert view.range("k03", "k07") == [(f"k{i:02d}", i) for i in range(3, 7)]
    store = KeyValueStore(engine.backend, "app/0/s", "s", StrSerde(), MsgpackSerde())
    store.delete("k05")
    store.put("k055", 55)
    expected = sorted({**{k: v for k, v in entries.items() if k != "k05"}, "k055": 55}.items())
    assert list(store.all()) == expected


class TinyCacheTaskStore(TaskStore):
    """The same with a cache of 8 bytes: entries are dropped all the time (the answers must
    not change), and after a commit the cache is within its bound."""

    def _open(self) -> KeyValueStore:
        return KeyValueStore(self.engine.backend, "app/0/s", "s", StrSerde(), MsgpackSerde(), max_bytes=8)

    @rule()
    def commit(self) -> None:
        super().commit()
        assert self.store.cached_bytes <= 8  # only changes may pass the bound, until they are committed


TestTinyCacheTaskStore = TinyCacheTaskStore.TestCase
TestTinyCacheTaskStore.settings = settings(max_examples=30, stateful_step_count=20, deadline=None)


class SmallCacheTaskStore(TinyCacheTaskStore):
    """The same with room for a few entries (:func:`~tstreams_embedded.streams.store_cache.entry_cost`):
    generations turn over, clean copies of changed keys are hidden, then dropped."""

    BOUND = 5 * entry_cost(b"abc", b"\x09")

    def _open(self) -> KeyValueStore:
        return KeyValueStore(self.engine.backend, "app/0/s", "s", StrSerde(), MsgpackSerde(), max_bytes=self.BOUND)

    @rule()
    def commit(self) -> None:
        TaskStore.commit(self)
        assert self.store.cached_bytes <= self.BOUND


TestSmallCacheTaskStore = SmallCacheTaskStore.TestCase
TestSmallCacheTaskStore.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
