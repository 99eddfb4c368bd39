"""The replicated log against a list model (hypothesis stateful): appends, truncation,
trimming with a persistent base, reset onto a snapshot position, and reopening."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tstreams_embedded import errors
from tstreams_embedded.cluster import log as logmod
from tstreams_embedded.cluster.log import Entry, ReplicatedLog

small = st.integers(min_value=0, max_value=6)


class LogModel:
    """A list of ``(epoch, now_ms, calls)`` after a base ``(index, epoch, now_ms)``."""

    def __init__(self) -> None:
        self.base = (0, 0, 0)
        self.entries: list[tuple[int, int, list[Any]]] = []
        self.commit = 0
        self.stored_commit = 0  # what a reopen finds (the commit index is stored with writes)

    @property
    def last(self) -> int:
        return self.base[0] + len(self.entries)

    def at(self, index: int) -> tuple[int, int, list[Any]] | None:
        if index <= self.base[0] or index > self.last:
            return None
        return self.entries[index - self.base[0] - 1]

    def epoch_at(self, index: int) -> int | None:
        if index == self.base[0]:
            return self.base[1]
        e = self.at(index)
        return None if e is None else e[0]

    def size(self) -> int:
        return sum(len(msgpack.packb(list(e), use_bin_type=True)) for e in self.entries)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="tstreams-log-")
        self.log = ReplicatedLog(self.dir, map_size=1 << 24)
        self.model = LogModel()
        self.now = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _next(self, epoch: int) -> tuple[int, int, list[Any]]:
        self.now += 1
        return (epoch, self.now, [["c", self.now, True, [[1, "s"]]]] if self.now % 2 else [])

    @rule(epoch=small)
    def append(self, epoch: int) -> None:
        e = self._next(epoch)
        index = self.log.append(*e)
        self.model.entries.append(e)
        assert index == self.model.last
        self.model.stored_commit = self.model.commit

    @rule(epochs=st.lists(small, min_size=1, max_size=4))
    def append_entries(self, epochs: list[int]) -> None:
        batch = [self._next(ep) for ep in epochs]
        self.log.append_entries([Entry(self.model.last + 1 + i, *e) for i, e in enumerate(batch)])
        self.model.entries.extend(batch)
        self.model.stored_commit = self.model.commit

    @rule(gap=st.integers(min_value=2, max_value=3))
    def append_entries_with_a_gap(self, gap: int) -> None:
        with pytest.raises(errors.InvalidArgument):
            self.log.append_entries([Entry(self.model.last + gap, *self._next(1))])

    @rule(back=small)
    def truncate_after(self, back: int) -> None:
        index = self.model.last - back
        if index < self.model.base[0]:
            with pytest.raises(errors.InvalidArgument):
                self.log.truncate_after(index)
            return
        removed = self.log.truncate_after(index)
        assert removed == self.model.last - index
        del self.model.entries[index - self.model.base[0]:]
        self.model.commit = min(self.model.commit, index)
        self.model.stored_commit = self.model.commit

    @rule(ahead=small, slice_size=st.sampled_from([1, 2, 10_000]))
    def trim_upto(self, ahead: int, slice_size: int) -> None:
        index = self.model.base[0] + ahead
        old = logmod.TRIM_SLICE
        logmod.TRIM_SLICE = slice_size
        try:
            removed = self.log.trim_upto(index)
        finally:
            logmod.TRIM_SLICE = old
        upto = min(index, self.model.last)
        expect = max(0, upto - self.model.base[0])
        assert removed == expect
        if expect:
            epoch, now, _ = self.model.entries[expect - 1]
            self.model.base = (upto, epoch, now)
            del self.model.entries[:expect]

    @rule(ahead=small, epoch=small)
    def reset(self, ahead: int, epoch: int) -> None:
        index = self.model.last + ahead
        self.now += 1
        self.log.reset(index, epoch, self.now)
        self.model.base = (index, epoch, self.now)
        self.model.entries = []
        self.model.commit = self.model.stored_commit = index

    @rule(index=st.integers(min_value=0, max_value=40))
    def set_commit(self, index: int) -> None:
        moved = self.log.set_commit(index)
        new = min(index, self.model.last)
        assert moved == (new > self.model.commit)
        self.model.commit = max(self.model.commit, new)

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = ReplicatedLog(self.dir, map_size=1 << 24)
        m = self.model
        m.commit = max(m.base[0], min(m.stored_commit, m.last))

    @rule(bad=st.sampled_from([-1, True, "1", 2**63]))
    def reset_with_bad_input(self, bad: Any) -> None:
        with pytest.raises(errors.InvalidArgument):
            self.log.reset(bad, 1, 1)

    @invariant()
    def positions_match(self) -> None:
        m, log = self.model, self.log
        assert log.last_index == m.last
        assert log.base_index == m.base[0] and log.base_epoch == m.base[1]
        assert log.first_index == m.base[0] + 1
        assert log.count == len(m.entries)
        assert log.last_epoch == (m.entries[-1][0] if m.entries else m.base[1])
        assert log.commit_index == m.commit
        assert log.size_bytes == m.size()
        for i in range(0, m.last + 2):
            assert log.epoch_at(i) == m.epoch_at(i), i
            now = m.base[2] if i == m.base[0] else (m.at(i) or (None, None))[1]
            assert log.now_at(i) == now, i

    @invariant()
    def reads_match(self) -> None:
        m = self.model
        for start in (m.base[0], m.base[0] + 1, m.last, m.last + 1):
            got = [(e.index, e.epoch, e.now_ms, e.calls) for e in self.log.read(start, limit=3)]
            want = [(i, *m.at(i)) for i in range(start, min(m.last, start + 2) + 1) if m.at(i) is not None]  # type: ignore[misc]
            if m.at(start) is None:
                want = []
            assert got == want

    @invariant()
    def end_of_epoch_matches(self) -> None:
        m = self.model
        for epoch in range(0, 7):
            want = 0
            for i in range(m.last, m.base[0], -1):
                at = m.at(i)
                assert at is not None
                if at[0] <= epoch:
                    want = i
                    break
            else:
                want = m.base[0] if m.base[1] <= epoch else 0
            assert self.log.end_of_epoch(epoch) == want


LogMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
TestLogMachine = LogMachine.TestCase


def test_index_to_fit(tmp_path: Any) -> None:
    log = ReplicatedLog(str(tmp_path), map_size=1 << 24)
    sizes = []
    for i in range(10):
        log.append(1, i, [["c", i, True, [[1, "x" * (10 * i)]]]])
        sizes.append(len(msgpack.packb([1, i, [["c", i, True, [[1, "x" * (10 * i)]]]]], use_bin_type=True)))
    assert log.size_bytes == sum(sizes)
    assert log.index_to_fit(log.size_bytes) == 0
    for budget in range(0, sum(sizes) + 1, 7):
        upto = log.index_to_fit(budget)
        assert sum(sizes[upto:]) <= budget
        assert upto == 0 or sum(sizes[upto - 1:]) > budget  # the smallest such index
    log.close()


class _HookedEnv:
    """The log's LMDB environment with ``hook()`` run right after each write transaction
    commits: inside :meth:`ReplicatedLog.append`, before the log records its new last index
    (the window a concurrent fetch ran into)."""

    def __init__(self, env: Any, hook: Any) -> None:
        self.env = env
        self.hook = hook

    def begin(self, write: bool = False, **kwargs: Any) -> Any:
        txn = self.env.begin(write=write, **kwargs)
        if not write:
            return txn
        hook = self.hook

        class Txn:
            def __enter__(self) -> Any:
                return txn.__enter__()

            def __exit__(self, *exc: Any) -> Any:
                out = txn.__exit__(*exc)
                hook()
                return out

        return Txn()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def test_a_read_during_an_append_never_goes_past_the_last_index(tmp_path: Any) -> None:
    """Bug (#20, "truncated 1 uncommitted log entries" on a caught-up follower of a stable
    leader): a fetch answered while the leader appended read the new entry from LMDB before
    the log had moved its last index; the follower then asked from one past the leader's
    last index and was told to truncate that entry. The schedule: append commits, a fetch
    reads, then the append updates the index. Reads now stop at the last index."""
    log = ReplicatedLog(str(tmp_path / "log"))
    try:
        log.append(1, 1, [])
        seen: list[tuple[list[int], int]] = []
        log.env = _HookedEnv(log.env, lambda: seen.append(([e.index for e in log.read(1)], log.last_index)))
        log.append(1, 2, [])
        [(indexes, last)] = seen
        assert last == 1 and indexes == [1], "the read went past the log's last index"
        assert [e.index for e in log.read(1)] == [1, 2]  # once appended, it is read
    finally:
        log.env = getattr(log.env, "env", log.env)
        log.close()


def test_a_failed_fsync_poisons_the_log(tmp_path: Any) -> None:
    """After a failed fsync what was written may be lost although a later fsync succeeds
    ("fsyncgate"): the log takes no more writes and never counts the entry as durable."""
    from tstreams_embedded.testing.disk import FaultyDisk

    disk = FaultyDisk()
    log = ReplicatedLog(str(tmp_path / "log"), fsync=disk.fsync)
    try:
        log.append(1, 1, [])
        disk.failing = True
        with pytest.raises(OSError):
            log.append(1, 2, [])
        disk.failing = False
        assert log.durable_index == 1
        with pytest.raises(OSError):
            log.sync()
        with pytest.raises(OSError):
            log.append(1, 3, [])
        with pytest.raises(OSError):
            log.append_entries([Entry(3, 1, 3, [])])
        assert log.durable_index == 1 and log.failed is not None
    finally:
        log.close()
