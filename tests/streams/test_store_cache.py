"""Issue 19, items 6 and 21: a task's store cache is bounded by what its entries really take
(deleted keys included), and its range deletes and scans cost the keys in their range.

The cache's answers are checked against a dict model in ``test_task_store.py``; here its
memory (``tracemalloc``: the Python heap the store holds) and the work of its range
operations (comparisons of keys, counted by a ``bytes`` subclass)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded.streams import sorted_keys
from tstreams_embedded.streams.serdes import BytesSerde, JsonSerde, MsgpackSerde, StrSerde
from tstreams_embedded.streams.sorted_keys import SortedKeys
from tstreams_embedded.streams.stores import KeyValueStore

MiB = 1 << 20


@contextmanager
def heap_growth() -> Iterator[Callable[[], int]]:
    """The bytes of Python heap allocated inside the block and still held (a callable)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    held: list[int] = []
    try:
        yield lambda: held[0]
    finally:
        gc.collect()
        held.append(tracemalloc.get_traced_memory()[0] - base)
        tracemalloc.stop()


def commit(engine: ts.Engine, store: KeyValueStore) -> None:
    change = store.changes()
    if change is not None:
        engine.backend.submit([change])
    store.committed()


def test_small_counts_take_at_most_the_cache_setting(tstreams_make_engine: Callable[..., ts.Engine]) -> None:
    """Item 6: 30k small counts in a 1 MiB cache. Counted by their serialized bytes (about
    12 each) they all fit, and took about 5x the setting; counted for what they take, the
    cache keeps what fits in 1 MiB."""
    engine = tstreams_make_engine()
    store = KeyValueStore(engine.backend, "app/0/counts", "counts", StrSerde(), MsgpackSerde(),
                          max_bytes=MiB)
    with heap_growth() as held:
        for i in range(30_000):
            key = f"key-{i}"
            store.put(key, (store.get(key) or 0) + 1)
            if i % 1000 == 999:
                commit(engine, store)
        commit(engine, store)
    assert held() <= 1.5 * MiB, f"the store holds {held() / MiB:.1f} MiB with a 1 MiB cache"
    assert store.cached_bytes <= MiB
    assert store.get("key-0") == 1 and store.get("key-29999") == 1  # evicted or not, the answers stay


def test_deleted_keys_do_not_pile_up(tstreams_make_engine: Callable[..., ts.Engine]) -> None:
    """Item 21: dedup's pattern, a key put then deleted in a later commit, 30k times. The
    deleted keys stayed in the cache as tombstones counted for their key bytes only (11 bytes
    each: all of them fit in a 512 KiB cache, and took about 10x that); now the cache's
    memory, deleted keys included, stays within its setting."""
    engine = tstreams_make_engine()
    store = KeyValueStore(engine.backend, "app/0/seen", "seen", BytesSerde(), MsgpackSerde(),
                          max_bytes=MiB // 2)
    with heap_growth() as held:
        for i in range(30_000):
            kb = b"order-%05d" % i
            assert store.get_raw(kb) is None
            store.put_raw(kb, i)
            if i >= 100:
                store.put_raw(b"order-%05d" % (i - 100), None)
            if i % 500 == 499:
                commit(engine, store)
        commit(engine, store)
    assert held() <= 1.5 * MiB // 2, f"the store holds {held() / MiB:.1f} MiB with a 512 KiB cache"
    assert store.get_raw(b"order-00000") is None and store.get_raw(b"order-29999") == 29_999


class CountingKey(bytes):
    """Key bytes that count how often they are compared."""

    comparisons = 0

    def _count(self) -> None:
        CountingKey.comparisons += 1

    def __lt__(self, other: object) -> bool:
        self._count()
        return bytes.__lt__(self, other)  # type: ignore[arg-type]

    def __le__(self, other: object) -> bool:
        self._count()
        return bytes.__le__(self, other)  # type: ignore[arg-type]

    def __gt__(self, other: object) -> bool:
        self._count()
        return bytes.__gt__(self, other)  # type: ignore[arg-type]

    def __ge__(self, other: object) -> bool:
        self._count()
        return bytes.__ge__(self, other)  # type: ignore[arg-type]

    __hash__ = bytes.__hash__


@pytest.mark.parametrize("dirty", [False, True], ids=["committed", "uncommitted"])
def test_range_deletes_and_scans_cost_the_keys_in_their_range(tstreams_make_engine: Callable[..., ts.Engine],
                                                             dirty: bool) -> None:
    """Item 21: with 20k keys cached, a range delete or a scan of 10 of them compared every
    cached key with the range's bounds (the whole cache, at every commit of a windowed store
    and every scan); now a binary search and the keys in the range."""
    engine = tstreams_make_engine()
    store = KeyValueStore(engine.backend, "app/0/w", "w", BytesSerde(), MsgpackSerde())
    for i in range(20_000):
        store.put_raw(CountingKey(b"%08d" % i), i)
    if not dirty:
        commit(engine, store)
        for i in range(20_000):
            store.get_raw(CountingKey(b"%08d" % i))  # cached again, clean
    CountingKey.comparisons = 0
    assert [v for _, v in store.scan_raw(b"%08d" % 5000, b"%08d" % 5010)] == list(range(5000, 5010))
    store.delete_range_raw(b"%08d" % 7000, b"%08d" % 7010)
    assert CountingKey.comparisons < 500, f"{CountingKey.comparisons} key comparisons for 20 keys"
    assert store.get_raw(b"%08d" % 7005) is None and store.get_raw(b"%08d" % 7010) == 7010


def test_a_value_changed_in_place_after_get_is_not_the_stored_value(
        tstreams_make_engine: Callable[..., ts.Engine]) -> None:
    """What a get returns is the value as put (and as it will be committed), not an object
    the cache shares with the caller: changing it in place changes nothing until it is put."""
    engine = tstreams_make_engine()
    store = KeyValueStore(engine.backend, "app/0/s", "s", StrSerde(), JsonSerde())
    store.put("k", [1])
    store.get("k").append(2)
    assert store.get("k") == [1]
    commit(engine, store)
    assert store.get("k") == [1]


@given(ops=st.lists(st.tuples(st.sampled_from(["add", "add", "discard", "range", "pop_range"]),
                              st.binary(max_size=2), st.one_of(st.none(), st.binary(max_size=2))), max_size=300))
def test_sorted_keys_against_a_sorted_set(ops: list[tuple[str, bytes, bytes | None]]) -> None:
    with mock.patch.object(sorted_keys, "CHUNK", 4):  # small chunks: splits and empty chunks
        keys = SortedKeys()
        model: set[bytes] = set()
        for op, a, b in ops:
            if op == "add":
                keys.add(a)
                model.add(a)
            elif op == "discard":
                keys.discard(a)
                model.discard(a)
            elif op == "pop_range":  # (b None: to the end)
                gone = sorted(k for k in model if a <= k and (b is None or k < b))
                assert keys.pop_range(a, b) == gone
                model.difference_update(gone)
            elif b is not None:
                assert list(keys.irange(a, b)) == sorted(k for k in model if a <= k < b)
                assert list(keys.irange(None, b)) == sorted(k for k in model if k < b)
                assert list(keys.irange(a, None)) == sorted(k for k in model if a <= k)
            assert len(keys) == len(model)
        assert list(keys) == sorted(model)
