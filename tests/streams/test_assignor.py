"""The sticky assignor: balanced, deterministic, and it moves only what it must."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tstreams_embedded.streams.assignor import assign

members = st.lists(st.sampled_from([f"m{i}" for i in range(6)]), min_size=1, max_size=6, unique=True)


@given(st.integers(0, 40), members, st.data())
def test_balanced_complete_and_deterministic(n: int, live: list[str], data: st.DataObject) -> None:
    current = data.draw(st.dictionaries(st.integers(0, n), st.sampled_from(["m0", "m1", "gone"]), max_size=n))
    got = assign(range(n), live, current)
    assert sorted(got) == list(range(n))
    counts = [sum(1 for m in got.values() if m == x) for x in live]
    assert max(counts) - min(counts) <= 1
    assert assign(range(n), list(reversed(live)), dict(reversed(list(current.items())))) == got


@given(st.integers(1, 40), members, st.sampled_from([f"m{i}" for i in range(6, 9)]))
def test_a_joining_member_takes_only_its_share(n: int, live: list[str], newcomer: str) -> None:
    before = assign(range(n), live, {})
    after = assign(range(n), [*live, newcomer], before)
    moved = [p for p in range(n) if before[p] != after[p]]
    assert all(after[p] == newcomer for p in moved)
    assert len(moved) == n // (len(live) + 1)


@given(st.integers(1, 40), members.filter(lambda m: len(m) >= 2), st.data())
def test_a_leaving_member_moves_only_its_own_tasks(n: int, live: list[str], data: st.DataObject) -> None:
    before = assign(range(n), live, {})
    gone = data.draw(st.sampled_from(live))
    after = assign(range(n), [m for m in live if m != gone], before)
    assert [p for p in range(n) if before[p] != after[p]] == [p for p in range(n) if before[p] == gone]


def test_no_members_no_assignment() -> None:
    assert assign(range(3), [], {0: "x"}) == {}
