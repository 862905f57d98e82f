"""Freeze and kill (tests/attack/freeze_kill.py, docs/development.md): a real worker
process held at each named point of an attempt and of firing a schedule, then frozen
past its lease or killed there, on SQLite, Redis, PostgreSQL and MariaDB.

`make test` runs a slice: each point and mode once, the stores taken in turn, and the
freeze between two steps on every store. ATTACK_LONG=1 (`make attack`) runs every
point and mode on every store. A parent's gather of child jobs has its points too."""

from __future__ import annotations

from itertools import product

import pytest

from tests.attack.freeze_kill import (
    CHILD_POINTS,
    CHUNK_POINTS,
    MODES,
    SCHEDULE_POINTS,
    STEP_POINTS,
    notes,
    run_children_case,
    run_chunk_case,
    run_rotate_case,
    run_schedule_case,
    run_step_case,
    run_undo_case,
)
from tests.attack.hostile import LONG

pytestmark = pytest.mark.slow
STORES = ("sqlite", "redis", "postgres", "mysql")
BETWEEN_STEPS = ("step.after", "freeze")  # the test below, on every store in either mode


def cases(points: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(point, mode, store): all of them with ATTACK_LONG, else each (point, mode) on one
    store, the stores in turn."""
    pairs = [pair for pair in product(points, MODES) if pair != BETWEEN_STEPS]
    if LONG:
        return [(point, mode, store) for (point, mode), store in product(pairs, STORES)]
    return [(point, mode, STORES[i % len(STORES)]) for i, (point, mode) in enumerate(pairs)]


def url_of(store: str, request: pytest.FixtureRequest, tmp_path) -> str:
    return f"sqlite:///{tmp_path}/deferq.db" if store == "sqlite" else request.getfixturevalue(f"{store}_url")


@pytest.mark.parametrize("store", STORES)
def test_a_worker_frozen_between_two_steps_runs_the_second_step_only_on_the_new_owner(store, request, tmp_path):
    """SIGSTOP a worker after its job's first step was kept, past its lease; another
    worker takes the job over and finishes it; SIGCONT: the frozen worker checks its
    lease before the second step, finds it lost, logs it and runs nothing more. The
    second step's function ran once (twice before the check)."""
    run_step_case(url_of(store, request, tmp_path), tmp_path, *BETWEEN_STEPS)
    assert notes(tmp_path)["two"] == 1


@pytest.mark.parametrize(("point", "mode", "store"), cases(STEP_POINTS))
def test_a_job_held_at_each_point_of_its_attempt_then_frozen_or_killed(point, mode, store, request, tmp_path):
    run_step_case(url_of(store, request, tmp_path), tmp_path, point, mode)


@pytest.mark.parametrize(("point", "mode", "store"), cases(SCHEDULE_POINTS))
def test_a_schedule_leader_held_at_a_tick_then_frozen_or_killed(point, mode, store, request, tmp_path):
    run_schedule_case(url_of(store, request, tmp_path), tmp_path, point, mode)


@pytest.mark.parametrize(("mode", "store"), [(mode, store) for mode in MODES for store in STORES] if LONG else
                         [("kill", "postgres"), ("freeze", "redis")])
def test_a_worker_held_mid_compensation_then_frozen_or_killed(mode, store, request, tmp_path):
    """Undo handlers run in reverse, each once, through a SIGKILL or a freeze past the lease."""
    run_undo_case(url_of(store, request, tmp_path), tmp_path, mode)


@pytest.mark.parametrize(("point", "mode", "store"), cases(CHILD_POINTS))
def test_a_parent_held_at_each_point_of_its_gather_then_frozen_or_killed(point, mode, store, request, tmp_path):
    run_children_case(url_of(store, request, tmp_path), tmp_path, point, mode)


@pytest.mark.parametrize(("point", "mode", "store"), cases(CHUNK_POINTS))
def test_a_chunk_tasks_worker_held_before_its_call_then_frozen_or_killed(point, mode, store, request, tmp_path):
    run_chunk_case(url_of(store, request, tmp_path), tmp_path, point, mode)


@pytest.mark.parametrize(("mode", "store"), [(mode, store) for mode in MODES for store in STORES] if LONG
                         else [("kill", "sqlite"), ("freeze", "redis")])
def test_a_rotate_held_between_opening_a_value_and_swapping_it_in(mode, store, request, tmp_path):
    """deferq encryption rotate, killed or frozen at rotate.reseal (docs/encryption.md):
    every value still opens, and a rotate run to its end leaves none under the old key."""
    run_rotate_case(url_of(store, request, tmp_path), tmp_path, mode)
