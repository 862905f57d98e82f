"""Property tests for the core logic: retry schedules and weighted priorities."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deferq import backoff
from deferq.priorities import PriorityRotation

attempts = st.integers(min_value=1, max_value=10_000)


@given(attempts)
def test_linear_default_is_2n_plus_1_minutes(n):
    assert backoff.linear()(n) == (2 * (n - 1) + 1) * 60


def test_linear_first_five():
    assert [backoff.linear()(n) / 60 for n in range(1, 6)] == [1, 3, 5, 7, 9]


@given(
    base=st.floats(1, 10),
    first=st.floats(0, 100),
    cap=st.floats(0, 10_000),
    n=attempts,
)
def test_exponential_stays_within_half_and_full_nominal(base, first, cap, n):
    schedule = backoff.exponential(base=base, first=first, cap=cap)
    nominal = schedule.nominal(n)
    assert 0 <= nominal <= cap
    assert nominal / 2 <= schedule(n) <= nominal


@given(base=st.floats(1, 10), first=st.floats(0, 100), cap=st.floats(0, 10_000), n=attempts)
def test_exponential_never_shrinks_without_jitter(base, first, cap, n):
    schedule = backoff.exponential(base=base, first=first, cap=cap, jitter=False)
    assert schedule(n) <= schedule(n + 1)


@given(st.floats(0, 1e6), attempts)
def test_fixed_is_fixed(seconds, n):
    assert backoff.fixed(seconds)(n) == seconds


def test_negative_backoff_is_refused():
    with pytest.raises(ValueError):
        backoff.fixed(-1)
    with pytest.raises(ValueError):
        backoff.exponential(base=0.5)


weights = st.tuples(*(st.integers(1, 20),) * 3)


@given(weights, st.integers(1, 5))
def test_rotation_gives_each_level_exactly_its_weight(w, cycles):
    rotation = PriorityRotation(w)
    leads = Counter(rotation.next_order()[0] for _ in range(sum(w) * cycles))
    assert leads == {level: weight * cycles for level, weight in enumerate(w)}


@given(weights)
def test_no_level_waits_longer_than_one_cycle(w):
    rotation = PriorityRotation(w)
    seen_at: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for i in range(sum(w) * 3):
        seen_at[rotation.next_order()[0]].append(i)
    for positions in seen_at.values():
        gaps = [b - a for a, b in zip([-1, *positions], positions)]
        assert max(gaps) <= sum(w)


@given(weights)
def test_every_order_tries_every_level_once(w):
    rotation = PriorityRotation(w)
    for _ in range(sum(w)):
        assert sorted(rotation.next_order()) == [0, 1, 2]
