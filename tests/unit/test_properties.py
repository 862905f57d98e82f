"""Property tests for the core logic: retry schedules and weighted priorities."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deferq import backoff
from deferq.worker.priorities import PriorityRotation

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


# -- job ids made a batch at a time (job.new_job_ids) ---------------------------------


def _id_of(value: int) -> str:
    """The 26 characters of a 130-bit id value, written out the plain way."""
    return "".join("0123456789ABCDEFGHJKMNPQRSTVWXYZ"[(value >> shift) & 31] for shift in range(125, -1, -5))


@settings(deadline=None)  # up to 3,000 ids a case: past hypothesis' 200 ms on a loaded machine
@given(st.integers(0, 2**60), st.integers(1, 3000), st.integers(1, 6000))
def test_a_batch_of_ids_is_the_ids_one_at_a_time_would_be(high, count, offset):
    """Same format, in order, no repeats, and the next single id follows the batch,
    wherever the batch starts (across the points where its 22-character head changes)."""
    from deferq import job

    ms = 1_700_000_000_000  # a fixed clock: the counter, not urandom, decides
    clock = SimpleNamespace(time_ns=lambda: ms * 1_000_000)
    rand = (high + 1) * 2**18 - offset  # the head (first 22 characters) changes every 2**18 ids
    with job._id_lock:
        saved = list(job._last_id)
        job._last_id[:] = [ms, rand - 1]
    try:
        with patch.object(job, "time", clock):
            ids = job.new_job_ids(count)
            after = job.new_job_id()
    finally:
        with job._id_lock:
            job._last_id[:] = saved
    assert ids == [_id_of((ms << 82) | ((rand + i) << 2)) for i in range(count)]
    assert ids == sorted(ids) and len(set(ids)) == count
    assert after == _id_of((ms << 82) | ((rand + count) << 2)) and after > ids[-1]


def test_ids_of_batches_and_singles_keep_creation_order():
    from deferq.job import new_job_id, new_job_ids

    made = [*new_job_ids(500), new_job_id(), *new_job_ids(1), *new_job_ids(2000), new_job_id()]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert all(len(i) == 26 and i.isalnum() and i.isupper() for i in made)
    assert new_job_ids(0) == []
