"""StateTimeReader (what a cluster follower serves reads with): reads judged at a given
state time, stepping over transactions expired at that time WITHOUT writing anything."""

from __future__ import annotations

from collections.abc import Callable

import tstreams_embedded as ts
from tstreams_embedded.engine.storage.state_time_reads import StateTimeReader
from tstreams_embedded.testing import FakeClock


def test_expired_open_transaction_is_passed_without_a_write(make_engine: Callable[..., ts.Engine]) -> None:
    clock = FakeClock()
    engine = make_engine(clock=clock, txn_ttl=5, keepalive_interval=None)
    core = engine.backend
    engine.create_stream("s")
    producer = engine.producer("s", partition=0)
    first = producer.instant([b"a"])
    stuck = producer.new_transaction(partition=0)
    stuck.send(b"never")
    stuck.flush()
    after = producer.instant([b"b"])
    deadline_passed = clock() + 6000
    seq = core.log_seq()  # type: ignore[attr-defined]

    state_time = [clock()]
    reader = StateTimeReader(core, lambda: state_time[0])  # type: ignore[arg-type]
    # at a state time before the deadline: the open transaction blocks, as for every reader
    scan = reader.scan_index("s", 0, 0)
    assert [i for i, _ in scan.entries] == [first] and scan.blocked
    # at a state time past it: passed over, and nothing was written
    state_time[0] = deadline_passed
    scan = reader.scan_index("s", 0, 0)
    assert [i for i, _ in scan.entries] == [first, after] and not scan.blocked
    page, position, blocked = reader.page_scan("s", 0, 0, 2**63 - 1, 100, None, 1 << 20)
    assert [t[3] for t in page.txns] == [[b"a"], [b"b"]] and position == after and not blocked
    assert core.log_seq() == seq  # type: ignore[attr-defined]
    assert core.get_transaction("s", 0, stuck.id) is None  # type: ignore[attr-defined]
    assert reader.page_last_transaction("s", 0, None, 1 << 20)[0][2] == after

    # the embedded Core, at its own clock past the deadline, invalidates it with a write
    clock.set(deadline_passed)
    assert [t.id for t in core.fetch("s", 0, first).txns] == [after]  # type: ignore[attr-defined]
    assert core.log_seq() > seq  # type: ignore[attr-defined]
