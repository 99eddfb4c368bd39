"""The ``Lease`` and ``CheckLease`` records (scale-out's membership and fencing), against a
pure-Python model, embedded and served."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.engine.storage.state_stores import LeaseRecord, unpack_lease
from tstreams_embedded.testing import FakeClock

STORE = "app/__group"


@given(st.text(max_size=40), st.integers(0, 2**62), st.integers(0, 2**62))
def test_a_stored_lease_is_a_typed_record(owner: str, epoch: int, deadline: int) -> None:
    record = LeaseRecord(owner, epoch, deadline)
    assert LeaseRecord.unpack(record.pack()) == record
    assert type(LeaseRecord.unpack(record.pack())) is LeaseRecord
    assert record.held_by(owner, epoch) and not record.held_by(owner, epoch + 1)
    assert record.live_at(deadline - 1) == bool(owner) and not record.live_at(deadline)


@pytest.mark.parametrize("value", [b"\x93\x01\x02\x03", b"\x92\xa1a\x01", b"\xc1", b"\x93\xa1a\x01\xa1x"])
def test_a_stored_value_that_is_not_a_lease_is_reported_corrupted(value: bytes) -> None:
    with pytest.raises(errors.DataCorrupted, match="not \\[owner, epoch, deadline\\]"):
        LeaseRecord.unpack(value)


def test_take_renew_release_and_fence(tstreams_engine: ts.Engine) -> None:
    b = tstreams_engine.backend
    (deadline,) = b.submit([O.Lease(STORE, b"t0", "a", 1, 60_000)])
    assert deadline >= b.now_ms() + 50_000
    stored = unpack_lease(b.store_get(STORE, b"t0"))
    assert stored == LeaseRecord("a", 1, deadline) and stored.held_by("a", 1) and stored.live_at(b.now_ms())
    with pytest.raises(errors.LeaseConflict, match="held by 'a'"):
        b.submit([O.Lease(STORE, b"t0", "b", 2, 60_000)])  # still held
    b.submit([O.CheckLease(STORE, b"t0", "a", 1), O.StoreWrite("app/0/s", [[b"k", b"1"]])])
    assert b.store_get("app/0/s", b"k") == b"1"
    assert b.submit([O.Lease(STORE, b"t0", "a", 1, 0)]) == [0]  # release
    b.submit([O.Lease(STORE, b"t0", "b", 2, 60_000)])  # taken: a new epoch
    with pytest.raises(errors.LeaseConflict, match="fenced write was refused"):
        b.submit([O.CheckLease(STORE, b"t0", "a", 1), O.StoreWrite("app/0/s", [[b"k", b"2"]])])
    assert b.store_get("app/0/s", b"k") == b"1", "the fenced batch wrote nothing"
    with pytest.raises(errors.LeaseConflict):
        b.submit([O.Lease(STORE, b"t0", "a", 1, 60_000)])  # the old owner cannot renew
    with pytest.raises(errors.LeaseConflict, match="needs epoch 3"):
        b.submit([O.Lease(STORE, b"t0", "c", 5, 60_000)])
    b.submit([O.Lease(STORE, b"t0", "b2", 3, 60_000, force=True)])  # a successor takes a held lease at once
    with pytest.raises(errors.LeaseConflict):
        b.submit([O.CheckLease(STORE, b"t0", "b", 2)])  # ... and the old holder is fenced
    with pytest.raises(errors.LeaseConflict, match="needs epoch 4"):
        b.submit([O.Lease(STORE, b"t0", "c", 3, 60_000, force=True)])  # force is still a compare-and-set


@pytest.mark.parametrize("bad, error", [
    (O.Lease(STORE, "not bytes", "a", 1, 10), errors.InvalidArgument),  # type: ignore[arg-type]
    (O.Lease(STORE, b"k", "", 1, 10), errors.InvalidArgument),
    (O.Lease(STORE, b"k", "a", -1, 10), errors.InvalidArgument),
    (O.Lease(STORE, b"k", "a", 1, -5), errors.InvalidArgument),
    (O.Lease(STORE, b"k" * 300, "a", 1, 10), errors.InvalidArgument),
    (O.Lease(STORE, b"k", "a", 1, 10, deadline=5), errors.InvalidArgument),  # engine-resolved
    (O.Lease(STORE, b"k", "a", 1, 10, force="yes"), errors.InvalidArgument),  # type: ignore[arg-type]
    (O.CheckLease(STORE, b"k", 7, 1), errors.InvalidArgument),  # type: ignore[arg-type]
    (O.CheckLease(STORE, b"k", "a", 1), errors.LeaseConflict),  # no such lease
])
def test_bad_lease_records_write_nothing(shared_engine: ts.Engine, bad: Any, error: type) -> None:
    b = shared_engine.backend
    with pytest.raises(error):
        b.submit([O.StoreWrite("app/0/s", [[b"x", b"1"]]), bad])
    assert b.store_get("app/0/s", b"x") is None


class LeaseMachine(RuleBasedStateMachine):
    """Random takes, renewals, releases, fences and clock moves against a model."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.dir = tempfile.mkdtemp(prefix="leases-")
        self.engine = ts.open(self.dir, clock=self.clock, durability="async", compaction_interval=None,
                              keepalive_interval=None)
        self.model: dict[bytes, tuple[str, int, int]] = {}

    def _expect(self, key: bytes, owner: str, epoch: int, ttl: int, force: bool) -> bool:
        now = self.clock()
        cur = self.model.get(key, ("", 0, 0))
        if (cur[0], cur[1]) == (owner, epoch) and epoch > 0:
            return True
        if ttl == 0 or epoch != cur[1] + 1:
            return False
        return force or not (cur[0] and cur[2] > now)

    @rule(key=st.sampled_from([b"a", b"b"]), owner=st.sampled_from(["x", "y"]), epoch=st.integers(0, 4),
          ttl=st.sampled_from([0, 10, 1000]), force=st.booleans())
    def lease(self, key: bytes, owner: str, epoch: int, ttl: int, force: bool) -> None:
        ok = self._expect(key, owner, epoch, ttl, force)
        try:
            (deadline,) = self.engine.backend.submit([O.Lease(STORE, key, owner, epoch, ttl, force)])
        except errors.LeaseConflict:
            assert not ok
            return
        assert ok
        assert deadline == (self.clock() + ttl if ttl else 0)
        self.model[key] = (owner if ttl else "", epoch, deadline)

    @rule(key=st.sampled_from([b"a", b"b"]), owner=st.sampled_from(["x", "y"]), epoch=st.integers(0, 4))
    def fenced_write(self, key: bytes, owner: str, epoch: int) -> None:
        ok = key in self.model and self.model[key][:2] == (owner, epoch)
        try:
            self.engine.backend.submit([O.CheckLease(STORE, key, owner, epoch), O.StoreWrite("w", [[key, b"v"]])])
        except errors.LeaseConflict:
            assert not ok
            return
        assert ok

    @rule(ms=st.sampled_from([1, 10, 500]))
    def tick(self, ms: int) -> None:
        self.clock.advance(ms)

    @invariant()
    def stored_equals_model(self) -> None:
        for key in (b"a", b"b"):
            assert unpack_lease(self.engine.backend.store_get(STORE, key)) == self.model.get(key)

    def teardown(self) -> None:
        self.engine.close()
        shutil.rmtree(self.dir, ignore_errors=True)


TestLeasesFollowTheModel = LeaseMachine.TestCase
TestLeasesFollowTheModel.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
