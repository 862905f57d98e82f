"""Property tests of durable steps on the memory store: random programs of steps, sleeps
and waits, with failures inside steps and between them, events sent before, during or
never; whatever the order, every step's function returns once (it runs again only after
it raised), every wait answers with its event or None at its timeout, the job succeeds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import deferq
from deferq import testing
from deferq.job import JobState

CHECKPOINTS = st.one_of(
    st.tuples(st.just("step"), st.integers(0, 2), st.booleans()),  # failures inside, a failure after
    st.tuples(st.just("sleep"), st.integers(1, 100), st.booleans()),  # seconds
    st.tuples(st.just("wait"), st.sampled_from(["before", "during", "never"]), st.booleans()),
)


def program_task(app: deferq.App, program, returned: list[int], raised: dict[int, int]):
    """The task that runs `program`; `returned` and `raised` record its steps' functions."""
    failed_after: set[int] = set()  # checkpoints after which the task failed once

    def work(index: int, failures: int) -> int:
        if raised.get(index, 0) < failures:
            raised[index] = raised.get(index, 0) + 1
            raise RuntimeError(f"step {index} fails")
        returned.append(index)
        return index * 10

    @app.task(name="program", max_attempts=100, backoff=deferq.backoff.fixed(0))
    def run_program() -> list[object]:
        job = deferq.current_job()
        assert job is not None
        answers: list[object] = []
        for index, (kind, value, fail_after) in enumerate(program):
            name = f"{kind} {index}"
            if kind == "step":
                assert job.step(name, work, index, value) == index * 10
            elif kind == "sleep":
                job.sleep(name, value)
            else:
                answers.append(job.wait_for(name, "evt", str(index), 50))
            if fail_after and index not in failed_after:
                failed_after.add(index)
                raise RuntimeError(f"fails after {index}")
        return answers

    return run_program


def drive(app: deferq.App, job: deferq.Job, program) -> deferq.Job:
    """Run the job until it ends: events sent when it waits for one sent "during" its
    wait, else time moved past every sleep and timeout."""
    for _ in range(100):
        testing.drain(app)
        found = app.get(job.id)
        assert found is not None
        if found.state.finished:
            return found
        waiting = [row for row in app.steps(job.id) if row["state"] == "waiting"]
        if waiting and program[int(waiting[0]["name"].split()[1])][1] == "during":
            app.send_event("evt", waiting[0]["key"], int(waiting[0]["key"]))
        else:
            testing.travel(app, 101)
    raise AssertionError("the job did not end")


@settings(max_examples=60, deadline=None)
@given(st.lists(CHECKPOINTS, min_size=1, max_size=6))
def test_random_programs_resume_without_redoing_a_step(program):
    app = deferq.App("memory://")
    returned: list[int] = []  # indexes of the steps whose function returned
    raised: dict[int, int] = {}  # step index -> how often its function raised
    job = program_task(app, program, returned, raised).enqueue()
    for index, (kind, when, _) in enumerate(program):
        if kind == "wait" and when == "before":  # sent before the job waits: kept for it
            app.send_event("evt", str(index), index)
    found = drive(app, job, program)
    assert found.state == JobState.SUCCEEDED, found.error
    steps = [i for i, (kind, _, _) in enumerate(program) if kind == "step"]
    assert sorted(returned) == steps  # each returned once
    assert raised == {i: program[i][1] for i in steps if program[i][1]}
    assert found.result == [i if when != "never" else None for i, (kind, when, _) in enumerate(program)
                            if kind == "wait"]
    app.close()
