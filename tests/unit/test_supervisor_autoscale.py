"""The autoscaling rule, property-tested: bounded, no flapping, reaches max under load and
min when idle."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from deferq.supervisor.autoscale import Load, ScaleRules, ScaleState, decide, is_busy, is_calm

rules_st = st.builds(
    lambda low, extra, backlog, wait, every, down: ScaleRules(low, low + extra, backlog, wait, every, down),
    st.integers(0, 5), st.integers(0, 10), st.integers(1, 500),
    st.floats(0.5, 120), st.floats(0, 10), st.floats(0, 60),
)
load_st = st.builds(Load, st.integers(0, 10_000), st.floats(0, 600))
samples_st = st.lists(st.tuples(load_st, st.floats(0, 30)), max_size=60)


def run(rules: ScaleRules, samples, start: int | None = None):
    state, now, targets = ScaleState(rules.minimum if start is None else start), 0.0, []
    for load, step in samples:
        now += step
        state, _ = decide(rules, state, load, now)
        targets.append((now, state.target, load))
    return targets


@given(rules_st, samples_st)
def test_target_stays_within_limits(rules, samples):
    for _, target, _ in run(rules, samples):
        assert rules.minimum <= target <= rules.maximum


@given(rules_st, samples_st)
def test_changes_follow_the_rule(rules, samples):
    previous = rules.minimum
    last_down = None
    for now, target, load in run(rules, samples):
        if target > previous:
            assert is_busy(rules, previous, load)
        if target < previous:
            assert target == previous - 1 and is_calm(rules, previous, load)
            assert last_down is None or now - last_down >= rules.down_after
            last_down = now
        previous = target


@given(rules_st, load_st, st.lists(st.floats(0, 30), max_size=60), st.integers(0, 15))
def test_a_steady_load_never_flaps(rules, load, steps, start):
    """Under a constant load the target only moves one way."""
    targets = [t for _, t, _ in run(rules, [(load, s) for s in steps], rules.clamp(start))]
    ups = any(b > a for a, b in zip(targets, targets[1:], strict=False))
    downs = any(b < a for a, b in zip(targets, targets[1:], strict=False))
    assert not (ups and downs)


@settings(max_examples=50)
@given(rules_st)
def test_heavy_load_reaches_max_and_idleness_reaches_min(rules):
    heavy = Load(backlog=rules.up_backlog * (rules.maximum + 1), oldest_wait=0)
    targets = run(rules, [(heavy, rules.up_every + 0.1)] * (rules.maximum + 1))
    assert targets[-1][1] == rules.maximum
    idle = Load(0, 0)
    state = ScaleState(rules.maximum)
    now = 0.0
    for _ in range(2 * (rules.maximum + 1)):
        now += rules.down_after + 0.1
        state, _ = decide(rules, state, idle, now)
    assert state.target == rules.minimum


def test_a_burst_jumps_to_what_the_backlog_asks_and_each_change_says_why():
    rules = ScaleRules(1, 8, up_backlog=100, up_wait=30, up_every=5, down_after=60)
    state, why = decide(rules, ScaleState(1), Load(450, 2), now=100)
    assert state.target == 5 and "450 job(s) waiting" in why
    state, why = decide(rules, state, Load(5000, 3), now=102)  # too soon after growing
    assert state.target == 5 and why == ""
    state, why = decide(rules, state, Load(0, 0), now=110)  # calm starts
    state, why = decide(rules, state, Load(0, 0), now=169)
    assert state.target == 5
    state, why = decide(rules, state, Load(0, 0), now=171)
    assert state.target == 4 and why.startswith("calm for 61s")
