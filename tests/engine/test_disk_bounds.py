"""Disk stays flat under a steady workload (issue 19, items 5 and 22): the commit log is
bounded by bytes (``log_retention_bytes``) as well as entries, so rewriting the same
state-store keys, or producing into streams with a TTL, does not grow the data file once
compaction runs. The long versions run under the ``soak`` marker."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.testing import FakeClock

KIB = 1024
MIB = 1024 * KIB


def _rewrite_keys(engine: ts.Engine, round_no: int, keys: int = 2000, per_write: int = 200) -> None:
    """One round: every key of the store written again (as a streams task commits state)."""
    for start in range(0, keys, per_write):
        puts = [[b"key-%06d" % k, b"%08d" % round_no + b"v" * 100] for k in range(start, start + per_write)]
        engine.backend.submit([O.StoreWrite("counts", puts)])


def _data_file_pages(engine: ts.Engine) -> int:
    return int(engine.stats()["last_pgno"])


def test_log_retention_bytes_bounds_the_commit_log(make_engine) -> None:
    engine = make_engine(log_retention_bytes=512 * KIB, durability="async")
    for r in range(30):
        _rewrite_keys(engine, r)
    before = engine.backend.log_footprint()
    assert before.bytes > 3 * MIB  # 300 entries of 20 KiB each; 100,000 entries were kept before
    assert engine.compact()["log_entries_trimmed"] > 0
    after = engine.backend.log_footprint()
    assert after.bytes <= 512 * KIB and after.entries > 0
    assert after.first + after.entries - 1 == engine.backend.log_seq()  # the newest entries are kept


def test_rewriting_the_same_keys_keeps_the_data_file_flat(make_engine) -> None:
    engine = make_engine(log_retention_bytes=512 * KIB, durability="async")
    pages = []
    for r in range(80):
        _rewrite_keys(engine, r)
        engine.compact()
        pages.append(_data_file_pages(engine))
    warm = pages[19]
    assert pages[-1] <= warm * 1.1 + 16, pages  # before the byte bound: about 4x from round 20 to 80
    assert engine.backend.store_get("counts", b"key-000007") == b"%08d" % 79 + b"v" * 100


def _steady_round(engine: ts.Engine, clock: FakeClock, r: int) -> None:
    """One second of a streams app's steady load: input with a TTL, and a state write of
    1,500 keys (a commit-log entry of about 40 KiB), with the dedup keys of 30 s ago deleted."""
    producer = engine.producer("input")
    for t in range(20):
        producer.instant([b'{"id": %d, "pad": "%s"}' % (r * 100 + t * 10 + i, b"x" * (20 + (i * 7) % 60))
                          for i in range(10)], partition=t % 4)
    puts = [[b"dedup-%09d" % (r * 1500 + i), b"%d" % clock()] for i in range(1500)]
    deletes = [b"dedup-%09d" % (k - 45_000) for k in range(r * 1500, r * 1500 + 1500)] if r >= 30 else None
    engine.backend.submit([O.StoreWrite("dedup", puts, deletes)])
    clock.advance(seconds=1.0)


def test_disk_plateaus_under_a_steady_load_with_ttls(make_engine, clock) -> None:
    """Issue 19, item 22: with the log at its bound and TTL compaction reclaiming the input,
    the data file stops growing. It grew before: large log entries took runs of overflow
    pages, which LMDB could not find again in a free list fragmented by single pages."""
    engine = make_engine(clock=clock, durability="async", log_retention=50)
    engine.create_stream("input", partitions=4, ttl=20)
    pages = []
    for r in range(160):
        _steady_round(engine, clock, r)
        if r % 5 == 4:
            engine.compact()
            pages.append(_data_file_pages(engine))
    warm = pages[11]  # after 60 s: TTL compaction and dedup deletes have been running for 30 s
    assert pages[-1] <= warm + 16, pages  # before: +40% from 60 s to 160 s, and still growing


def test_large_compactions_and_trims_do_not_grow_the_data_file(make_engine, clock) -> None:
    """Compaction and log trims free space in small commits: one commit freeing thousands
    of pages wrote a free-list record needing a run of overflow pages, which a fragmented
    free list did not have, so the file grew by about 8 pages per compaction for ever
    (the 0.25 MiB/min left in the first soak after the log was cut into pieces)."""
    engine = make_engine(clock=clock, durability="async", log_retention_bytes=4 * MIB)
    engine.create_stream("input", partitions=4, ttl=10)
    pages = {}
    for r in range(500):
        _soak_round(engine, r)
        clock.advance(200)
        if r % 25 == 24:  # compaction every 5 s of this 5-rounds-a-second load
            engine.compact()
            pages[r + 1] = _data_file_pages(engine)
    assert pages[500] <= pages[300] + 8, pages  # warm after 150 rounds (dedup deletes); before: +60


def test_log_retention_bytes_is_validated(tmp_path) -> None:
    from tstreams_embedded import errors

    with pytest.raises(errors.InvalidArgument, match="log_retention_bytes"):
        ts.open(tmp_path / "x", log_retention_bytes=-1)


SOAK_MINUTES = float(os.environ.get("TSTREAMS_SOAK_MINUTES", "10"))


def _soak(workload: Callable[[ts.Engine, int], None], engine: ts.Engine, path: str, minutes: float,
          rounds_per_second: float, label: str) -> list[tuple[float, int]]:
    """Run ``workload(engine, round)`` at ``rounds_per_second`` for ``minutes``, sampling
    the data file's size every 15 s; print and return the samples ``(seconds, bytes)``."""
    samples: list[tuple[float, int]] = []
    pace = threading.Event()  # never set: waits pace the rounds
    start = time.monotonic()
    next_sample = start
    r = 0
    while time.monotonic() - start < minutes * 60:
        workload(engine, r)
        r += 1
        if time.monotonic() >= next_sample:
            samples.append((round(time.monotonic() - start, 1), os.path.getsize(os.path.join(path, "data.mdb"))))
            print(f"{label}: round {r}, {samples[-1][0]} s, data.mdb {samples[-1][1]} bytes", flush=True)
            next_sample += 15
        pace.wait(max(0.0, start + r / rounds_per_second - time.monotonic()))
    print(f"\n{label}: {r} rounds; data.mdb (s, bytes):", samples)
    return samples


def _slope_mb_per_min(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of the samples, in MiB per minute."""
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    ms = sum(b for _, b in samples) / n
    num = sum((t - mt) * (b - ms) for t, b in samples)
    den = sum((t - mt) ** 2 for t, _ in samples) or 1.0
    return num / den * 60 / MIB


def _soak_round(engine: ts.Engine, r: int) -> None:
    """A streams app's load at 1,000 items/s (5 rounds a second): input with a 60 s TTL,
    its dedup state (1,500 keys written per round, those of 30 s ago deleted), and counts
    (the same 2,000 keys rewritten every round)."""
    producer = engine.producer("input")
    for t in range(20):
        producer.instant([b'{"id": %d, "pad": "%s"}' % (r * 200 + t * 10 + i, b"x" * (20 + (i * 7) % 60))
                          for i in range(10)], partition=t % 4)
    puts = [[b"dedup-%09d" % (r * 1500 + i), b"%d" % r] for i in range(1500)]
    deletes = [b"dedup-%09d" % (k - 150 * 1500) for k in range(r * 1500, r * 1500 + 1500)] if r >= 150 else None
    engine.backend.submit([O.StoreWrite("dedup", puts, deletes)])
    _rewrite_keys(engine, r, keys=2000, per_write=500)


@pytest.mark.soak
@pytest.mark.timeout(SOAK_MINUTES * 60 + 300)
def test_soak_disk_plateaus_under_a_steady_load_with_ttls(tmp_path) -> None:
    """Items 5 and 22 over minutes, in real time, with background compaction every 5 s:
    the data file grows while the TTL and the log fill up, then stays flat (slope over the
    last 5 minutes at most 0.1 MiB/min)."""
    path = str(tmp_path / "soak")
    with ts.open(path, durability="async", compaction_interval=5.0, log_retention_bytes=16 * MIB) as engine:
        engine.create_stream("input", partitions=4, ttl=60)
        samples = _soak(_soak_round, engine, path, SOAK_MINUTES, 5.0, "steady load with TTLs")
    tail = [s for s in samples if s[0] >= samples[-1][0] - 300]
    assert _slope_mb_per_min(tail) <= 0.1, samples


def test_large_log_entries_read_back_whole_and_trim_whole(make_engine, tmp_path) -> None:
    """Entries larger than a page are stored in pieces (see .commitlog): read_log, stats,
    trimming and ``tstreams check`` all see whole entries."""
    from tstreams_embedded.engine.operator.check import check_directory

    path = tmp_path / "pieces"
    engine = make_engine(path, durability="async", log_retention=None, log_retention_bytes=None)
    big = [[b"k%05d" % i, b"v" * (i % 40)] for i in range(3000)]  # about 80 KiB logged
    engine.backend.submit([O.StoreWrite("s", big)])
    engine.backend.submit([O.StoreWrite("s", [[b"small", b"1"]])])
    engine.backend.submit([O.StoreWrite("s", big[:1000])])
    log = engine.backend.read_log(0)
    assert [seq for seq, _, _ in log] == [1, 2, 3]
    assert log[0][2] == [O.StoreWrite("s", big)] and log[2][2] == [O.StoreWrite("s", big[:1000])]
    assert engine.backend.read_log(2)[0][2] == [O.StoreWrite("s", [[b"small", b"1"]])]
    assert engine.stats()["log_entries"] == 3
    footprint = engine.backend.log_footprint()
    assert (footprint.first, footprint.entries) == (1, 3)
    with engine.backend.store.read() as txn:  # no overflow pages: each piece fits in a page
        assert txn.stat(engine.backend.store.log)["overflow_pages"] == 0
    assert engine.backend.trim_log(1) == 1
    assert [seq for seq, _, _ in engine.backend.read_log(0)] == [2, 3]
    engine.close()
    report = check_directory(str(path))
    assert report.ok, report.problems
    assert report.counts["log_entries"] == 2


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 1979, 1980, 1981, 1983, 1984, 1985, 3964, 3965, 3968, 3969, 9000]),
                      min_size=1, max_size=12),
       trim=st.integers(0, 13), start=st.integers(1, 13))
def test_log_pieces_round_trip(tmp_path_factory: pytest.TempPathFactory, sizes: list[int], trim: int,
                               start: int) -> None:
    """Entries of any size read back whole, from any start, after trimming any prefix."""
    from tstreams_embedded.engine.storage import commitlog, keys
    from tstreams_embedded.engine.storage.store import Store

    store = Store(str(tmp_path_factory.mktemp("pieces")), "async")
    try:
        values = {seq: bytes([seq]) * n for seq, n in enumerate(sizes, start=1)}
        txn = store.env.begin(write=True)
        for seq, value in values.items():
            commitlog.put_entry(txn, store, seq, value)
        removed, more = commitlog.trim_slice(txn, store, trim, limit=len(sizes), max_bytes=1 << 30)
        assert not more
        txn.commit()
        kept = {s: v for s, v in values.items() if s > trim}
        assert removed == len(values) - len(kept)
        with store.read() as rtxn:
            cur = rtxn.cursor(db=store.log)
            got = dict(commitlog.iter_entries(cur.iternext(), store)) if cur.set_range(keys.U64.pack(start)) else {}
            assert got == {s: v for s, v in kept.items() if s >= start}
            size = commitlog.footprint(rtxn, store)
            assert size.entries == len(kept) and (size.first == min(kept) if kept else size.first == 0)
    finally:
        store.close()
