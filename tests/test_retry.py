"""RetryPolicy: what it retries, how often, and the pauses between tries (on a fake clock)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstreams_embedded import errors
from tstreams_embedded.retry import RetryPolicy


class FakeTime:
    """A clock that only ``sleep`` moves, recording each pause."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.pauses.append(seconds)
        self.now += seconds


def failing(times: int, exc: Callable[[], BaseException], result: str = "done") -> Callable[[], str]:
    """A call that raises ``exc()`` its first ``times`` calls, then returns ``result``."""
    calls = itertools.count(1)

    def fn() -> str:
        if next(calls) <= times:
            raise exc()
        return result

    return fn


policies = st.builds(
    RetryPolicy,
    retry_on=st.just((errors.ClusterUnavailable,)),
    max_tries=st.integers(1, 30),  # (a policy that never works and never ends would loop for ever)
    deadline=st.none() | st.floats(0, 100),
    delay=st.floats(0, 5),
    backoff=st.floats(1, 4),
    max_delay=st.floats(5, 60),
    jitter=st.floats(0, 1),
)


@given(policies)
def test_the_pauses_before_jitter_never_decrease_and_stay_capped(policy: RetryPolicy) -> None:
    delays = list(itertools.islice(policy.delays(), 50))
    assert delays[0] == policy.delay
    assert all(a <= b for a, b in itertools.pairwise(delays))
    assert all(d <= policy.max_delay for d in delays)


@given(policies, st.integers(0, 2**32))
def test_tries_and_pauses_respect_max_tries_deadline_and_max_delay(policy: RetryPolicy, seed: int) -> None:
    t = FakeTime()
    calls = itertools.count(1)

    def never_works() -> None:
        next(calls)
        raise errors.ClusterUnavailable("down")

    with pytest.raises(errors.ClusterUnavailable, match="down"):
        policy.call(never_works, clock=t.clock, sleep=t.sleep, rand=random.Random(seed).random)
    tries = next(calls) - 1
    if policy.max_tries is not None:
        assert tries <= policy.max_tries
    if policy.deadline is not None:
        assert t.now <= policy.deadline + 1e-9
    slept = 0.0
    for pause, delay in zip(t.pauses, policy.delays(), strict=False):
        slept += pause
        assert pause <= delay <= policy.max_delay
        cut_at_the_deadline = policy.deadline is not None and slept == pytest.approx(policy.deadline)
        assert cut_at_the_deadline or pause >= delay * (1 - policy.jitter) - 1e-9
    assert len(t.pauses) == tries - 1


def test_a_call_that_recovers_returns_its_result_after_the_growing_pauses() -> None:
    t = FakeTime()
    policy = RetryPolicy(retry_on=(errors.ClusterUnavailable,), delay=0.1, backoff=2, max_delay=0.5)
    fn = failing(5, lambda: errors.ClusterUnavailable("no leader"))
    assert policy.call(fn, clock=t.clock, sleep=t.sleep) == "done"
    assert t.pauses == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])


def test_an_error_not_named_propagates_at_once() -> None:
    t = FakeTime()
    policy = RetryPolicy(retry_on=(errors.ClusterUnavailable,))
    with pytest.raises(errors.InvalidArgument):
        policy.call(failing(1, lambda: errors.InvalidArgument("bad")), clock=t.clock, sleep=t.sleep)
    assert t.pauses == []


def test_max_tries_reraises_the_last_error() -> None:
    t = FakeTime()
    n = itertools.count(1)
    policy = RetryPolicy(retry_on=(errors.ClusterUnavailable,), max_tries=3, delay=0.1, backoff=1, max_delay=0.1)
    with pytest.raises(errors.ClusterUnavailable, match="attempt 3"):
        policy.call(failing(10, lambda: errors.ClusterUnavailable(f"attempt {next(n)}")), clock=t.clock,
                    sleep=t.sleep)
    assert t.pauses == pytest.approx([0.1, 0.1])


def test_the_last_pause_is_cut_to_end_at_the_deadline_and_a_last_try_is_made_there() -> None:
    t = FakeTime()
    policy = RetryPolicy(retry_on=(errors.ClusterUnavailable,), deadline=1.0, delay=0.4, backoff=1, max_delay=0.4)
    with pytest.raises(errors.ClusterUnavailable):
        policy.call(failing(100, lambda: errors.ClusterUnavailable("down")), clock=t.clock, sleep=t.sleep)
    assert t.pauses == pytest.approx([0.4, 0.4, 0.2])
    assert t.now == pytest.approx(1.0)
    # one more try just at the deadline is what lets a call succeed there
    assert replace(policy, deadline=1.0).call(failing(3, lambda: errors.ClusterUnavailable("down")),
                                              clock=FakeTime().clock, sleep=FakeTime().sleep) == "done"


def test_stop_ends_the_retries_with_the_last_error() -> None:
    t = FakeTime()
    policy = RetryPolicy(retry_on=(errors.ClusterUnavailable,))
    with pytest.raises(errors.ClusterUnavailable):
        policy.call(failing(100, lambda: errors.ClusterUnavailable("down")), clock=t.clock, sleep=t.sleep,
                    stop=lambda: len(t.pauses) == 2)
    assert len(t.pauses) == 2


@pytest.mark.parametrize("options", [
    {"retry_on": ()}, {"retry_on": (int,)}, {"max_tries": 0}, {"deadline": -1.0}, {"delay": 2.0, "max_delay": 1.0},
    {"backoff": 0.5}, {"jitter": 1.5}, {"delay": float("nan")},
])
def test_a_bad_policy_is_refused(options: dict[str, object]) -> None:
    kwargs: dict[str, object] = {"retry_on": (errors.ClusterUnavailable,), **options}
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
